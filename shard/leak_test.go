package shard

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// funcRunner runs each piece as run says, in a goroutine of its own, and
// reports it ended once run returns.
type funcRunner struct {
	run     func(ctx context.Context, piece Piece) error
	ended   chan Ended
	mu      sync.Mutex
	cancels map[Piece]context.CancelFunc
}

func newFuncRunner(run func(ctx context.Context, piece Piece) error) *funcRunner {
	return &funcRunner{run: run, ended: make(chan Ended), cancels: map[Piece]context.CancelFunc{}}
}

func (r *funcRunner) Start(pieces []Piece) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range pieces {
		ctx, cancel := context.WithCancel(context.Background())
		r.cancels[p] = cancel
		go func() {
			err := r.run(ctx, p)
			r.mu.Lock()
			delete(r.cancels, p)
			r.mu.Unlock()
			cancel()
			r.ended <- Ended{Piece: p, Err: err}
		}()
	}
}

func (r *funcRunner) Stop(pieces []Piece, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range pieces {
		r.cancels[p]()
	}
}

func (r *funcRunner) Ended() <-chan Ended { return r.ended }

// TestManagerRunEndsWithItsContext: a Manager that ran every piece, and
// its Member, leave no goroutine behind once their contexts end (the
// pieces' goroutines, the step loop, and everything of the Member's).
func TestManagerRunEndsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	member, err := membership.New(membership.Config{
		Client: fake.NewClientset(), Namespace: "ns", Fleet: "f", Identity: "a",
		LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ring := RingConfig{Partitions: 4, ReplicationFactor: 16, Load: 1.25, NamespaceHash: HashXX, Placement: PlacementColocatedShare}
	pieces := AllPieces(ring.Partitions, []string{"s"})
	manager, err := NewManager(member, newFuncRunner(func(ctx context.Context, _ Piece) error {
		<-ctx.Done()
		return nil
	}), ring, pieces)
	if err != nil {
		t.Fatal(err)
	}
	memberCtx, stopMember := context.WithCancel(context.Background())
	managerCtx, stopManager := context.WithCancel(context.Background())
	defer stopMember()
	defer stopManager()
	memberDone, managerDone := make(chan error, 1), make(chan error, 1)
	go func() { memberDone <- member.Run(memberCtx) }()
	go func() { managerDone <- manager.Run(managerCtx) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(manager.Status().Running) < len(pieces) {
		if time.Now().After(deadline) {
			t.Fatalf("not every piece ran after 20 s: %+v", manager.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The manager first: it stops every piece and leaves through the member.
	for _, step := range []struct {
		name string
		stop context.CancelFunc
		done chan error
	}{{"the manager", stopManager, managerDone}, {"the member", stopMember, memberDone}} {
		name, done := step.name, step.done
		step.stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return after its context ended", name)
		}
	}
}
