package membership

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestJoinEndsOnceEveryMemberIsSeen: a join begins at the joining write
// and again when authority over KCM's Lease comes back, and ends before
// its lease duration only once a consistent list sent after it began is
// observed and every writer on the version of KCM's Lease that a renewal
// sent after it began replaced is seen; otherwise it lasts the lease
// duration.
func TestJoinEndsOnceEveryMemberIsSeen(t *testing.T) {
	ctx := context.Background()
	fleetLease := func(t *testing.T, name, incarnation string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "kube-system", Labels: map[string]string{FleetLabel: "f"},
			Annotations: map[string]string{StateAnnotation: encoded(t, State{Incarnation: incarnation, Seq: 1})},
		}}
	}
	type env struct {
		t     *testing.T
		m     *Member
		clock *clocktesting.FakeClock
	}
	join := func(e env) {
		e.clock.Step(time.Millisecond)
		e.m.mu.Lock()
		e.m.synced, e.m.joinedAt = true, e.clock.Now()
		e.m.mu.Unlock()
	}
	list := func(e env) {
		if err := e.m.listOnce(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
	renew := func(e env) {
		e.clock.Step(time.Millisecond)
		e.m.leader.tryAcquireOrRenew(ctx)
		if ok, _ := e.m.leader.authority(); !ok {
			e.t.Fatal("renewal of KCM's lease failed")
		}
	}
	recreated := func(name, incarnation string) func(env) {
		return func(e env) {
			l := fleetLease(e.t, name, incarnation)
			l.ResourceVersion = "1000"
			e.m.observe(l, false)
		}
	}
	leaseDuration := func(e env) { e.clock.Step(e.m.cfg.LeaseDuration) }
	type step struct {
		name    string
		do      func(env)
		joining bool
	}
	for _, tc := range []struct {
		name string
		// fleet: the other members' Leases in the apiserver (name:
		// incarnation); writers: the list on KCM's Lease.
		fleet    map[string]string
		writers  string
		noLeader bool
		steps    []step
		// kcmHolder holds KCM's Lease at the start (default: other).
		kcmHolder string
	}{
		{"every member seen", map[string]string{"other": "o1"}, `["other/o1"]`, false, []step{
			{"joined", join, true},
			{"renewed KCM's lease", renew, true},
			{"listed", list, false},
		}, ""},
		{"gaining authority over KCM's lease begins the join again", map[string]string{"other": "o1"}, `["other/o1"]`, false, []step{
			{"joined", join, true},
			{"listed", list, true},
			{"renewed KCM's lease: authority from here", renew, true},
			{"listed again", list, false},
			{"authority over KCM's lease ran out", func(e env) { e.clock.Step(e.m.leader.cfg.RenewDeadline) }, false},
			{"renewed again", renew, true},
			{"listed again", list, false},
		}, ""},
		{"a renewal from before the join does not count", map[string]string{"other": "o1"}, `["other/o1"]`, false, []step{
			{"renewed KCM's lease", renew, true},
			{"joined", join, true},
			{"listed", list, true},
			{"renewed again", renew, false},
		}, ""},
		{"a writer whose Lease was deleted by hand", nil, `["other/o1"]`, false, []step{
			{"joined", join, true},
			{"renewed KCM's lease: other listed as a writer", renew, true},
			{"listed: no Lease of other", list, true},
			{"other recreates its Lease", recreated("other", "o1"), false},
		}, ""},
		{"a member judged expired holds the join until it renews", map[string]string{"other": "o1"}, `["other/o1"]`, false, []step{
			{"joined", join, true},
			{"listed", list, true},
			{"other judged expired (an apiserver outage: no one renewed)", func(e env) {
				e.m.mu.Lock()
				e.m.obs["other"].expired = true
				e.m.mu.Unlock()
			}, true},
			{"renewed KCM's lease", renew, true},
			{"listed again", list, true},
			{"other renews", recreated("other", "o1"), false},
		}, ""},
		{"a writer's incarnation not seen", map[string]string{"other": "o2"}, `["other/o1"]`, false, []step{
			{"joined", join, true},
			{"renewed KCM's lease", renew, true},
			{"listed", list, true},
			{"a lease duration", leaseDuration, false},
		}, ""},
		{"a member listed as no writer is seen by the list", map[string]string{"other": "o1"}, `[]`, false, []step{
			{"joined", join, true},
			{"renewed KCM's lease", renew, true},
			{"listed", list, false},
		}, ""},
		{"unreadable writers", map[string]string{"other": "o1"}, `{`, false, []step{
			{"joined", join, true},
			{"renewed KCM's lease", renew, true},
			{"listed", list, true},
			{"a lease duration", leaseDuration, false},
		}, ""},
		{"writers listed under a KCM's hold do not hold a join", nil, `["gone/g1"]`, false, []step{
			{"joined", join, true},
			{"KCM holds its lease", func(e env) { e.m.leader.tryAcquireOrRenew(ctx) }, true},
			{"KCM stopped renewing, longer than a lease duration ago", func(e env) { e.clock.Step(e.m.leader.cfg.takeoverWait() + time.Second) }, false},
			{"taken over", renew, true},
			{"listed", list, false},
		}, "node-1_abc"},
		{"without KCM's lease a join lasts its lease duration", map[string]string{"other": "o1"}, "", true, []step{
			{"joined", join, true},
			{"listed", list, true},
			{"a lease duration", leaseDuration, false},
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(10000, 0))
			var leases []*coordinationv1.Lease
			for name, incarnation := range tc.fleet {
				leases = append(leases, fleetLease(t, name, incarnation))
			}
			holder := FleetHolderPrefix("kube-system", "f") + "other/o1"
			if tc.kcmHolder != "" {
				holder = tc.kcmHolder
			}
			kcm := kcmHeld(holder, clock.Now())
			kcm.Annotations = map[string]string{WritersAnnotation: tc.writers}
			leases = append(leases, kcm)
			store := newFakeStore(leases...)
			var m *Member
			if tc.noLeader {
				var err error
				m, err = New(Config{Store: store, Namespace: "kube-system", Fleet: "f", Identity: "self", Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
			} else {
				m = leaderLeaseMember(t, store, clock, "self")
			}
			e := env{t: t, m: m, clock: clock}
			for _, s := range tc.steps {
				s.do(e)
				if got := m.Joining(); got != s.joining {
					t.Fatalf("%s: joining %v, want %v", s.name, got, s.joining)
				}
			}
			if !m.Joining() {
				var names []string
				for _, p := range m.Peers() {
					names = append(names, p.Name)
				}
				if len(tc.fleet) > 0 && !slices.Contains(names, "other") {
					t.Errorf("join over without other among the peers %v", names)
				}
			}
		})
	}
}

// TestJoinAsksForARenewalOnce: a join that waits for a renewal of KCM's
// Lease asks for one at once, and only once per join.
func TestJoinAsksForARenewalOnce(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(10000, 0))
	m := leaderLeaseMember(t, newFakeStore(), clock, "self")
	m.mu.Lock()
	m.synced, m.joinedAt = true, clock.Now()
	m.mu.Unlock()
	for i := range 3 {
		if !m.Joining() {
			t.Fatal("not joining without a renewal")
		}
		if got := len(m.leader.renewNow); got != 1 {
			t.Fatalf("after %d calls: %d renewals asked, want 1", i+1, got)
		}
	}
	<-m.leader.renewNow
	m.Joining()
	if got := len(m.leader.renewNow); got != 0 {
		t.Fatalf("a renewal asked again in the same join")
	}
	clock.Step(time.Second)
	m.mu.Lock()
	m.joinedAt = clock.Now()
	m.mu.Unlock()
	m.Joining()
	if got := len(m.leader.renewNow); got != 1 {
		t.Fatalf("a new join asked %d renewals, want 1", got)
	}
}

// TestJoinListRefreshesObservations: the list a join waits for replaces
// what this member knew of the others from before the join (a replica
// back from a network cut still holds the states from before it), and
// keeps a deletion it has seen.
func TestJoinListRefreshesObservations(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(10000, 0))
	current := func(name string, seq uint64) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "kube-system", Labels: map[string]string{FleetLabel: "f"},
			Annotations: map[string]string{StateAnnotation: encoded(t, State{Incarnation: "i1", Seq: seq, Running: []string{"partition/7"}})},
		}}
	}
	store := newFakeStore(current("other", 9), current("gone", 9))
	m := leaderLeaseMember(t, store, clock, "self")
	stale := func(name string) *coordinationv1.Lease {
		l := current(name, 1)
		l.Annotations[StateAnnotation] = encoded(t, State{Incarnation: "i1", Seq: 1})
		l.ResourceVersion = "0"
		return l
	}
	m.observe(stale("other"), false)
	m.observe(stale("gone"), false)
	m.observe(stale("gone"), true)
	if err := m.listOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.obs["other"]; o.state.Seq != 9 || len(o.state.Running) != 1 {
		t.Errorf("other after the list: seq %d running %v, want seq 9 running [partition/7]", o.state.Seq, o.state.Running)
	}
	if o := m.obs["gone"]; !o.deleted {
		t.Errorf("the list undid a deletion already seen")
	}
}
