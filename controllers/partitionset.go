package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// partitionSet is the replica's one instance of each partition controller
// (filtered-watch mode). It is built when the replica first gains a
// partition and runs for the replica's lifetime; which namespaces it
// serves is its Scope. A partition piece that runs here is a scope change:
//
//   - gaining p opens p's write fence, then hands p's cached objects to the
//     controllers' handlers as additions, as a starting informer would;
//   - losing p closes p's write fence and waits for p's writes in flight
//     (after that nothing the controllers do reaches p's namespaces), then
//     hands p's objects over as deletions, so every controller drops its
//     per-object state and its queued keys resolve to "not found".
//
// The objects of the replica's other partitions are not touched and their
// work never pauses.
type partitionSet struct {
	runtime *Runtime
	scope   *informers.Scope

	// mu serializes building and scope changes.
	mu      sync.Mutex
	running bool
}

func newPartitionSet(r *Runtime) *partitionSet {
	return &partitionSet{runtime: r, scope: informers.NewScope(r.ring.Partitions, r.ring.NamespacePartition)}
}

// run serves partition piece until ctx ends; it returns once the piece
// can no longer act (the fence is closed and its writes answered).
func (s *partitionSet) run(ctx context.Context, piece shard.Piece) error {
	p := piece.Partition()
	if err := s.gain(ctx, p); err != nil {
		return fmt.Errorf("partition %d: %w", p, err)
	}
	<-ctx.Done()
	return s.lose(ctx, p)
}

func (s *partitionSet) gain(ctx context.Context, p int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	if !s.running {
		return s.start(p)
	}
	s.runtime.partitions.Open(p)
	n := s.scope.Gain(p)
	klog.FromContext(ctx).V(2).Info("Partition gained", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *partitionSet) lose(ctx context.Context, p int) error {
	start := time.Now()
	// No timeout: a write in flight is answered or fails; until then the
	// partition has not stopped.
	if err := s.runtime.partitions.Close(context.Background(), p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.scope.Lose(p)
	klog.FromContext(ctx).V(2).Info("Partition released", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// start builds the controllers and starts them with partition p in scope.
// They run on the replica's context: a partition that moves away only
// leaves their scope. Called with s.mu held.
func (s *partitionSet) start(p int) error {
	r := s.runtime
	ctx := klog.NewContext(r.ctx, withoutReregistrationErrors(klog.FromContext(r.ctx)))
	cc := r.controllerContext(r.partitionBuilder)
	factory, err := informers.NewPieceFactory(informers.PieceConfig{
		Mode: informers.ModeFilteredWatch, Client: r.plainClient, Shared: r.shared, SharedStop: r.sharedStop,
		Mapper: r.restMapper, Scope: s.scope, Resync: cc.ResyncPeriod(), Transform: trimManagedFields,
	})
	if err != nil {
		return fmt.Errorf("informers of the partition controllers: %w", err)
	}
	cc.InformerFactory = factory
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(factory, factory.Metadata(r.sharedMetadata))
	built, err := r.buildPartitionControllers(ctx, cc)
	if err != nil {
		factory.Shutdown()
		return fmt.Errorf("building the partition controllers: %w", err)
	}
	// In scope before the handlers go live: the informers' own initial
	// additions then bring p's objects, and nothing else.
	r.partitions.Open(p)
	s.scope.Gain(p)
	startInformers(ctx, cc, "partition")
	s.running = true
	klog.FromContext(ctx).Info("Partition controllers running", "controllers", len(built), "firstPartition", p)
	go func() {
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
		factory.Shutdown()
	}()
	return nil
}
