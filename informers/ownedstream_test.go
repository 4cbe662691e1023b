package informers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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

// TestClosedWait: the wait after a watch closed early doubles (with jitter
// up to as much again) while watches keep being closed soon after opening,
// caps at 8-16 s, and starts over after a watch that stayed open
// closedBackoffReset, as a restart of kube-apiserver closes every watch
// however long it was open.
func TestClosedWait(t *testing.T) {
	const quick = time.Second
	long := closedBackoffReset
	for _, tc := range []struct {
		name   string
		lasted []time.Duration
		// bases: each wait lies in [base, 2*base).
		bases []time.Duration
	}{
		{"closed again and again soon after opening",
			[]time.Duration{quick, quick, quick, quick, quick, quick},
			[]time.Duration{1, 2, 4, 8, 8, 8}},
		{"long-lived watches closed by restarts",
			[]time.Duration{long, 2 * long, long, 10 * long},
			[]time.Duration{1, 1, 1, 1}},
		{"a long-lived watch after quick closes",
			[]time.Duration{quick, quick, quick, long, quick},
			[]time.Duration{1, 2, 4, 1, 2}},
		{"just short of the reset",
			[]time.Duration{quick, long - time.Millisecond},
			[]time.Duration{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newClosedBackoff()
			for i, lasted := range tc.lasted {
				base := tc.bases[i] * time.Second
				if got := closedWait(&b, lasted); got < base || got > 2*base {
					t.Errorf("close %d (watch lasted %v): wait %v, want within [%v, %v]", i, lasted, got, base, 2*base)
				}
			}
		})
	}
}

// TestWatchFailedStartsClosedWaitOver: a watch that cannot open (the
// apiserver away or not ready) means the close before it was the
// apiserver's going, so the next close waits 1-2 s again.
func TestWatchFailedStartsClosedWaitOver(t *testing.T) {
	p := &producer{ownedStream: &ownedStream{}, logger: klog.Background(), closedBackoff: newClosedBackoff()}
	for range 4 {
		closedWait(&p.closedBackoff, time.Second)
	}
	if end := p.watchFailed(context.Background(), errors.New("connection refused")); end != roundAgain {
		t.Fatalf("watchFailed = %v, want a new round", end)
	}
	if got := closedWait(&p.closedBackoff, time.Second); got < time.Second || got > 2*time.Second {
		t.Errorf("the first wait after a failed open = %v, want within [1s, 2s]", got)
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
