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

// partitionSet is the replica's one instance of each partition controller
// and the one table of the partitions it holds. The controllers are built
// when the replica first gains a partition and run for the replica's
// lifetime; which namespaces they serve is the set's Scope.
//
// It works as an upstream controller's sync does, level-triggered: the
// runs of partition pieces write what is wanted into the table (run), and
// one loop (reconcile) compares it with what is served and acts on the
// whole difference at once:
//
//   - a partition served for a run that has ended is lost: its write
//     fence is closed and its writes in flight answered (after that
//     nothing the controllers do reaches its namespaces), its objects are
//     handed over as deletions, so every controller drops its per-object
//     state and its queued keys resolve to "not found", and it is unloaded
//     from the owned cache;
//   - the partitions wanted and not served are gained together: loaded
//     into the owned cache (when the informer mode has one) in one list
//     per kind for all of them, then each has its write fence opened and
//     its objects handed to the controllers' handlers as additions, as a
//     starting informer would (a sync that read "not found" while it was
//     away has less time to land its write: docs/controllers.md).
//
// A run counts as stopped once it has closed its fence, not once the sync
// has unloaded its partition: a stop never waits behind a Load. The
// scope, the fence and the owned cache are what the sync acts through;
// only the sync changes them for a partition, and the table says what
// each partition is.
//
// The objects of the replica's other partitions are not touched and their
// work never pauses.
type partitionSet struct {
	runtime *Runtime
	scope   *informers.Scope
	// deliverGain brings p into the scope and delivers its objects
	// (scope.Gain; a test watches the gate from it).
	deliverGain func(p int) int
	// drain: whether the keys a loss queued have been worked off.
	drain *queueDrain
	// wake asks the loop for a reconcile (one slot: requests coalesce).
	wake chan struct{}

	mu    sync.Mutex
	table map[int]*partitionEntry
	// expected: partitions a step starts together (Prepare) whose runs
	// have not registered yet; gains wait for them, at most prepareWait
	// from expectedAt, so that they are loaded together.
	expected   map[int]bool
	expectedAt time.Time
	// loading: the partitions of the Load in progress, and what cancels
	// it once none of them is wanted any more.
	loading       []int
	cancelLoading context.CancelFunc

	// The loop's own.
	running bool // the controllers are built and run
	// failures: gains that failed in a row (retry backoff).
	failures int
}

// partitionEntry is one partition's row of the table.
type partitionEntry struct {
	// wantedBy is the context of the run of the partition's piece; nil
	// when none runs. Only run sets it.
	wantedBy context.Context
	// servedFor is the run the partition was gained for (its fence was
	// opened for that run's context, it is in the scope and loaded); nil
	// when not served. Only the loop sets it.
	servedFor context.Context
	// lostAt: when it last left the scope.
	lostAt time.Time
	// backSince: when a run first wanted it back before its quiet time
	// ended (for the log).
	backSince time.Time
}

// minOutOfScope bounds how long a partition that comes back waits after
// it left the scope: until the controllers have worked off the keys its
// deletions queued ("not found" syncs clear expectations and trackers:
// queueDrain), or this long. A partition regained sooner could find, say,
// a Job's deletion expectation still set and its Job held for five
// minutes.
const minOutOfScope = 5 * time.Second

// prepareWait bounds how long gains wait for the runs of a step's
// partitions to register (the Manager starts them one goroutine each,
// right after Prepare).
const prepareWait = 200 * time.Millisecond

// Retries of a failed gain back off from gainRetryMin to gainRetryMax.
const (
	gainRetryMin = time.Second
	gainRetryMax = 30 * time.Second
)

// stoppedRun stands for a run that has ended: a partition served for it
// is lost at the next reconcile.
var stoppedRun = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func newPartitionSet(r *Runtime) *partitionSet {
	s := &partitionSet{
		runtime: r, scope: informers.NewScope(r.ring.Partitions, r.ring.NamespacePartition),
		drain: newQueueDrain(legacyregistry.DefaultGatherer), wake: make(chan struct{}, 1),
		table: map[int]*partitionEntry{}, expected: map[int]bool{},
	}
	s.deliverGain = s.scope.Gain
	if r.owned != nil {
		// The controllers see a namespace once the owned cache holds it,
		// not when the Namespaces informer brings it.
		s.scope.GateNamespaces()
		r.owned.ReportTo(s.scope)
	}
	if r.ctx != nil {
		go s.loop(r.ctx)
	}
	return s
}

// run serves partition piece until ctx ends; it returns once the piece
// can no longer act (the fence is closed and its writes answered). The
// loop gains and loses the partition.
func (s *partitionSet) run(ctx context.Context, piece shard.Piece) error {
	p := piece.Partition()
	s.want(p, ctx)
	<-ctx.Done()
	s.unwant(p, ctx)
	// No timeout: a write in flight is answered or fails; until then the
	// partition has not stopped.
	if err := s.runtime.partitions.Close(context.Background(), p); err != nil {
		return fmt.Errorf("partition %d: %w", p, err)
	}
	return nil
}

