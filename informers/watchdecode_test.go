package informers

import (
	"bytes"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// encode writes obj as the apiserver writes a watch event's object: the
// protobuf envelope with its kind, or JSON.
func encode(t *testing.T, obj runtime.Object, gv schema.GroupVersion, json bool) []byte {
	t.Helper()
	var serializer runtime.Serializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	if json {
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		serializer = info.Serializer
	}
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(serializer, gv).Encode(obj, &buf); err != nil {
		t.Fatalf("encoding %T: %v", obj, err)
	}
	return buf.Bytes()
}

func objectMeta(namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: "x", Namespace: namespace, ResourceVersion: "4711", Labels: map[string]string{"app": "x"}}
}

func TestPeekProtobufObject(t *testing.T) {
	podWithStatus := &corev1.Pod{ObjectMeta: objectMeta("team-a"), Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	cases := []struct {
		name          string
		data          []byte
		wantOK        bool
		wantKind      string
		wantNamespace string
	}{
		{"pod", encode(t, podWithStatus, corev1.SchemeGroupVersion, false), true, "Pod", "team-a"},
		{"replicaset", encode(t, &appsv1.ReplicaSet{ObjectMeta: objectMeta("b")}, appsv1.SchemeGroupVersion, false), true, "ReplicaSet", "b"},
		{"deployment", encode(t, &appsv1.Deployment{ObjectMeta: objectMeta("b")}, appsv1.SchemeGroupVersion, false), true, "Deployment", "b"},
		{"job", encode(t, &batchv1.Job{ObjectMeta: objectMeta("c")}, batchv1.SchemeGroupVersion, false), true, "Job", "c"},
		{"endpointslice", encode(t, &discoveryv1.EndpointSlice{ObjectMeta: objectMeta("d"), AddressType: discoveryv1.AddressTypeIPv4}, discoveryv1.SchemeGroupVersion, false), true, "EndpointSlice", "d"},
		{"poddisruptionbudget", encode(t, &policyv1.PodDisruptionBudget{ObjectMeta: objectMeta("e")}, policyv1.SchemeGroupVersion, false), true, "PodDisruptionBudget", "e"},
		{"secret", encode(t, &corev1.Secret{ObjectMeta: objectMeta("f"), Data: map[string][]byte{"k": []byte("v")}}, corev1.SchemeGroupVersion, false), true, "Secret", "f"},
		{"cluster-scoped", encode(t, &corev1.Node{ObjectMeta: objectMeta("")}, corev1.SchemeGroupVersion, false), true, "Node", ""},
		// A Status's field 1 is ListMeta, whose field 3 (continue) reads
		// as a namespace: only the kind means anything here, and the
		// decoder checks it first.
		{"status of an error", encode(t, &metav1.Status{Status: metav1.StatusFailure, Message: "expired", ListMeta: metav1.ListMeta{Continue: "team-a"}}, corev1.SchemeGroupVersion, false), true, "Status", "team-a"},
		{"json", encode(t, podWithStatus, corev1.SchemeGroupVersion, true), false, "", ""},
		{"truncated", encode(t, podWithStatus, corev1.SchemeGroupVersion, false)[:20], false, "", ""},
		{"prefix only", protobufPrefix, false, "", ""},
		{"empty", nil, false, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kind, namespace, version, ok := peekProtobufObject(tc.data)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if kind != tc.wantKind || namespace != tc.wantNamespace {
				t.Errorf("kind, namespace = %q, %q; want %q, %q", kind, namespace, tc.wantKind, tc.wantNamespace)
			}
			if tc.wantKind != "Status" && version != "4711" {
				t.Errorf("resource version = %q, want 4711", version)
			}
		})
	}
}

func TestNamespaceSkippingDecoder(t *testing.T) {
	serializer := namespaceSkippingSerializer{
		NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
		kind:                 "Pod",
		keep:                 func(namespace string) bool { return namespace == "mine" },
	}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	decoder := serializer.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
	cases := []struct {
		name        string
		data        []byte
		wantSkipped bool
	}{
		{"pod of a kept namespace", encode(t, &corev1.Pod{ObjectMeta: objectMeta("mine")}, corev1.SchemeGroupVersion, false), false},
		{"pod of another namespace", encode(t, &corev1.Pod{ObjectMeta: objectMeta("theirs")}, corev1.SchemeGroupVersion, false), true},
		{"bookmark: a pod with only a version", encode(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4711"}}, corev1.SchemeGroupVersion, false), false},
		{"another kind of another namespace", encode(t, &corev1.ConfigMap{ObjectMeta: objectMeta("theirs")}, corev1.SchemeGroupVersion, false), false},
		{"status of an error, continue read as a namespace", encode(t, &metav1.Status{Status: metav1.StatusFailure, ListMeta: metav1.ListMeta{Continue: "theirs"}}, corev1.SchemeGroupVersion, false), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := runtime.Decode(decoder, tc.data)
			if err != nil {
				t.Fatalf("decoding: %v", err)
			}
			skipped, isSkipped := obj.(*skippedObject)
			if isSkipped != tc.wantSkipped {
				t.Fatalf("decoded %T, want skipped %v", obj, tc.wantSkipped)
			}
			if isSkipped && (skipped.namespace != "theirs" || skipped.resourceVersion != "4711") {
				t.Errorf("skipped %+v, want namespace theirs at version 4711", *skipped)
			}
		})
	}
}

// BenchmarkPodEventDecode compares decoding a running Pod's object as a
// watch event carries it with reading its namespace only.
func BenchmarkPodEventDecode(b *testing.B) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7d4b9c-x2k4p", Namespace: "bench-07", ResourceVersion: "123456", UID: "0b6f7c1e-3c1a-4f8e-9d0e-6f0c2b1a9e77",
			Labels: map[string]string{"app": "web", "pod-template-hash": "7d4b9c"}, GenerateName: "web-7d4b9c-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d4b9c", UID: "5e2d"}}},
		Spec: corev1.PodSpec{NodeName: "kwok-node-3", Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{}}}, Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.3.17", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, Image: "registry.k8s.io/pause:3.10", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), corev1.SchemeGroupVersion).Encode(pod, &buf); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	for _, bc := range []struct {
		name string
		keep bool
	}{{"decoded", true}, {"skipped", false}} {
		decoder := namespaceSkippingSerializer{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), kind: "Pod", keep: func(string) bool { return bc.keep }}.
			DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := runtime.Decode(decoder, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
