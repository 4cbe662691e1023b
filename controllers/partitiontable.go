package controllers

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// partitionTable is the one table of the partitions a replica holds, and
// the one writer of what serving a partition takes: its write gate, the
// informers' Scope and the owned cache. The replica's one instance of each
// partition controller serves the partitions the table puts in the scope.
//
// It works as an upstream controller's sync does, level-triggered: Start
// and Stop write what is wanted into the table (a row's run, the write
// gate of the piece's current run), and one loop (reconcile) compares it
// with what is served and acts on the whole difference at once:
//
//   - a partition served for a run that has stopped is released: the
//     writes its run sent are answered (Stop shut the gate; after that
//     nothing the controllers do reaches its namespaces), its objects are
//     handed over as deletions, so every controller drops its per-object
//     state and its queued keys resolve to "not found", and it is unloaded
//     from the owned cache;
//   - the partitions wanted and not served are gained together: loaded
//     into the owned cache (when the informer mode has one) in one list
//     per kind for all of them, then each has its gate opened and its
//     objects handed to the controllers' handlers as additions, as a
//     starting informer would (a sync that read "not found" while it was
//     away has less time to land its write: docs/controllers.md). The
//     first gain builds the controllers, whose informers' first lists
//     bring the gained partitions.
//
// A run counts as ended once its gate is shut and its writes answered,
// not once the loop has released its partition: a stop never waits behind
// a load. The objects of the replica's other partitions are not touched
// and their work never pauses.
type partitionTable struct {
	scope       *informers.Scope
	owned       *informers.OwnedCache // nil in filtered-watch mode
	partitionOf func(namespace string) int
	// deliverGain, when set, replaces scope.Gain (a test watches the
	// gate from it).
	deliverGain func(p int) int
	// startControllers builds and starts the partition controllers, the
	// first time a gain has partitions in scope.
	startControllers func(ctx context.Context, gained []int) error
	// drain: whether the keys a release queued have been worked off.
	drain *queueDrain
	// ended is where a stopped run is reported once it can no longer act.
	ended chan<- shard.Ended
	// wake asks the loop for a reconcile (one slot: requests coalesce).
	wake chan struct{}

	mu   sync.Mutex
	rows map[int]*partitionRow
	// loading: the partitions of the load in progress, since when, and
	// what cancels it once none of them is wanted any more.
	loading       []int
	loadingSince  time.Time
	cancelLoading context.CancelFunc
	// publishLoading, when set, is told the partitions loading and since
	// when as each load starts and ends (membership.Member.SetLoading:
	// the Lease names a slow one).
	publishLoading func(map[int]time.Time)
	// stuckAfter: a load going on for longer is reported stuck, logged
	// with what it waits for and counted (the lease duration).
	stuckAfter time.Duration

	// The loop's own.
	controllersRunning bool
	// failures: gains that failed in a row (retry backoff).
	failures int
}

// partitionRow is one partition's row of the table.
type partitionRow struct {
	// run is the write gate of the piece's run that the Manager started
	// and has not stopped; nil when none. Only Start and Stop set it.
	run *writeGate
	// served is the run the partition was gained for (in the scope,
	// loaded, its gate opened); nil when not served. Only the loop sets
	// it.
	served *writeGate
	// releasedAt: when it last left the scope.
	releasedAt time.Time
	// backSince: when a run first wanted it back before its quiet time
	// ended (for the log).
	backSince time.Time
}

// rowState is what a partition is to its replica.
type rowState string

const (
	// rowWanted: a run wants it, not served yet (waiting for its quiet
	// time or the next reconcile).
	rowWanted rowState = "wanted"
	// rowLoading: its objects are being loaded into the owned cache.
	rowLoading rowState = "loading"
	// rowServing: its controllers act on it for the run that wants it.
	rowServing rowState = "serving"
	// rowReleasing: served for a run that stopped; the next reconcile
	// releases it.
	rowReleasing rowState = "releasing"
)

// minOutOfScope bounds how long a partition that comes back waits after
// it left the scope: until the controllers have worked off the keys its
// deletions queued ("not found" syncs clear expectations and trackers:
// queueDrain), or this long. A partition regained sooner could find, say,
// a Job's deletion expectation still set and its Job held for five
// minutes.
const minOutOfScope = 5 * time.Second

// Retries of a failed gain back off from gainRetryMin to gainRetryMax.
const (
	gainRetryMin = time.Second
	gainRetryMax = 30 * time.Second
)

// Start records that runs of partitions start now, and wakes the loop,
// which gains them together.
func (t *partitionTable) Start(partitions []int) {
	t.mu.Lock()
	for _, p := range partitions {
		t.row(p).run = newWriteGate()
	}
	t.mu.Unlock()
	t.poke()
}

