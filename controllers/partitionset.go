package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// partitionSet is the replica's one instance of each partition controller.
// It is built when the replica first gains a partition and runs for the
// replica's lifetime; which namespaces it serves is its Scope. A partition
// piece that runs here is a scope change:
//
//   - gaining p loads p's namespaces into the owned cache (when the
//     informer mode has one) and waits until it holds them, adds p to the
//     scope and hands p's cached objects to the controllers' handlers as
//     additions, as a starting informer would, then opens p's write fence
//     (a sync that read "not found" while p was away has less time to land
//     its write: docs/controllers.md);
//   - losing p closes p's write fence and waits for p's writes in flight
//     (after that nothing the controllers do reaches p's namespaces), then
//     hands p's objects over as deletions, so every controller drops its
//     per-object state and its queued keys resolve to "not found", and
//     then unloads them from the owned cache.
//
// The objects of the replica's other partitions are not touched and their
// work never pauses.
type partitionSet struct {
	runtime *Runtime
	scope   *informers.Scope

	// lock (a one-slot semaphore) serializes building and scope changes.
	// A gain waits for it only while its piece is wanted: a replica just
	// started loads its partitions one after another, each Load listing at
	// the replica's client budget, and a piece the next view moved away
	// must not stop only after every Load queued before it. That held a
	// restarted replica's view change, and with it every other replica's
	// handover, for 4.9 s in the benchmark's rolling restart (fleet x5,
	// default limits: partitions without an owner for 5-10 s).
	lock    chan struct{}
	running bool
	// deliverGain brings p into the scope and delivers its objects
	// (scope.Gain; a test watches the gate from it).
	deliverGain func(p int) int
	// lostAt: when each partition last left the scope.
	lostAt map[int]time.Time
	// drain: whether the keys a loss queued have been worked off.
	drain *queueDrain

	// waiting: partitions whose gain waits for lock. The gain that takes
	// it loads them all into the owned cache with its own (one list per
	// kind for all of them: a survivor of a kill -9 had loaded the
	// victim's 20 partitions one after another, and its namespaces
	// waited 26.6 s for an owner, 18 s targeted). Guarded by waitingMu.
	waitingMu sync.Mutex
	waiting   map[int]bool
}

// minOutOfScope bounds how long a partition that comes back waits after
// it left the scope: until the controllers have worked off the keys its
// deletions queued ("not found" syncs clear expectations and trackers:
// queueDrain), or this long. A partition regained sooner could find, say,
// a Job's deletion expectation still set and its Job held for five
// minutes.
const minOutOfScope = 5 * time.Second

func newPartitionSet(r *Runtime) *partitionSet {
	s := &partitionSet{runtime: r, scope: informers.NewScope(r.ring.Partitions, r.ring.NamespacePartition), lock: make(chan struct{}, 1), lostAt: map[int]time.Time{}, waiting: map[int]bool{}, drain: newQueueDrain(legacyregistry.DefaultGatherer)}
	s.deliverGain = s.scope.Gain
	return s
}

