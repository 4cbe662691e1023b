package membership

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var testLeaderLease = LeaderLeaseConfig{
	Namespace: "kube-system", Name: "kube-controller-manager",
	LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
}

func leaderLeaseMember(t *testing.T, store *fakeStore, clock *clocktesting.FakeClock, identity string) *Member {
	t.Helper()
	cfg := testLeaderLease
	m, err := New(Config{Store: store, Namespace: "kube-system", Fleet: "f", Identity: identity, Clock: clock, LeaderLease: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func getLeaderLease(t *testing.T, store *fakeStore) *coordinationv1.Lease {
	t.Helper()
	l, err := store.Get(context.Background(), "kube-system", "kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func kcmHeld(holder string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: "kube-system"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15)),
			AcquireTime: &metav1.MicroTime{Time: renew}, RenewTime: &metav1.MicroTime{Time: renew},
			LeaseTransitions: ptr.To(int32(3)),
		},
	}
}

// TestLeaderLeaseWaitsForKubeControllerManager: a Lease a KCM keeps
// renewing gives no authority and says why; one it stopped renewing is
// taken once the KCM has certainly stopped acting, on this replica's clock.
func TestLeaderLeaseWaitsForKubeControllerManager(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(10000, 0))
	store := newFakeStore(kcmHeld("node-1_abc", clock.Now()))
	m := leaderLeaseMember(t, store, clock, "r1")
	m.deadline = clock.Now().Add(time.Hour) // the fleet's own Lease is fine

	m.leader.tryAcquireOrRenew(ctx)
	if m.Valid() {
		t.Fatal("authority while kube-controller-manager holds its Lease")
	}
	if why := m.WhyNoAuthority(); !strings.Contains(why, "waiting for kube-controller-manager node-1_abc to release its leader lease") {
		t.Fatalf("reason %q does not name the holder", why)
	}
	// KCM keeps renewing: still waiting after more than a lease duration.
	for range 10 {
		clock.Step(2 * time.Second)
		l := getLeaderLease(t, store)
		l.Spec.RenewTime = &metav1.MicroTime{Time: clock.Now()}
		if _, err := store.Update(ctx, l); err != nil {
			t.Fatal(err)
		}
		m.leader.tryAcquireOrRenew(ctx)
		if m.Valid() {
			t.Fatalf("took the Lease of a KCM that renews it, at %v", clock.Now())
		}
	}
	// KCM stops: not before it certainly stopped acting, 17 s after the
	// last change seen (a lease duration would be 15).
	clock.Step(16 * time.Second)
	m.leader.tryAcquireOrRenew(ctx)
	if m.Valid() {
		t.Fatal("took the Lease while the KCM may still act on its last renewal")
	}
	clock.Step(2 * time.Second)
	m.leader.tryAcquireOrRenew(ctx)
	if !m.Valid() {
		t.Fatalf("did not take an expired Lease: %s", m.WhyNoAuthority())
	}
	l := getLeaderLease(t, store)
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != FleetHolderPrefix("kube-system", "f")+"r1/"+m.Incarnation() {
		t.Fatalf("holder %q", got)
	}
	if got := ptr.Deref(l.Spec.LeaseTransitions, 0); got != 4 {
		t.Fatalf("lease transitions %d, want 4", got)
	}
	if _, until := m.Authority(); !until.Equal(clock.Now().Add(testLeaderLease.RenewDeadline)) {
		t.Fatalf("authority until %v, want the send time plus the renew deadline", until)
	}
}

// TestLeaderLeaseRenewalsLookNewToKubeControllerManager: client-go compares
// the record's JSON, whose times have whole seconds; renewals by several
// replicas within one second must each change it, or a KCM would count
// its lease duration from an older renewal.
func TestLeaderLeaseRenewalsLookNewToKubeControllerManager(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(20000, 0))
	store := newFakeStore()
	a := leaderLeaseMember(t, store, clock, "a")
	b := leaderLeaseMember(t, store, clock, "b")
	seen := map[string]bool{}
	for i := range 6 {
		for _, m := range []*Member{a, b} {
			clock.Step(100 * time.Millisecond)
			m.leader.tryAcquireOrRenew(ctx)
			if !m.leader.isHeld() {
				t.Fatalf("renewal %d of %s failed: %s", i, m.Identity(), m.leader.whyNot())
			}
			_, raw, err := record(getLeaderLease(t, store))
			if err != nil {
				t.Fatal(err)
			}
			if seen[string(raw)] {
				t.Fatalf("renewal %d of %s left a record KCM had seen before: %s", i, m.Identity(), raw)
			}
			seen[string(raw)] = true
		}
	}
	if got := getLeaderLease(t, store).Annotations[WritersAnnotation]; !strings.Contains(got, "a/"+a.Incarnation()) || !strings.Contains(got, "b/"+b.Incarnation()) {
		t.Fatalf("writers %s do not list both replicas", got)
	}
}

