package membership

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestConfirmExpiry: a Lease unchanged for its duration is read again
// before its member is dropped, and only a read that shows the version
// suspected, with nothing newer observed meanwhile, drops it. A replica
// back from a 15 s network cut suspected a peer whose last renewal it had
// seen before the cut; its watch observed the peer's new renewal while
// the read was on its way, the read returned that same version, and the
// peer was judged expired: the replica took the peer's pieces for 14 ms
// beside it (TestNetworkCutWithControllers/cut).
func TestConfirmExpiry(t *testing.T) {
	renewed := func(rv string) *coordinationv1.Lease {
		l := lease("b", rv, "")
		l.Namespace = "ns"
		return l
	}
	for _, tc := range []struct {
		name string
		// duringRead: what happens while the fresh read is on its way
		// (nil: nothing); it returns the version the store then holds.
		duringRead  func(t *testing.T, m *Member, store *fakeStore) string
		wantExpired bool
	}{
		{name: "unchanged: expired", wantExpired: true},
		{
			name: "renewed, the read sees it first: counts from now",
			duringRead: func(t *testing.T, m *Member, store *fakeStore) string {
				return store.renew(t, "b")
			},
		},
		{
			name: "renewed, the watch sees it first and the read the same version",
			duringRead: func(t *testing.T, m *Member, store *fakeStore) string {
				rv := store.renew(t, "b")
				m.observe(store.lease(t, "b"), false)
				return rv
			},
		},
		{
			name: "deleted while the read was on its way: expired",
			duringRead: func(t *testing.T, m *Member, store *fakeStore) string {
				if err := store.Delete(context.Background(), "ns", "b", metav1.Preconditions{}); err != nil {
					t.Fatal(err)
				}
				return ""
			},
			wantExpired: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
			running := encoded(t, State{Incarnation: "b1", Seq: 1, Epoch: 1, View: "aa", Running: []string{"partition/1"}})
			first := renewed("")
			first.Annotations[StateAnnotation] = running
			store := newFakeStore(first)
			m, err := New(Config{Store: store, Namespace: "ns", Fleet: "f", Identity: "self", Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			m.observe(store.lease(t, "b"), false)
			clock.Step(DefaultLeaseDuration + time.Second)
			if tc.duringRead != nil {
				done := false
				store.setFail(func(verb, _, _ string) error {
					if verb == "get" && !done {
						done = true
						tc.duringRead(t, m, store)
					}
					return nil
				})
			}
			m.checkExpiries(context.Background())
			peers := m.Peers()
			expired := len(peers) == 0
			if expired != tc.wantExpired {
				t.Fatalf("expired %v, want %v (peers %+v)", expired, tc.wantExpired, peers)
			}
		})
	}
}

// renew writes name's Lease again, as its holder's renewal does, and
// returns its new version.
func (s *fakeStore) renew(t *testing.T, name string) string {
	t.Helper()
	l := s.lease(t, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	l.ResourceVersion = strconv.Itoa(s.rv)
	s.leases["ns/"+name] = l
	s.sendLocked(watch.Modified, l)
	return l.ResourceVersion
}

// lease reads name's Lease without the fault hook.
func (s *fakeStore) lease(t *testing.T, name string) *coordinationv1.Lease {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases["ns/"+name]
	if !ok {
		t.Fatalf("no lease %s", name)
	}
	return l.DeepCopy()
}
