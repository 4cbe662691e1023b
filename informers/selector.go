package informers

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// MaxSelectorTerms is the most namespaces one shard selector may name.
// kube-apiserver v1.36 parses a selector as a CEL expression of at most
// 100,000 code points, and one namespace term is 81 of them plus 4 for
// " || ": 1,176 terms fit (TestShardSelectorLimits measures it against the
// apiserver). A replica that owns more namespaces than --shard-selector-max-terms
// splits them across several requests.
const MaxSelectorTerms = 1176

// DefaultSelectorTerms keeps a request's URL near 7 KB, under the URL
// limits of common proxies in front of an apiserver (8 KB and up).
const DefaultSelectorTerms = 64

// DefaultNamespaceWatchMax bounds namespace-watch's watches per namespace
// and kind: every watch holds memory in kube-apiserver and the replica,
// so past 16 namespaces one cluster-wide watch per kind, filtered on the
// client, costs both sides less.
const DefaultNamespaceWatchMax = 16

// DefaultSelectedWatches are the resources whose owned cache watch names
// the loaded namespaces in a shard selector: Pods, the kind with the most
// events, whose unfiltered watches kube-apiserver closes for falling
// behind when it decodes every event for every replica.
var DefaultSelectedWatches = []string{"pods"}

// namespaceSelector is the shard selector that matches exactly the objects
// of namespaces (and those of any namespace whose FNV-1a hash collides with
// one of them, which the client filters out): the union of one point range
// [h, h+1) per namespace, in the apiserver's syntax, sorted so that it
// reads as the apiserver echoes it. namespaces must not be empty: an
// omitted selector matches everything.
func namespaceSelector(namespaces []string) string {
	hashes := make([]uint64, 0, len(namespaces))
	for _, ns := range namespaces {
		h := fnv.New64a()
		h.Write([]byte(ns))
		hashes = append(hashes, h.Sum64())
	}
	sort.Slice(hashes, func(i, j int) bool { return hashes[i] < hashes[j] })
	terms := make([]string, 0, len(hashes))
	for i, h := range hashes {
		if i > 0 && hashes[i-1] == h {
			continue
		}
		end := fmt.Sprintf("0x%016x", h+1)
		if h == ^uint64(0) {
			end = "0x10000000000000000"
		}
		terms = append(terms, fmt.Sprintf("shardRange(object.metadata.namespace, '0x%016x', '%s')", h, end))
	}
	return strings.Join(terms, " || ")
}

// chunks splits sorted namespaces into groups of at most size.
func chunks(namespaces []string, size int) [][]string {
	var out [][]string
	for len(namespaces) > size {
		out = append(out, namespaces[:size:size])
		namespaces = namespaces[size:]
	}
	if len(namespaces) > 0 {
		out = append(out, namespaces)
	}
	return out
}