// TestLeaderLeaseLeave: a replica leaving while another writer may still
// act only takes itself off the list; the last one releases the Lease as
// client-go does, so a KCM takes it at its next try.
func TestLeaderLeaseLeave(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(30000, 0))
	store := newFakeStore()
	a := leaderLeaseMember(t, store, clock, "a")
	b := leaderLeaseMember(t, store, clock, "b")
	a.leader.tryAcquireOrRenew(ctx)
	clock.Step(time.Second)
	b.leader.tryAcquireOrRenew(ctx)
	// Each sees the other alive in the fleet.
	a.observe(memberLease(t, "b", "1", State{Incarnation: b.Incarnation(), Seq: 1}), false)
	b.observe(memberLease(t, "a", "2", State{Incarnation: a.Incarnation(), Seq: 1}), false)

	if err := leave(t, a, clock); err != nil {
		t.Fatal(err)
	}
	l := getLeaderLease(t, store)
	if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		t.Fatal("released while b may still act on its renewal")
	}
	if got := l.Annotations[WritersAnnotation]; strings.Contains(got, "a/") || !strings.Contains(got, "b/") {
		t.Fatalf("writers after a left: %s", got)
	}
	a.leader.tryAcquireOrRenew(ctx)
	if a.leader.isHeld() {
		t.Fatal("a renewed after it left")
	}

	// b learns that a left gracefully, and is the last: it releases.
	b.observe(memberLease(t, "a", "3", State{Incarnation: a.Incarnation(), Seq: 2, Leaving: true}), false)
	if err := leave(t, b, clock); err != nil {
		t.Fatal(err)
	}
	l = getLeaderLease(t, store)
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 1 {
		t.Fatalf("not released as client-go releases: holder %q, duration %d", h, ptr.Deref(l.Spec.LeaseDurationSeconds, 0))
	}
	if _, ok := l.Annotations[WritersAnnotation]; ok {
		t.Fatal("the writers list outlived the release")
	}
}

// TestLeaderLeaseWatchVoidsAuthority: a Lease seen deleted, released or
// held by anyone outside the fleet stops this replica at once, before its
// renew deadline.
func TestLeaderLeaseWatchVoidsAuthority(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lease   *coordinationv1.Lease
		deleted bool
		keeps   bool
	}{
		{name: "held by kube-controller-manager", lease: kcmHeld("node-1_abc", time.Unix(40000, 0))},
		{name: "released", lease: kcmHeld("", time.Unix(40000, 0))},
		{name: "deleted", lease: kcmHeld(FleetHolderPrefix("kube-system", "f")+"b/x", time.Unix(40000, 0)), deleted: true},
		{name: "renewed by another replica of the fleet", lease: kcmHeld(FleetHolderPrefix("kube-system", "f")+"b/x", time.Unix(40000, 0)), keeps: true},
		{name: "held by another fleet", lease: kcmHeld(FleetHolderPrefix("kube-system", "other")+"b/x", time.Unix(40000, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(40000, 0))
			store := newFakeStore()
			m := leaderLeaseMember(t, store, clock, "a")
			m.leader.tryAcquireOrRenew(context.Background())
			if !m.leader.isHeld() {
				t.Fatal("no authority after creating the Lease")
			}
			m.leader.watched(tc.lease, tc.deleted)
			if m.leader.isHeld() != tc.keeps {
				t.Fatalf("authority %v, want %v", m.leader.isHeld(), tc.keeps)
			}
		})
	}
}

