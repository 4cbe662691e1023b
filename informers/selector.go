package informers

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// MaxSelectorTerms is the most namespaces one shard selector may name:
// kube-apiserver v1.36 parses at most 100,000 code points of CEL, and a term
// is 81 plus 4 for " || " (TestShardSelectorLimits). More namespaces than
// --shard-selector-max-terms are split across requests.
const MaxSelectorTerms = 1176

// DefaultSelectorTerms keeps a request's URL near 7 KB, under the URL
// limits of common proxies in front of an apiserver (8 KB and up).
const DefaultSelectorTerms = 64

// DefaultNamespaceWatchMax bounds namespace-watch's watches per namespace
// and kind: each holds memory in kube-apiserver and the replica, so past 16
// namespaces one client-filtered cluster-wide watch per kind costs less.
const DefaultNamespaceWatchMax = 16

// DefaultSelectedWatches are the selected kinds' resources: Pods, the kind
// with the most events, whose unfiltered watches kube-apiserver closes for
// falling behind when it decodes every event for every replica.
var DefaultSelectedWatches = []string{"pods"}

// namespaceSelector matches exactly the objects of namespaces (and of any
// namespace whose FNV-1a hash collides, filtered on the client): one point
// range [h, h+1) per namespace, sorted as the apiserver echoes it.
// namespaces must not be empty: an omitted selector matches everything.
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
