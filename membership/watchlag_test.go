package membership

import (
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestListsWhenWatchLags: while the Lease watch has not delivered a
// renewal of this member sent more than RetryPeriod ago, each renewal
// asks for a list of the Leases; a delivery of the newest renewal, or
// of a later one it wrote, ends it. A delivery of a version it never
// wrote (another writer's) proves nothing.
func TestListsWhenWatchLags(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type step struct {
		renewed   string  // a renewal written at this version, at time at
		delivered string  // the watch delivers this version of its Lease
		at        float64 // seconds
		wantList  bool    // the renewal asks for a list
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"each renewal delivered at once", []step{
			{renewed: "1", at: 0}, {delivered: "1", at: 0.01},
			{renewed: "2", at: 2}, {delivered: "2", at: 2.01},
			{renewed: "3", at: 4}, {delivered: "3", at: 4.01},
		}},
		{"delivered a little late, within the retry period", []step{
			{renewed: "1", at: 0}, {renewed: "2", at: 1.9}, {delivered: "1", at: 1.95},
			{renewed: "3", at: 3.8}, {delivered: "3", at: 3.9},
		}},
		{"stalled: every renewal lists until the watch delivers", []step{
			{renewed: "1", at: 0}, {delivered: "1", at: 0.01},
			{renewed: "2", at: 2},
			{renewed: "3", at: 4.1, wantList: true},
			{renewed: "4", at: 6.1, wantList: true},
			{delivered: "2", at: 6.5},
			{renewed: "5", at: 8, wantList: true},
			{delivered: "5", at: 8.1},
			{renewed: "6", at: 10},
		}},
		{"delivered before the renewal's answer was read", []step{
			{delivered: "1", at: 0.005}, {renewed: "1", at: 0},
			{delivered: "2", at: 2.005}, {renewed: "2", at: 2},
			{renewed: "3", at: 4.1}, {delivered: "3", at: 4.2},
		}},
		{"another writer's version is not a delivery of ours", []step{
			{renewed: "1", at: 0},
			{delivered: "99", at: 1},
			{renewed: "2", at: 2.5, wantList: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Clock: clocktesting.NewFakeClock(t0)})
			if err != nil {
				t.Fatal(err)
			}
			m.logger = klog.Background()
			for i, s := range tc.steps {
				if s.delivered != "" {
					m.watchedOwn(lease("self", s.delivered, ""))
					continue
				}
				m.mu.Lock()
				before := m.listWanted
				m.renewedLocked(s.renewed, at(s.at))
				m.listIfWatchBehindLocked(at(s.at))
				listed := m.listWanted != before
				lagging := m.watchLagging
				m.mu.Unlock()
				if listed != s.wantList {
					t.Errorf("step %d (renewal %s at %vs): asked for a list %v, want %v", i, s.renewed, s.at, listed, s.wantList)
				}
				if lagging != s.wantList {
					t.Errorf("step %d: lagging %v, want %v", i, lagging, s.wantList)
				}
			}
		})
	}
}