// Stop shuts the gates of partitions' runs before it returns (with the
// report tail when they move: writeGate), cancels a load that no longer
// serves a wanted partition, and reports each run on ended once the
// writes it sent are answered. The loop releases them.
func (t *partitionTable) Stop(partitions []int, moved bool) {
	tail := time.Duration(0)
	if moved {
		tail = reportTail
	}
	gates := make([]*writeGate, len(partitions))
	t.mu.Lock()
	for i, p := range partitions {
		r := t.row(p)
		gates[i], r.run = r.run, nil
		if gates[i] != nil {
			gates[i].Shut(tail)
		}
	}
	if t.cancelLoading != nil && !slices.ContainsFunc(t.loading, t.wantedLocked) {
		t.cancelLoading()
	}
	t.mu.Unlock()
	t.poke()
	for i, p := range partitions {
		gate := gates[i]
		// No timeout: a write in flight is answered or fails (at the
		// authority's deadline at the latest: abandonAtDeadline).
		go func() {
			if gate != nil {
				<-gate.Drained()
			}
			t.ended <- shard.Ended{Piece: shard.PartitionPiece(p)}
		}()
	}
}

// gateOf is the gate of the run that wants namespace's partition (open
// once it is served), or nil; for an Event (report), the gate of the
// stopped run still served, in its report tail, unless the run that
// wants the partition is open.
func (t *partitionTable) gateOf(namespace string, report bool) *writeGate {
	p := t.partitionOf(namespace)
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rows[p]
	if r == nil {
		return nil
	}
	if report && r.served != nil && r.served != r.run && (r.run == nil || !r.run.IsOpen()) {
		return r.served
	}
	return r.run
}

func (t *partitionTable) row(p int) *partitionRow {
	r, ok := t.rows[p]
	if !ok {
		r = &partitionRow{}
		t.rows[p] = r
	}
	return r
}

// wantedLocked says whether a run wants p. Called holding mu.
func (t *partitionTable) wantedLocked(p int) bool {
	r := t.rows[p]
	return r != nil && r.run != nil
}

func (t *partitionTable) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// states is every partition's state (partitions in no state are absent).
func (t *partitionTable) states() map[int]rowState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[int]rowState{}
	for p, r := range t.rows {
		switch {
		case r.served != nil && r.served == r.run:
			out[p] = rowServing
		case r.served != nil:
			out[p] = rowReleasing
		case r.run != nil && slices.Contains(t.loading, p):
			out[p] = rowLoading
		case r.run != nil:
			out[p] = rowWanted
		}
	}
	return out
}

