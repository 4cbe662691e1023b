//go:build e2e

package e2e

import (
	"net/url"
	"slices"
	"testing"
	"time"
)

// TestSelectorNamespaces: a list's shard selector names namespaces only by
// point ranges; a wider range (a list of everything, say) names none, so
// that it cannot pass as the first list of namespaces never listed.
func TestSelectorNamespaces(t *testing.T) {
	uri := func(selector string) string {
		return "/api/v1/pods?limit=500&shardSelector=" + url.QueryEscape(selector)
	}
	for _, tc := range []struct {
		name string
		uri  string
		want []string
	}{
		{"two namespaces", uri("shardRange(object.metadata.namespace, '0x00000000000000a0', '0x00000000000000a1') || shardRange(object.metadata.namespace, '0xfffffffffffffffe', '0xffffffffffffffff')"), []string{"00000000000000a0", "fffffffffffffffe"}},
		{"the last hash", uri("shardRange(object.metadata.namespace, '0xffffffffffffffff', '0x10000000000000000')"), []string{"ffffffffffffffff"}},
		{"everything", uri("shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"), nil},
		{"a point and a wide range", uri("shardRange(object.metadata.namespace, '0x00000000000000a0', '0x00000000000000a1') || shardRange(object.metadata.namespace, '0x00000000000000b0', '0x00000000000000c0')"), nil},
		{"no selector", "/api/v1/pods?limit=500", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := selectorNamespaces(tc.uri); !slices.Equal(got, tc.want) {
				t.Errorf("selectorNamespaces = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRelistAfterWatchEnd: a list is the relist of a kind whose watch
// ended only if it is the first list of the kind since, and within
// relistAfterWatchEndWithin of the end.
func TestRelistAfterWatchEnd(t *testing.T) {
	base := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	ended := base.Add(10 * time.Second)
	for _, tc := range []struct {
		name    string
		at      time.Time
		earlier []time.Time // other lists of the kind
		want    bool
	}{
		{"soon after", ended.Add(2 * time.Second), nil, true},
		{"a minute after", ended.Add(time.Minute), nil, true},
		{"long after", ended.Add(relistAfterWatchEndWithin + time.Second), nil, false},
		{"before any end", base, nil, false},
		{"second list after the end", ended.Add(3 * time.Second), []time.Time{ended.Add(time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cacheRequests{watchEnded: map[string][]time.Time{"pods": {ended}}}
			for _, at := range tc.earlier {
				r.allListed = append(r.allListed, auditedList{resource: "pods", at: at})
			}
			if _, got := r.relistAfterWatchEnd("pods", tc.at); got != tc.want {
				t.Errorf("relistAfterWatchEnd = %v, want %v", got, tc.want)
			}
		})
	}
}
