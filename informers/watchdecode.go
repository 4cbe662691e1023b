package informers

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// protobufPrefix starts every object in Kubernetes' protobuf encoding,
// before the runtime.Unknown envelope.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Field numbers of the messages read (k8s.io/apimachinery's
// generated.proto): runtime.Unknown{typeMeta 1, raw 2, contentEncoding 3},
// runtime.TypeMeta{kind 2}, an object's metadata 1 (every built-in kind),
// ObjectMeta{namespace 3, resourceVersion 6}.
const (
	unknownTypeMeta        protowire.Number = 1
	unknownRaw             protowire.Number = 2
	unknownContentEncoding protowire.Number = 3
	typeMetaKind           protowire.Number = 2
	objectMetadata         protowire.Number = 1
	metaNamespace          protowire.Number = 3
	metaResourceVersion    protowire.Number = 6
)

// skippedObject stands for an event's object the trunk did not decode (its
// namespace not loaded); its version still moves the source on.
type skippedObject struct {
	namespace, resourceVersion string
}

func (o *skippedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (o *skippedObject) DeepCopyObject() runtime.Object   { c := *o; return &c }

// namespaceSkippingDecoder decodes as inner does, except that an object of
// kind in a namespace keep refuses becomes a skippedObject, read from the
// protobuf envelope undecoded: the trunk drops most events, and decoding
// them is the part of that cost a client can avoid. Anything it cannot
// read (JSON, another kind such as an error's Status, a cluster-scoped
// object, an encoded envelope) is decoded in full.
type namespaceSkippingDecoder struct {
	inner runtime.Decoder
	kind  string
	keep  func(namespace string) bool
}

func (d *namespaceSkippingDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if kind, namespace, version, ok := peekProtobufObject(data); ok && kind == d.kind && namespace != "" && !d.keep(namespace) {
		return &skippedObject{namespace: namespace, resourceVersion: version}, nil, nil
	}
	return d.inner.Decode(data, defaults, into)
}

// namespaceSkippingSerializer is the serializer of the trunk's watch
// client (lists decode in full): each decoder it makes, which client-go's
// watch decoder uses per event, is a namespaceSkippingDecoder.
type namespaceSkippingSerializer struct {
	runtime.NegotiatedSerializer
	kind string
	keep func(namespace string) bool
}

func (s namespaceSkippingSerializer) DecoderToVersion(decoder runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return &namespaceSkippingDecoder{inner: s.NegotiatedSerializer.DecoderToVersion(decoder, gv), kind: s.kind, keep: s.keep}
}

// peekProtobufObject reads an object's kind, namespace and version undecoded;
// ok only for a plain (not content-encoded) protobuf envelope with metadata.
func peekProtobufObject(data []byte) (kind, namespace, resourceVersion string, ok bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return "", "", "", false
	}
	var raw []byte
	var sawRaw bool
	err := eachField(data[len(protobufPrefix):], func(n protowire.Number, v []byte) bool {
		switch n {
		case unknownTypeMeta:
			_ = eachField(v, func(n protowire.Number, v []byte) bool {
				if n == typeMetaKind {
					kind = string(v)
				}
				return true
			})
		case unknownRaw:
			raw, sawRaw = v, true
		case unknownContentEncoding:
			if len(v) > 0 {
				sawRaw = false
				return false
			}
		}
		return true
	})
	if err || !sawRaw {
		return "", "", "", false
	}
	var metadata []byte
	var sawMetadata bool
	if eachField(raw, func(n protowire.Number, v []byte) bool {
		if n == objectMetadata {
			metadata, sawMetadata = v, true
			return false
		}
		return true
	}) || !sawMetadata {
		return "", "", "", false
	}
	if eachField(metadata, func(n protowire.Number, v []byte) bool {
		switch n {
		case metaNamespace:
			namespace = string(v)
		case metaResourceVersion:
			resourceVersion = string(v)
		}
		return true
	}) {
		return "", "", "", false
	}
	return kind, namespace, resourceVersion, true
}

// eachField calls fn with each length-delimited field of message b, skipping
// the others, until fn returns false; it reports whether b is malformed.
func eachField(b []byte, fn func(protowire.Number, []byte) bool) (malformed bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return true
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return true
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return true
		}
		b = b[n:]
		if !fn(num, v) {
			return false
		}
	}
	return false
}
