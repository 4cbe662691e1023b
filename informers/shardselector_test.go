package informers

import (
	"fmt"
	"hash/fnv"
	"math/big"
	"regexp"
	"strings"
	"testing"
)

// How the apiserver model reads a shard selector: the union of
// shardRange(object.metadata.namespace, lo, hi) terms that
// namespaceSelector writes, each [lo, hi) over the FNV-1a hash of the
// object's namespace, as kube-apiserver's ShardedListAndWatch reads them.

var shardRangeTerm = regexp.MustCompile(`^shardRange\(object\.metadata\.namespace, '0x([0-9a-f]+)', '0x([0-9a-f]+)'\)$`)

// parseNamespaceShards makes selector a test of a namespace; an empty
// selector selects every namespace.
func parseNamespaceShards(selector string) (func(namespace string) bool, error) {
	if selector == "" {
		return func(string) bool { return true }, nil
	}
	type hashRange struct{ lo, hi *big.Int }
	var ranges []hashRange
	for _, term := range strings.Split(selector, " || ") {
		m := shardRangeTerm.FindStringSubmatch(term)
		if m == nil {
			return nil, fmt.Errorf("the model reads only namespace shard ranges, not %q", term)
		}
		lo, _ := new(big.Int).SetString(m[1], 16)
		hi, _ := new(big.Int).SetString(m[2], 16)
		ranges = append(ranges, hashRange{lo, hi})
	}
	return func(namespace string) bool {
		h := fnv.New64a()
		_, _ = h.Write([]byte(namespace))
		sum := new(big.Int).SetUint64(h.Sum64())
		for _, r := range ranges {
			if sum.Cmp(r.lo) >= 0 && sum.Cmp(r.hi) < 0 {
				return true
			}
		}
		return false
	}, nil
}

func TestParseNamespaceShards(t *testing.T) {
	for _, tc := range []struct {
		name     string
		selector string
		in, out  []string
	}{
		{name: "empty selects all", selector: "", in: []string{"a", "b", ""}},
		{name: "one namespace", selector: namespaceSelector([]string{"a"}), in: []string{"a"}, out: []string{"b", "ab", ""}},
		{name: "several", selector: namespaceSelector([]string{"ns-1", "ns-7", "kube-system"}), in: []string{"ns-1", "ns-7", "kube-system"}, out: []string{"ns-2", "default"}},
		{name: "no namespace", selector: noNamespace, in: []string{""}, out: []string{"a", "ns-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			selects, err := parseNamespaceShards(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range tc.in {
				if !selects(ns) {
					t.Errorf("%q does not select %q", tc.selector, ns)
				}
			}
			for _, ns := range tc.out {
				if selects(ns) {
					t.Errorf("%q selects %q", tc.selector, ns)
				}
			}
		})
	}
	if _, err := parseNamespaceShards("shardRange(object.metadata.name, '0x0', '0x1')"); err == nil {
		t.Error("a range over names parsed")
	}
}