// prepare records that the runs of partitions start now together.
func (s *partitionSet) prepare(partitions []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range partitions {
		if e := s.table[p]; e == nil || e.wantedBy == nil {
			s.expected[p] = true
		}
	}
	s.expectedAt = time.Now()
}

// want records that run wants p.
func (s *partitionSet) want(p int, run context.Context) {
	s.mu.Lock()
	s.entry(p).wantedBy = run
	delete(s.expected, p)
	s.mu.Unlock()
	s.poke()
}

// unwant records that run ended, and cancels a Load that no longer
// serves a wanted partition.
func (s *partitionSet) unwant(p int, run context.Context) {
	s.mu.Lock()
	if e := s.entry(p); e.wantedBy == run {
		e.wantedBy = nil
	}
	if s.cancelLoading != nil && !slices.ContainsFunc(s.loading, s.wantedLocked) {
		s.cancelLoading()
	}
	s.mu.Unlock()
	s.poke()
}

func (s *partitionSet) entry(p int) *partitionEntry {
	e, ok := s.table[p]
	if !ok {
		e = &partitionEntry{}
		s.table[p] = e
	}
	return e
}

// wantedLocked says whether a live run wants p. Called holding mu.
func (s *partitionSet) wantedLocked(p int) bool {
	e := s.table[p]
	return e != nil && e.wantedBy != nil && e.wantedBy.Err() == nil
}

// wantedBy is the live run that wants p, or nil.
func (s *partitionSet) wantedBy(p int) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wantedLocked(p) {
		return nil
	}
	return s.table[p].wantedBy
}

func (s *partitionSet) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// served lists the partitions served now.
func (s *partitionSet) served() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for p, e := range s.table {
		if e.servedFor != nil {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// loop reconciles whenever the table changes or a retry is due, until ctx
// ends.
func (s *partitionSet) loop(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-retry.C:
		}
		retry.Stop()
		if after := s.reconcile(ctx); after > 0 {
			retry.Reset(after)
		}
	}
}

// reconcile brings what is served to what is wanted: every loss first,
// then every gain whose quiet time is over, together. It returns when to
// look again for what it could not do yet (0: nothing left).
func (s *partitionSet) reconcile(ctx context.Context) (retryAfter time.Duration) {
	lost, candidates, hold := s.diff(time.Now())
	for _, p := range lost {
		s.lose(ctx, p)
	}
	if hold > 0 || len(candidates) == 0 {
		return hold
	}
	ready, wait := s.quietOver(ctx, candidates, time.Now())
	if len(ready) > 0 {
		if err := s.gain(ctx, ready); err != nil {
			s.failures++
			backoff := min(gainRetryMin<<min(s.failures-1, 5), gainRetryMax)
			klog.FromContext(ctx).Error(err, "Gaining partitions failed; retrying", "partitions", ready, "retryAfter", backoff)
			return backoff
		}
		s.failures = 0
	}
	return wait
}

// diff reads the table: the partitions served for runs that ended, those
// wanted and not served, and how long gains hold for a step's runs still
// to register (0: they do not).
func (s *partitionSet) diff(now time.Time) (lost, gain []int, hold time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range slices.Sorted(maps.Keys(s.table)) {
		e := s.table[p]
		switch {
		case e.servedFor != nil && e.servedFor.Err() != nil:
			lost = append(lost, p)
			if s.wantedLocked(p) {
				gain = append(gain, p) // back at once: the quiet time applies
			}
		case e.servedFor == nil && s.wantedLocked(p):
			gain = append(gain, p)
		}
	}
	if len(s.expected) > 0 {
		if waited := now.Sub(s.expectedAt); waited < prepareWait {
			return lost, gain, prepareWait - waited
		}
		clear(s.expected)
	}
	return lost, gain, 0
}

// lose takes p out of service: its fence closed and writes in flight
// answered, its objects delivered as deletions, its namespaces unloaded.
func (s *partitionSet) lose(ctx context.Context, p int) {
	start := time.Now()
	// No timeout: a write in flight is answered or fails. The run closed
	// the fence already; this waits only for a write it let through.
	_ = s.runtime.partitions.Close(context.Background(), p)
	n := s.scope.Lose(p)
	if owned := s.runtime.owned; owned != nil {
		owned.Unload(p)
	}
	s.mu.Lock()
	e := s.entry(p)
	e.servedFor, e.lostAt, e.backSince = nil, time.Now(), time.Time{}
	s.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Partition released", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
}