// acquire takes s.lock, or returns false once ctx ends first.
func (s *partitionSet) acquire(ctx context.Context) bool {
	select {
	case s.lock <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *partitionSet) release() { <-s.lock }

// run serves partition piece until ctx ends; it returns once the piece
// can no longer act (the fence is closed and its writes answered).
func (s *partitionSet) run(ctx context.Context, piece shard.Piece) error {
	p := piece.Partition()
	gained, err := s.gain(ctx, p)
	if err != nil {
		return fmt.Errorf("partition %d: %w", p, err)
	}
	if !gained && !s.scope.Owns(p) {
		return nil
	}
	<-ctx.Done()
	return s.lose(ctx, p)
}

// gain brings p into the scope; false if ctx ended first.
func (s *partitionSet) gain(ctx context.Context, p int) (gained bool, err error) {
	// Waiting from now (if Prepare has not said so already) until p is
	// in the scope or its gain gave up; a gain that gives up unloads
	// what another gain loaded for it.
	s.setWaiting(p, true)
	defer func() {
		s.setWaiting(p, false)
		if !gained && err == nil {
			s.dropUnserved(p)
		}
	}()
	if !s.acquire(ctx) {
		return false, nil
	}
	lostAt := s.lostAt[p]
	s.release()
	if time.Since(lostAt) < minOutOfScope {
		if !s.waitDropped(ctx, p, lostAt) {
			return false, nil
		}
	}
	if !s.acquire(ctx) {
		return false, nil
	}
	defer s.release()
	s.setWaiting(p, false)
	start := time.Now()
	if !s.running {
		return true, s.start(ctx, p)
	}
	if owned := s.runtime.owned; owned != nil {
		batch := append([]int{p}, s.waitingPartitions()...)
		if err := owned.Load(ctx, batch...); err != nil {
			for _, b := range batch {
				owned.Unload(b)
			}
			if ctx.Err() != nil {
				return false, nil
			}
			return false, err
		}
		if len(batch) > 1 {
			klog.FromContext(ctx).V(2).Info("Loaded the partitions waiting to be gained together", "partitions", batch, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	// The gate opens before the scope delivers p's objects: a controller
	// acts on them at once, and a write refused in between is retried,
	// but leaves a Warning Event KCM never writes (ReplicaSetCreateError
	// on a Deployment, seen in the end-state comparison).
	if !s.runtime.partitions.Open(ctx, p) {
		return false, nil // stopped while gaining: its load is undone (dropUnserved)
	}
	n := s.deliverGain(p)
	klog.FromContext(ctx).V(2).Info("Partition gained", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// waitDropped waits until the controllers have worked off the keys p's
// loss at lostAt queued (queueDrain), or minOutOfScope after the loss;
// false if ctx ended first.
func (s *partitionSet) waitDropped(ctx context.Context, p int, lostAt time.Time) bool {
	logger := klog.FromContext(ctx)
	start := time.Now()
	deadline := time.NewTimer(minOutOfScope - time.Since(lostAt))
	defer deadline.Stop()
	poll := time.NewTicker(s.drain.minInterval)
	defer poll.Stop()
	var lastErr error
	for {
		drained, err := s.drain.drainedSince(lostAt)
		if err != nil && lastErr == nil {
			logger.Error(err, "Partition came back early; waiting out the quiet time", "partition", p)
		}
		lastErr = err
		if drained {
			logger.Info("Partition came back early: its controllers had worked off its keys", "partition", p, "waited", time.Since(start).Round(time.Millisecond))
			return true
		}
		select {
		case <-poll.C:
		case <-deadline.C:
			logger.Info("Partition came back early: waited out the quiet time", "partition", p, "waited", time.Since(start).Round(time.Millisecond))
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// setWaiting records whether p's gain waits for lock.
func (s *partitionSet) setWaiting(p int, waiting bool) {
	s.waitingMu.Lock()
	defer s.waitingMu.Unlock()
	if waiting {
		s.waiting[p] = true
	} else {
		delete(s.waiting, p)
	}
}

// waitingPartitions lists the partitions whose gain waits for lock.
func (s *partitionSet) waitingPartitions() []int {
	s.waitingMu.Lock()
	defer s.waitingMu.Unlock()
	return slices.Sorted(maps.Keys(s.waiting))
}

// dropUnserved unloads p when a gain ended before it took lock, unless p
// is served or another gain of it waits: another gain may have loaded p
// for it.
func (s *partitionSet) dropUnserved(p int) {
	owned := s.runtime.owned
	if owned == nil {
		return
	}
	s.lock <- struct{}{}
	defer s.release()
	s.waitingMu.Lock()
	again := s.waiting[p]
	s.waitingMu.Unlock()
	if !again && !s.scope.Owns(p) {
		owned.Unload(p)
	}
}

func (s *partitionSet) lose(ctx context.Context, p int) error {
	start := time.Now()
	// No timeout: a write in flight is answered or fails; until then the
	// partition has not stopped.
	if err := s.runtime.partitions.Close(context.Background(), p); err != nil {
		return err
	}
	s.lock <- struct{}{}
	defer s.release()
	n := s.scope.Lose(p)
	if owned := s.runtime.owned; owned != nil {
		owned.Unload(p)
	}
	s.lostAt[p] = time.Now()
	klog.FromContext(ctx).V(2).Info("Partition released", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// start builds the controllers and starts them with partition p in scope.
// They run on the replica's context: a partition that moves away only
// leaves their scope. Called holding s.lock.
func (s *partitionSet) start(ctx context.Context, p int) error {
	r := s.runtime
	piece := ctx
	if r.owned != nil {
		// Loaded before the informers exist: their first lists bring p.
		if err := r.owned.Include(ctx, p); err != nil {
			return err
		}
	}
	ctx = klog.NewContext(r.ctx, withoutReregistrationErrors(klog.FromContext(r.ctx)))
	cc := r.controllerContext(r.partitionBuilder)
	if r.replicas != nil {
		n := r.replicas()
		cc.ComponentConfig = shareWorkers(cc.ComponentConfig, n)
		klog.FromContext(ctx).Info("Partition controllers' workers shared among the fleet's replicas", "replicas", n, "deploymentWorkers", cc.ComponentConfig.DeploymentController.ConcurrentDeploymentSyncs)
	}
	factory, err := informers.NewPieceFactory(informers.PieceConfig{
		Shared: r.shared, SharedStop: r.sharedStop, Owned: r.owned,
		Mapper: r.restMapper, Scopes: r.kindScopes, Scope: s.scope, Resync: cc.ResyncPeriod(), Transform: trimManagedFields,
	})
	if err != nil {
		return fmt.Errorf("informers of the partition controllers: %w", err)
	}
	cc.InformerFactory = factory
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(factory, factory.Metadata())
	built, err := r.buildPartitionControllers(ctx, cc, factory)
	if err != nil {
		factory.Shutdown()
		return fmt.Errorf("building the partition controllers: %w", err)
	}
	// In scope before the handlers go live: the informers' own initial
	// additions then bring p's objects, and nothing else.
	s.scope.Gain(p)
	r.partitions.Open(piece, p) // not if p's piece stopped while building: run's lose follows
	startInformers(ctx, cc, "partition")
	s.running = true
	r.factories.Store("partition", factory)
	klog.FromContext(ctx).Info("Partition controllers running", "controllers", len(built), "firstPartition", p)
	go func() {
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
		factory.Shutdown()
	}()
	return nil
}