// served lists the partitions served now.
func (t *partitionTable) served() []int {
	var out []int
	for p, s := range t.states() {
		if s == rowServing {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// loop reconciles whenever the table changes or a retry is due, until ctx
// ends.
func (t *partitionTable) loop(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-retry.C:
		}
		retry.Stop()
		if after := t.reconcile(ctx); after > 0 {
			retry.Reset(after)
		}
	}
}

// reconcile brings what is served to what is wanted: every release first,
// then every gain whose quiet time is over, together. It returns when to
// look again for what it could not do yet (0: nothing left).
func (t *partitionTable) reconcile(ctx context.Context) (retryAfter time.Duration) {
	released, candidates := t.diff()
	for _, p := range released {
		t.release(ctx, p)
	}
	if len(candidates) == 0 {
		return 0
	}
	ready, wait := t.quietOver(ctx, candidates, time.Now())
	if len(ready) > 0 {
		if err := t.gain(ctx, ready); err != nil {
			t.failures++
			backoff := min(gainRetryMin<<min(t.failures-1, 5), gainRetryMax)
			klog.FromContext(ctx).Error(err, "Gaining partitions failed; retrying", "partitions", ready, "retryAfter", backoff)
			return backoff
		}
		t.failures = 0
	}
	return wait
}

// diff reads the table: the partitions served for runs that stopped, and
// those wanted and not served.
func (t *partitionTable) diff() (released, gain []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range slices.Sorted(maps.Keys(t.rows)) {
		r := t.rows[p]
		switch {
		case r.served != nil && r.served != r.run:
			released = append(released, p)
			if r.run != nil {
				gain = append(gain, p) // back at once: the quiet time applies
			}
		case r.served == nil && r.run != nil:
			gain = append(gain, p)
		}
	}
	return released, gain
}

// release takes p out of service: the writes its run sent answered, its
// objects delivered as deletions, its namespaces unloaded.
func (t *partitionTable) release(ctx context.Context, p int) {
	start := time.Now()
	t.mu.Lock()
	served := t.rows[p].served
	t.mu.Unlock()
	// No timeout: a write in flight is answered or fails. Stop shut the
	// gate already; this waits only for a write it let through.
	<-served.Drained()
	n := t.scope.Lose(p)
	if t.owned != nil {
		t.owned.Unload(p)
	}
	t.mu.Lock()
	r := t.row(p)
	r.served, r.releasedAt, r.backSince = nil, time.Now(), time.Time{}
	t.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Partition released", "partition", p, "delivered", n, "took", time.Since(start).Round(time.Millisecond))
}

// quietOver splits candidates into those whose quiet time after a release
// is over (the keys the release queued are worked off: queueDrain, or
// minOutOfScope has passed) and returns how long until the others are
// looked at again.
func (t *partitionTable) quietOver(ctx context.Context, candidates []int, now time.Time) (ready []int, retryAfter time.Duration) {
	logger := klog.FromContext(ctx)
	for _, p := range candidates {
		t.mu.Lock()
		r := t.row(p)
		releasedAt, backSince := r.releasedAt, r.backSince
		if backSince.IsZero() {
			r.backSince, backSince = now, now
		}
		t.mu.Unlock()
		if releasedAt.IsZero() || backSince.Sub(releasedAt) >= minOutOfScope {
			ready = append(ready, p) // not back early: no quiet time
			continue
		}
		if now.Sub(releasedAt) >= minOutOfScope {
			logger.Info("Partition came back early: waited out the quiet time", "partition", p, "waited", now.Sub(backSince).Round(time.Millisecond))
			ready = append(ready, p)
			continue
		}
		drained, err := t.drain.drainedSince(releasedAt)
		if err != nil {
			logger.Error(err, "Partition came back early; waiting out the quiet time", "partition", p)
		}
		if drained {
			logger.Info("Partition came back early: its controllers had worked off its keys", "partition", p, "waited", now.Sub(backSince).Round(time.Millisecond))
			ready = append(ready, p)
			continue
		}
		wait := min(max(t.drain.minInterval, time.Millisecond), minOutOfScope-now.Sub(releasedAt))
		if retryAfter == 0 || wait < retryAfter {
			retryAfter = wait
		}
	}
	return ready, retryAfter
}

// gain brings batch into service together: loaded in one load, then each
// partition's gate opened for its run and its objects delivered, and, the
// first time, the controllers started. A partition whose run stopped
// meanwhile is unloaded instead.
func (t *partitionTable) gain(ctx context.Context, batch []int) error {
	start := time.Now()
	if loaded, err := t.load(ctx, batch); !loaded {
		return err
	}
	var gained []int
	for _, p := range batch {
		if t.serve(p) {
			gained = append(gained, p)
		} else if t.owned != nil {
			t.owned.Unload(p)
		}
	}
	if !t.controllersRunning && len(gained) > 0 {
		if err := t.startControllers(ctx, gained); err != nil {
			t.unserve(gained)
			return err
		}
		t.controllersRunning = true
	}
	if len(gained) > 0 {
		klog.FromContext(ctx).V(2).Info("Partitions gained", "partitions", gained, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// load loads batch into the owned cache in one list per kind: once the
// controllers run, it returns when every informer holds the batch; before
// that, their informers' first lists bring it. False, and the batch
// unloaded, if it did not load (nil error: no longer wanted, or the
// replica stops).
func (t *partitionTable) load(ctx context.Context, batch []int) (bool, error) {
	if t.owned == nil {
		return true, nil
	}
	loadCtx, cancel := context.WithCancel(ctx)
	t.mu.Lock()
	t.loading, t.loadingSince, t.cancelLoading = batch, time.Now(), cancel
	t.mu.Unlock()
	t.published()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t.watchLoad(loadCtx)
	}()
	var err error
	if t.controllersRunning {
		err = t.owned.Load(loadCtx, batch...)
	} else {
		err = t.owned.Include(loadCtx, batch...)
	}
	t.mu.Lock()
	cancel()
	t.loading, t.loadingSince, t.cancelLoading = nil, time.Time{}, nil
	t.mu.Unlock()
	<-watched
	t.published()
	if err == nil {
		return true, nil
	}
	for _, p := range batch {
		t.owned.Unload(p)
	}
	if loadCtx.Err() != nil {
		return false, nil
	}
	return false, err
}

// serve opens p's gate for the run that wants it and brings p into the
// scope; false if no run wants it or its run stopped. The gate opens
// before the scope delivers p's objects: a controller acts on them at
// once, and a write refused in between is retried, but leaves a Warning
// Event KCM never writes (ReplicaSetCreateError on a Deployment).
func (t *partitionTable) serve(p int) bool {
	t.mu.Lock()
	run := t.row(p).run
	t.mu.Unlock()
	if run == nil || !run.Open() {
		return false
	}
	if t.deliverGain != nil {
		t.deliverGain(p)
	} else {
		t.scope.Gain(p)
	}
	t.mu.Lock()
	t.row(p).served = run
	t.mu.Unlock()
	return true
}

// Held shows namespaces the owned cache now holds
// (informers.HeldReporter): the table is the one writer of what the
// partition controllers see.
func (t *partitionTable) Held(namespaces []string) int { return t.scope.Held(namespaces) }

// Dropped hides namespaces the owned cache no longer holds
// (informers.HeldReporter).
func (t *partitionTable) Dropped(namespaces []string) { t.scope.Dropped(namespaces) }

// unserve takes partitions served for controllers that did not start out
// of the scope and the owned cache; their runs' gates stay open, for the
// retry (nothing wrote through them).
func (t *partitionTable) unserve(partitions []int) {
	for _, p := range partitions {
		t.scope.Lose(p)
		if t.owned != nil {
			t.owned.Unload(p)
		}
		t.mu.Lock()
		t.row(p).served = nil
		t.mu.Unlock()
	}
}