// quietOver splits candidates into those whose quiet time after a loss is
// over (the keys the loss queued are worked off: queueDrain, or
// minOutOfScope has passed) and returns how long until the others are
// looked at again.
func (s *partitionSet) quietOver(ctx context.Context, candidates []int, now time.Time) (ready []int, retryAfter time.Duration) {
	logger := klog.FromContext(ctx)
	for _, p := range candidates {
		s.mu.Lock()
		e := s.entry(p)
		lostAt, backSince := e.lostAt, e.backSince
		if backSince.IsZero() {
			e.backSince, backSince = now, now
		}
		s.mu.Unlock()
		if lostAt.IsZero() || backSince.Sub(lostAt) >= minOutOfScope {
			ready = append(ready, p) // not back early: no quiet time
			continue
		}
		if now.Sub(lostAt) >= minOutOfScope {
			logger.Info("Partition came back early: waited out the quiet time", "partition", p, "waited", now.Sub(backSince).Round(time.Millisecond))
			ready = append(ready, p)
			continue
		}
		drained, err := s.drain.drainedSince(lostAt)
		if err != nil {
			logger.Error(err, "Partition came back early; waiting out the quiet time", "partition", p)
		}
		if drained {
			logger.Info("Partition came back early: its controllers had worked off its keys", "partition", p, "waited", now.Sub(backSince).Round(time.Millisecond))
			ready = append(ready, p)
			continue
		}
		wait := min(max(s.drain.minInterval, time.Millisecond), minOutOfScope-now.Sub(lostAt))
		if retryAfter == 0 || wait < retryAfter {
			retryAfter = wait
		}
	}
	return ready, retryAfter
}

// gain brings batch into service together: loaded in one Load, then each
// partition's fence opened for its run and its objects delivered. A
// partition whose run ended meanwhile is unloaded instead.
func (s *partitionSet) gain(ctx context.Context, batch []int) error {
	start := time.Now()
	if !s.running {
		return s.start(ctx, batch)
	}
	owned := s.runtime.owned
	if owned != nil {
		loadCtx := s.startLoading(ctx, batch)
		err := owned.Load(loadCtx, batch...)
		s.doneLoading()
		if err != nil {
			for _, p := range batch {
				owned.Unload(p)
			}
			if loadCtx.Err() != nil {
				return nil // no longer wanted, or the replica stops
			}
			return err
		}
		if len(batch) > 1 {
			klog.FromContext(ctx).V(2).Info("Loaded the partitions gained together", "partitions", batch, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	for _, p := range batch {
		run := s.wantedBy(p)
		// The gate opens before the scope delivers p's objects: a
		// controller acts on them at once, and a write refused in
		// between is retried, but leaves a Warning Event KCM never
		// writes (ReplicaSetCreateError on a Deployment, seen in the
		// end-state comparison).
		if run == nil || !s.runtime.partitions.Open(run, p) {
			if owned != nil {
				owned.Unload(p)
			}
			continue
		}
		n := s.deliverGain(p)
		s.setServed(p, run)
		klog.FromContext(ctx).V(2).Info("Partition gained", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// startLoading records the Load of batch in progress; its context ends
// with ctx or once no partition of batch is wanted (unwant).
func (s *partitionSet) startLoading(ctx context.Context, batch []int) context.Context {
	loadCtx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.loading, s.cancelLoading = batch, cancel
	s.mu.Unlock()
	return loadCtx
}

func (s *partitionSet) doneLoading() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancelLoading != nil {
		s.cancelLoading()
	}
	s.loading, s.cancelLoading = nil, nil
}

func (s *partitionSet) setServed(p int, run context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(p).servedFor = run
}

// start builds the controllers and starts them with batch in scope. They
// run on the replica's context: a partition that moves away only leaves
// their scope. A batch that does not start is unloaded.
func (s *partitionSet) start(gainCtx context.Context, batch []int) (err error) {
	r := s.runtime
	if r.owned != nil {
		defer func() {
			if err != nil {
				for _, p := range batch {
					r.owned.Unload(p)
				}
			}
		}()
		// Loaded before the informers exist: their first lists bring
		// the batch.
		if err := r.owned.Include(gainCtx, batch...); err != nil {
			return err
		}
	}
	ctx := klog.NewContext(r.ctx, withoutReregistrationErrors(klog.FromContext(r.ctx)))
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
	// additions then bring the batch's objects, and nothing else. A
	// partition whose run ended meanwhile is served for a stopped run,
	// which the next reconcile loses.
	for _, p := range batch {
		s.scope.Gain(p)
		run := s.wantedBy(p)
		if run == nil || !r.partitions.Open(run, p) {
			run = stoppedRun
		}
		s.setServed(p, run)
	}
	startInformers(ctx, cc, "partition")
	s.running = true
	r.factories.Store("partition", factory)
	klog.FromContext(ctx).Info("Partition controllers running", "controllers", len(built), "partitions", batch)
	go logGainedOnSync(ctx, factory, batch, time.Now())
	go func() {
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
		factory.Shutdown()
	}()
	return nil
}

// logGainedOnSync logs the gain of the partitions the controllers started
// with once their informers' first lists are cached, which is when the
// controllers act on them (a later gain logs once it has delivered).
func logGainedOnSync(ctx context.Context, factory *informers.PieceFactory, batch []int, start time.Time) {
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return
		}
	}
	for _, p := range batch {
		klog.FromContext(ctx).V(2).Info("Partition gained", "partition", p, "took", time.Since(start).Round(time.Millisecond), "with", "the informers' first lists")
	}
}
