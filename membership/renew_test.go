package membership

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestRenewAgainstAHostileStore: a renewal extends authority only when the
// apiserver accepted it within the renew timeout; a Lease deleted or
// overwritten by someone else is written again with this replica's state.
func TestRenewAgainstAHostileStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		// disturb acts between a first renewal that succeeded and the
		// renewal under test.
		disturb      func(t *testing.T, store *fakeStore, clock *clocktesting.FakeClock)
		wantExtended bool
		wantCalls    map[string]int
	}{
		{
			name:         "accepted",
			disturb:      func(*testing.T, *fakeStore, *clocktesting.FakeClock) {},
			wantExtended: true,
			wantCalls:    map[string]int{"update": 1},
		},
		{
			name: "refused by an apiserver in trouble",
			disturb: func(_ *testing.T, store *fakeStore, _ *clocktesting.FakeClock) {
				store.setFail(func(verb, _, _ string) error {
					return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
				})
			},
			wantCalls: map[string]int{"update": 1},
		},
		{
			name: "accepted after the renew timeout",
			disturb: func(_ *testing.T, store *fakeStore, clock *clocktesting.FakeClock) {
				store.setFail(func(string, string, string) error {
					clock.Step(3 * time.Second) // past (15 s - 10 s) / 2
					return nil
				})
			},
			wantCalls: map[string]int{"update": 1},
		},
		{
			name: "deleted by someone else",
			disturb: func(t *testing.T, store *fakeStore, _ *clocktesting.FakeClock) {
				if err := store.Delete(context.Background(), "ns", "self", metav1.Preconditions{}); err != nil {
					t.Fatal(err)
				}
			},
			wantExtended: true,
			wantCalls:    map[string]int{"update": 1, "create": 1},
		},
		{
			name: "overwritten by someone else",
			disturb: func(t *testing.T, store *fakeStore, _ *clocktesting.FakeClock) {
				l, err := store.Get(context.Background(), "ns", "self")
				if err != nil {
					t.Fatal(err)
				}
				l.Annotations[StateAnnotation] = "edited by hand"
				if _, err := store.Update(context.Background(), l); err != nil {
					t.Fatal(err)
				}
			},
			wantExtended: true,
			wantCalls:    map[string]int{"update": 2, "get": 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clock, store, m := newRenewedMember(ctx, t)
			_, firstUntil := m.Authority()
			if !firstUntil.Equal(clock.Now().Add(DefaultRenewDeadline)) {
				t.Fatalf("first renewal: authority until %v", firstUntil)
			}
			clock.Step(DefaultRetryPeriod)
			tc.disturb(t, store, clock)
			before := map[string]int{}
			for _, verb := range []string{"get", "create", "update", "delete"} {
				before[verb] = store.count(verb)
			}
			sent := clock.Now()
			m.renew(ctx)
			store.setFail(nil)

			for _, verb := range []string{"get", "create", "update", "delete"} {
				if got := store.count(verb) - before[verb]; got != tc.wantCalls[verb] {
					t.Errorf("%d %s calls, want %d", got, verb, tc.wantCalls[verb])
				}
			}
			_, until := m.Authority()
			if extended := until.Equal(sent.Add(DefaultRenewDeadline)); extended != tc.wantExtended {
				t.Fatalf("authority until %v (first renewal: %v, this one sent at %v): extended %v, want %v", until, firstUntil, sent, extended, tc.wantExtended)
			}
			if !tc.wantExtended && !until.Equal(firstUntil) {
				t.Fatalf("authority moved to %v without a renewal accepted in time", until)
			}
			if tc.wantExtended {
				assertOwnState(t, store, m)
			}
			// Past the renew deadline of the last accepted renewal, this
			// replica may not act, whatever it last tried.
			clock.SetTime(until)
			if m.Valid() {
				t.Fatal("authority at the renew deadline")
			}
		})
	}
}

// assertOwnState checks that the store holds m's Lease with m's state.
func assertOwnState(t *testing.T, store *fakeStore, m *Member) {
	t.Helper()
	l, err := store.Get(context.Background(), "ns", m.Identity())
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseState(l.Annotations[StateAnnotation], m.readVersions())
	if err != nil {
		t.Fatalf("the Lease holds no state of this replica: %v", err)
	}
	if st.Incarnation != m.Incarnation() || l.Labels[FleetLabel] != "f" {
		t.Fatalf("the Lease holds incarnation %q, fleet %q", st.Incarnation, l.Labels[FleetLabel])
	}
}

// TestRejoinWaitsOutTheLeaseMargin: a replica whose authority ran out
// writes nothing until its last deadline plus the margin by which the
// others' view of its lease outlasts that deadline (LeaseDuration -
// RenewDeadline), then rejoins. A rejoin tells the others its pieces are
// free at once; sooner, a write it sent before its deadline could land
// under their new owner.
func TestRejoinWaitsOutTheLeaseMargin(t *testing.T) {
	margin := DefaultLeaseDuration - DefaultRenewDeadline
	for _, tc := range []struct {
		name        string
		after       time.Duration // past the deadline, when the renewal is tried
		wantWritten bool
	}{
		{"just past the deadline", time.Millisecond, false},
		{"just inside the margin", margin - time.Millisecond, false},
		{"at the margin's end", margin, true},
		{"long after", 3 * margin, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clock, store, m := newRenewedMember(ctx, t)
			_, deadline := m.Authority()
			clock.SetTime(deadline.Add(tc.after))
			before := store.count("update")
			m.renew(ctx)
			if written := store.count("update") > before; written != tc.wantWritten {
				t.Fatalf("%v past the deadline: Lease written %v, want %v", tc.after, written, tc.wantWritten)
			}
			if !tc.wantWritten {
				return
			}
			if _, until := m.Authority(); !until.Equal(clock.Now().Add(DefaultRenewDeadline)) {
				t.Fatalf("rejoined: authority until %v, want a renew deadline from now", until)
			}
		})
	}
}

// TestFirstJoinIsNotDelayed: a replica that never held authority joins
// with its first write.
func TestFirstJoinIsNotDelayed(t *testing.T) {
	_, store, _ := newRenewedMember(context.Background(), t)
	if store.count("create") != 1 {
		t.Fatalf("first join: %d creates, want 1", store.count("create"))
	}
}

// newRenewedMember is a member on a fake clock and store that has renewed
// once (its first join).
func newRenewedMember(ctx context.Context, t *testing.T) (*clocktesting.FakeClock, *fakeStore, *Member) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Unix(70000, 0))
	store := newFakeStore()
	m, err := New(Config{Store: store, Namespace: "ns", Fleet: "f", Identity: "self", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	m.renew(ctx)
	return clock, store, m
}
