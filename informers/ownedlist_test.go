package informers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// TestFeederListsSinceTrunk checks which feeders' lists are consistent
// reads and which ask only for a version no older than their trunk's: a
// feeder of namespaces created in loaded partitions (created) need not
// wait for the watch cache to be as new as etcd; one of a gain must
// (another replica may have written into its namespaces just before).
func TestFeederListsSinceTrunk(t *testing.T) {
	for _, tc := range []struct {
		name           string
		sharded        bool
		created        bool
		wantVersion    string
		wantMatchOlder bool
	}{
		{name: "shard selectors, created", sharded: true, created: true, wantVersion: "42", wantMatchOlder: true},
		{name: "shard selectors, gained", sharded: true},
		{name: "per namespace, created", created: true, wantVersion: "42", wantMatchOlder: true},
		{name: "per namespace, gained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var queries []url.Values
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				queries = append(queries, r.URL.Query())
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"50"},"items":[]}`))
			}))
			defer server.Close()
			client, err := rest.RESTClientFor(&rest.Config{Host: server.URL, APIPath: "/api", ContentConfig: rest.ContentConfig{
				GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
			if err != nil {
				t.Fatal(err)
			}
			target := &listWatchTarget{client: client, resource: "pods", listKind: corev1.SchemeGroupVersion.WithKind("PodList")}
			lw := newOwnedListWatch(func() (*listWatchTarget, error) { return target, nil }, tc.sharded, 3, 0)
			trunk := &source{namespaces: []string{"a", "b"}, version: "42"}
			feeder := &source{namespaces: []string{"b"}, feeds: trunk, created: tc.created}
			if _, versions, err := lw.listSource(context.Background(), target, feeder, false); err != nil {
				t.Fatal(err)
			} else if versions["b"] != "50" {
				t.Errorf("namespace b read at %q, want the list's version 50", versions["b"])
			}
			if len(queries) != 1 {
				t.Fatalf("%d requests, want 1", len(queries))
			}
			q := queries[0]
			if got := q.Get("resourceVersion"); got != tc.wantVersion {
				t.Errorf("resourceVersion=%q, want %q", got, tc.wantVersion)
			}
			if got := q.Get("resourceVersionMatch") == "NotOlderThan"; got != tc.wantMatchOlder {
				t.Errorf("resourceVersionMatch=%q", q.Get("resourceVersionMatch"))
			}
		})
	}
}
