package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// TestManagerRestartsAPieceThatEndedOnItsOwn: a piece whose run ends
// without a Stop stays listed as running (no other replica may take it)
// for pieceRestartDelay, and is then started again; a piece stopped by the
// Manager is unlisted as soon as it is reported ended.
func TestManagerRestartsAPieceThatEndedOnItsOwn(t *testing.T) {
	member, err := membership.New(membership.Config{
		Client: fake.NewClientset(), Namespace: "ns", Fleet: "f", Identity: "a",
		LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	failing := SingletonPiece("failing")
	var mu sync.Mutex
	var starts []time.Time
	var ended time.Time
	runner := newFuncRunner(func(ctx context.Context, p Piece) error {
		if p != failing {
			<-ctx.Done()
			return nil
		}
		mu.Lock()
		starts = append(starts, time.Now())
		first := len(starts) == 1
		if first {
			ended = time.Now()
		}
		mu.Unlock()
		if first {
			return errors.New("planted failure")
		}
		<-ctx.Done()
		return nil
	})
	ring := RingConfig{Partitions: 2, ReplicationFactor: 16, Load: 1.25, NamespaceHash: HashXX, Placement: PlacementColocatedShare}
	manager, err := NewManager(member, runner, ring, AllPieces(ring.Partitions, []string{"failing"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	memberDone, managerDone := make(chan error, 1), make(chan error, 1)
	go func() { memberDone <- member.Run(ctx) }()
	go func() { managerDone <- manager.Run(ctx) }()
	listedWhileDown := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n, e := len(starts), ended
		mu.Unlock()
		if n >= 2 {
			break
		}
		if n == 1 && time.Since(e) > 500*time.Millisecond && time.Since(e) < pieceRestartDelay-time.Second {
			for _, p := range manager.Status().Running {
				listedWhileDown = listedWhileDown || p == failing
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed piece was started %d times in 30 s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	gap := starts[1].Sub(ended)
	mu.Unlock()
	if gap < pieceRestartDelay-50*time.Millisecond {
		t.Errorf("restarted %v after it failed, want at least %v", gap, pieceRestartDelay)
	}
	if !listedWhileDown {
		t.Error("the failed piece was not listed as running while it waited for its restart")
	}
	cancel()
	for _, done := range []chan error{managerDone, memberDone} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("did not return after its context ended")
		}
	}
}
