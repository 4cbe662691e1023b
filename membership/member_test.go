package membership

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

func lease(name, rv, state string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: name, ResourceVersion: rv,
		Annotations: map[string]string{StateAnnotation: state},
	}}
}

func encoded(t *testing.T, s State) string {
	t.Helper()
	s.Version = StateVersion
	v, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestObserve checks the rules that keep observations honest: older states
// of an incarnation are dropped, garbage keeps the last good state, a
// deleted Lease that listed pieces stays a ghost until it would have
// expired, and one that left gracefully goes at once.
func TestObserve(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	running := State{Incarnation: "b1", Seq: 5, Epoch: 2, View: "aa", Running: []string{"partition/1"}}
	m.observe(lease("b", "10", encoded(t, running)), false)
	m.observe(lease("self", "11", encoded(t, running)), false)

	peers := m.Peers()
	if len(peers) != 1 || peers[0].Name != "b" || !peers[0].Participant || peers[0].State.Seq != 5 {
		t.Fatalf("want b as a participant at seq 5 (and not self), got %+v", peers)
	}

	older := running
	older.Seq, older.Running = 4, nil
	m.observe(lease("b", "12", encoded(t, older)), false)
	if got := m.Peers()[0].State; got.Seq != 5 || !got.Runs("partition/1") {
		t.Fatalf("an older state replaced a newer one: %+v", got)
	}

	m.observe(lease("b", "13", "garbage"), false)
	if got := m.Peers()[0].State; got.Seq != 5 {
		t.Fatalf("garbage replaced the last good state: %+v", got)
	}
	m.observe(lease("stranger", "14", "garbage"), false)
	if len(m.Peers()) != 1 {
		t.Fatalf("a Lease never seen good counts as a member: %+v", m.Peers())
	}

	m.observe(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: lease("b", "15", "garbage")}, true)
	peers = m.Peers()
	if len(peers) != 1 || !peers[0].Participant || !peers[0].State.Runs("partition/1") {
		t.Fatalf("a Lease deleted by hand must count as a member for a lease duration: %+v", peers)
	}
	clock.Step(DefaultLeaseDuration + time.Second)
	if peers := m.Peers(); len(peers) != 0 {
		t.Fatalf("the ghost outlived its lease duration: %+v", peers)
	}

	// Nothing running changes nothing: a live member may be about to start
	// what others acknowledged to it.
	idle := State{Incarnation: "d1", Seq: 3, Epoch: 4, View: "aa"}
	m.observe(lease("d", "20", encoded(t, idle)), false)
	m.observe(lease("d", "21", encoded(t, idle)), true)
	if peers := m.Peers(); len(peers) != 1 || !peers[0].Participant {
		t.Fatalf("a Lease with nothing running deleted by hand must still count: %+v", peers)
	}
	clock.Step(DefaultLeaseDuration + time.Second)

	left := State{Incarnation: "c1", Seq: 9, Epoch: 1, Leaving: true}
	m.observe(lease("c", "16", encoded(t, left)), false)
	m.observe(lease("c", "17", encoded(t, left)), true)
	if peers := m.Peers(); len(peers) != 0 {
		t.Fatalf("a member that left gracefully still counts: %+v", peers)
	}

	restarted := State{Incarnation: "b2", Seq: 1, Epoch: 1, View: "bb"}
	m.observe(lease("b", "18", encoded(t, restarted)), false)
	m.observe(lease("b", "19", encoded(t, State{Incarnation: "b1", Seq: 99, Epoch: 9, View: "aa"})), false)
	if got := m.Peers()[0].State; got.Incarnation != "b2" {
		t.Fatalf("a retired incarnation came back: %+v", got)
	}
}

