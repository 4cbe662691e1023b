package informers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func TestClosedEarly(t *testing.T) {
	seconds := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name    string
		timeout *int64
		open    time.Duration
		want    bool
	}{
		{"no timeout asked", nil, time.Second, false},
		{"zero timeout", seconds(0), time.Second, false},
		{"closed a second after opening", seconds(300), time.Second, true},
		{"closed well before its timeout", seconds(300), 200 * time.Second, true},
		{"ended by its timeout", seconds(300), 300 * time.Second, false},
		{"ended within the slack of its timeout", seconds(300), 300*time.Second - closedEarlySlack/2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ownedStream{timeout: tc.timeout}
			if got := s.closedEarly(time.Now().Add(-tc.open)); got != tc.want {
				t.Errorf("closedEarly after %v with timeout %v = %v, want %v", tc.open, tc.timeout, got, tc.want)
			}
		})
	}
}

func TestClosedBackoffGrowsAndCaps(t *testing.T) {
	b := newClosedBackoff()
	var steps []time.Duration
	for range 6 {
		steps = append(steps, b.Step())
	}
	// Jitter 1: each step lies in [d, 2d) of its base d.
	bases := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, got := range steps {
		if got < bases[i] || got > 2*bases[i] {
			t.Errorf("step %d = %v, want within [%v, %v]", i, got, bases[i], 2*bases[i])
		}
	}
}

// TestRelistSendsOnlyWhatChanged: a source's fresh list (its version
// expired) hands the informer what changed since it was last sent, and
// deletions of what the list no longer has; an object the store holds at
// the listed version is not sent again, since the informer would hand it
// to every handler as an update of nothing, unless its deletion is on its
// way (its namespace was unloaded and loaded again).
func TestRelistSendsOnlyWhatChanged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stored   string // version in the informer's store ("": absent)
		purged   bool   // its deletion not yet in the store (not in the ledger)
		listed   string // version in the list ("": absent)
		wantSent watch.EventType
	}{
		{name: "unchanged", stored: "3", listed: "3"},
		{name: "unchanged, its deletion on its way", stored: "3", purged: true, listed: "3", wantSent: watch.Added},
		{name: "changed", stored: "4", listed: "7", wantSent: watch.Added},
		{name: "new", listed: "8", wantSent: watch.Added},
		{name: "gone", stored: "2", wantSent: watch.Deleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := &listWatchTarget{resource: "pods", listKind: corev1.SchemeGroupVersion.WithKind("PodList")}
			lw := newOwnedListWatch(func() (*listWatchTarget, error) { return target, nil }, true, 10, 0)
			store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			lw.indexer = func() cache.Indexer { return store }
			src := &source{namespaces: []string{"a"}, version: "5"}
			lw.sources[src] = struct{}{}
			lw.loaded["a"] = true
			pod := func(version string) *corev1.Pod {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", ResourceVersion: version}}
			}
			if tc.stored != "" {
				if err := store.Add(pod(tc.stored)); err != nil {
					t.Fatal(err)
				}
				if !tc.purged {
					record(lw.ledger, "a", "p")
				}
			}
			var events []watch.Event
			if tc.listed != "" {
				events = append(events, watch.Event{Type: watch.Added, Object: pod(tc.listed)})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &ownedStream{lw: lw, target: target, ctx: ctx, cancel: cancel, out: make(chan watch.Event, 10), producers: map[*source]context.CancelFunc{}}
			if !s.emit(ctx, src, nil, events, "9", map[string]string{"a": "9", "": "9"}) {
				t.Fatal("emit ended early")
			}
			close(s.out)
			var sent []watch.EventType
			for e := range s.out {
				if e.Type != watch.Bookmark {
					sent = append(sent, e.Type)
				}
			}
			var want []watch.EventType
			if tc.wantSent != "" {
				want = append(want, tc.wantSent)
			}
			if !slices.Equal(sent, want) {
				t.Errorf("sent %v, want %v", sent, want)
			}
			if src.version != "9" {
				t.Errorf("source's version %q after the list, want 9", src.version)
			}
		})
	}
}