// leave runs m's leave of the leader Lease, moving the fake clock on while
// it waits for the others to stop.
func leave(t *testing.T, m *Member, clock *clocktesting.FakeClock) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.leader.leave(context.Background()) }()
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Millisecond):
			if clock.HasWaiters() {
				clock.Step(100 * time.Millisecond)
			}
		}
	}
}

func memberLease(t *testing.T, name, rv string, s State) *coordinationv1.Lease {
	return lease(name, rv, encoded(t, s))
}

func TestLeaderLeaseConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*LeaderLeaseConfig)
		want   string
	}{
		{name: "defaults", mutate: func(*LeaderLeaseConfig) {}},
		{name: "no name", mutate: func(c *LeaderLeaseConfig) { c.Name = "" }, want: "leader lease name must not be empty"},
		{name: "renew deadline past the duration", mutate: func(c *LeaderLeaseConfig) { c.RenewDeadline = 20 * time.Second }, want: "must be longer than its renew deadline"},
		{name: "retry past the renew deadline", mutate: func(c *LeaderLeaseConfig) { c.RetryPeriod = 11 * time.Second }, want: "must be longer than its retry period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testLeaderLease
			tc.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestLeaderLeaseWholeFleetLeaves: replicas stopping together first see
// each other live; they wait for each other's leave, and one releases.
func TestLeaderLeaseWholeFleetLeaves(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(50000, 0))
	store := newFakeStore()
	a := leaderLeaseMember(t, store, clock, "a")
	b := leaderLeaseMember(t, store, clock, "b")
	a.leader.tryAcquireOrRenew(ctx)
	clock.Step(time.Second)
	b.leader.tryAcquireOrRenew(ctx)
	a.observe(memberLease(t, "b", "1", State{Incarnation: b.Incarnation(), Seq: 1}), false)
	b.observe(memberLease(t, "a", "2", State{Incarnation: a.Incarnation(), Seq: 1}), false)

	done := make(chan error, 2)
	go func() { done <- a.leader.leave(ctx) }()
	go func() { done <- b.leader.leave(ctx) }()
	// Each publishes that it left once its pieces stopped (Member.Leave).
	for !clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	a.observe(memberLease(t, "b", "3", State{Incarnation: b.Incarnation(), Seq: 2, Leaving: true}), false)
	b.observe(memberLease(t, "a", "4", State{Incarnation: a.Incarnation(), Seq: 2, Leaving: true}), false)
	for finished := 0; finished < 2; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished++
		case <-time.After(time.Millisecond):
			if clock.HasWaiters() {
				clock.Step(100 * time.Millisecond)
			}
		}
	}
	if h := ptr.Deref(getLeaderLease(t, store).Spec.HolderIdentity, ""); h != "" {
		t.Fatalf("the whole fleet left and the Lease is still held by %q", h)
	}
}

// TestLeaderLeaseStaleCache: a renewal written over a stale copy from the
// watch cache conflicts and is retried from a fresh read; it never
// overwrites a record it has not seen.
func TestLeaderLeaseStaleCache(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(60000, 0))
	store := newFakeStore()
	a := leaderLeaseMember(t, store, clock, "a")
	b := leaderLeaseMember(t, store, clock, "b")
	a.leader.tryAcquireOrRenew(ctx)
	stale := getLeaderLease(t, store)
	clock.Step(time.Second)
	b.leader.tryAcquireOrRenew(ctx)
	if !b.leader.isHeld() {
		t.Fatal("b could not renew")
	}
	before := store.count("update")
	a.leader.cache = func() *coordinationv1.Lease { return stale }
	clock.Step(time.Second)
	a.leader.tryAcquireOrRenew(ctx)
	if updates := store.count("update") - before; updates != 2 {
		t.Fatalf("%d updates, want the stale one refused and one from a fresh read", updates)
	}
	l := getLeaderLease(t, store)
	if got := l.Annotations[WritersAnnotation]; !strings.Contains(got, "b/"+b.Incarnation()) {
		t.Fatalf("a's renewal dropped b from the writers: %s", got)
	}
	if _, until := a.leader.authority(); !until.Equal(clock.Now().Add(testLeaderLease.RenewDeadline)) {
		t.Fatalf("a's authority runs until %v after the retried renewal", until)
	}
}