// TestObserveSupports: what a peer supports is read from the same Lease
// write as its state; a Lease without the annotation (a release from
// before it) or with an unreadable one supports nothing it says; and a
// member writes its own into its Lease.
func TestObserveSupports(t *testing.T) {
	m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self",
		Supports: Supports{Placements: []string{"p/v2", "p/v3"}, StateVersions: StateVersions}})
	if err != nil {
		t.Fatal(err)
	}
	with := func(l *coordinationv1.Lease, supports string) *coordinationv1.Lease {
		l.Annotations[SupportsAnnotation] = supports
		return l
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  []string
	}{
		{"a release from before the annotation", lease("b", "1", encoded(t, State{Incarnation: "b1", Seq: 1})), nil},
		{"what it says", with(lease("b", "2", encoded(t, State{Incarnation: "b1", Seq: 2})), `{"placements":["p/v2"],"stateVersions":[1]}`), []string{"p/v2"}},
		{"unreadable: as a release from before", with(lease("b", "3", encoded(t, State{Incarnation: "b1", Seq: 3})), `{"placements":"p/v2"}`), nil},
		{"an older state does not bring its supports back", with(lease("b", "4", encoded(t, State{Incarnation: "b1", Seq: 1})), `{"placements":["p/v9"]}`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.observe(tc.lease, false)
			peers := m.Peers()
			if len(peers) != 1 || !slices.Equal(peers[0].Supports.Placements, tc.want) {
				t.Fatalf("got %+v, want placements %v", peers, tc.want)
			}
		})
	}
	own := m.leaseObject(&coordinationv1.Lease{}, "state", time.Now())
	if got, err := ParseSupports(own.Annotations[SupportsAnnotation]); err != nil || !slices.Equal(got.Placements, []string{"p/v2", "p/v3"}) {
		t.Errorf("own Lease: supports %q (%v), want p/v2 and p/v3", own.Annotations[SupportsAnnotation], err)
	}
}

// TestSupersededIncarnationStaysListed: a new incarnation that creates its
// Lease at once (it found it deleted) does not free what the old one
// listed: another member could start those pieces while the old process
// still acts or its writes are on their way. They stay listed, by a
// ghost, for a lease duration from when the old one was last seen.
func TestSupersededIncarnationStaysListed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old       State
		deleted   bool // the old Lease deleted by hand before the new one
		wantGhost bool
	}{
		{"deleted by hand, then recreated", State{Incarnation: "b1", Seq: 5, View: "aa", Running: []string{"partition/1"}}, true, true},
		{"replaced while listed", State{Incarnation: "b1", Seq: 5, View: "aa", Running: []string{"partition/1"}}, false, true},
		{"nothing was running", State{Incarnation: "b1", Seq: 5, View: "aa"}, true, false},
		{"left gracefully", State{Incarnation: "b1", Seq: 5, Leaving: true}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
			m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			m.observe(lease("b", "10", encoded(t, tc.old)), false)
			if tc.deleted {
				clock.Step(time.Second)
				m.observe(lease("b", "11", encoded(t, tc.old)), true)
			}
			clock.Step(time.Second)
			m.observe(lease("b", "12", encoded(t, State{Incarnation: "b2", Seq: 1, Joining: true})), false)
			ghost := func() *Peer {
				for _, p := range m.Peers() {
					if p.State.Incarnation == "b1" {
						return &p
					}
				}
				return nil
			}
			g := ghost()
			if (g != nil) != tc.wantGhost {
				t.Fatalf("ghost of b1 = %+v, want one: %v (peers %+v)", g, tc.wantGhost, m.Peers())
			}
			if g == nil {
				return
			}
			if g.Participant || !g.State.Runs("partition/1") {
				t.Fatalf("the ghost must list partition/1 without taking part in views: %+v", g)
			}
			clock.Step(DefaultLeaseDuration)
			if g := ghost(); g != nil {
				t.Fatalf("the ghost outlived a lease duration from when b1 was last seen: %+v", g)
			}
			if peers := m.Peers(); len(peers) != 1 || peers[0].State.Incarnation != "b2" {
				t.Fatalf("want b2 alone, got %+v", peers)
			}
		})
	}
}
