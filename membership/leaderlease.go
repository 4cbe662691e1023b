package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// leaderLease keeps kube-controller-manager's leader Lease held by the
// fleet, so that no KCM leads while a replica may run a piece, and gives
// this replica the second half of its authority. Why this is safe is in
// package shard's doc; in short:
//
//   - Every replica renews the Lease itself, conditionally (on the
//     resourceVersion it read), and acts only until RenewDeadline after it
//     sent its last successful renewal. A KCM takes the Lease only after
//     it saw the record unchanged for LeaseDuration on its own clock, so
//     never before LeaseDuration after the last fleet renewal was sent.
//   - Each renewal changes the record as KCM compares it (client-go
//     compares the record's JSON, in which times have whole seconds): the
//     holder names the replica and its incarnation, and the renew time of
//     one incarnation moves forward by at least a second per renewal.
//   - The last replica to stop releases the Lease (empty holder: a KCM
//     takes it at its next retry) only when every other replica listed in
//     WritersAnnotation has certainly stopped; otherwise the KCM waits one
//     lease duration.
type leaderLease struct {
	cfg LeaderLeaseConfig
	// fleet is what this replica knows of the others (its Member).
	fleet fleetView
	store LeaseStore
	clock clock.Clock
	// memberLeaseDuration is the member Leases' (not this Lease's).
	memberLeaseDuration time.Duration
	// logger is run's context's.
	logger klog.Logger
	// holder is this replica's holder identity; prefix is the fleet's.
	holder, prefix, writer string

	mu          sync.Mutex
	deadline    time.Time
	waiting     string
	observedRaw []byte
	observedAt  time.Time
	lastRenew   time.Time // renew time of this incarnation's last write
	unknownAt   map[string]time.Time
	// read is the writers list that the last successful renewal was
	// written over (see Member.Joining).
	read writersRead
	// heldSince: when the renewal that began the current stretch of
	// authority was sent (see Member.Joining).
	heldSince  time.Time
	left       bool
	lastHolder string
	// wake notifies the member when this renewal's authority runs out.
	wake *wakeTimer
	// renewNow asks for a renewal before the next retry period: a join
	// waits for one (Member.Joining).
	renewNow chan struct{}
	// cache reads the Lease from the watch (nil before it runs).
	cache func() *coordinationv1.Lease

	writeMu sync.Mutex
}

// FleetHolderPrefix starts the holder identity every replica of a fleet
// writes into kube-controller-manager's leader Lease; the rest names the
// replica and its incarnation.
func FleetHolderPrefix(namespace, fleet string) string {
	return fmt.Sprintf("fleet:%s/%s/", namespace, fleet)
}

// fleetView is what the leader Lease needs of this replica's membership:
// which members are live, whether a writer of the Lease has stopped, and a
// way to say that authority changed.
type fleetView interface {
	Peers() []Peer
	writerStatus(writer string) writerState
	notify()
}

func newLeaderLease(cfg LeaderLeaseConfig, m *Member) *leaderLease {
	prefix := FleetHolderPrefix(m.cfg.Namespace, m.cfg.Fleet)
	writer := m.cfg.Identity + "/" + m.incarnation
	return &leaderLease{
		cfg: cfg, fleet: m, store: m.cfg.Store, clock: m.cfg.Clock, memberLeaseDuration: m.cfg.LeaseDuration,
		logger: klog.Background(),
		prefix: prefix, writer: writer, holder: prefix + writer,
		unknownAt: map[string]time.Time{},
		waiting:   "not holding kube-controller-manager's leader lease yet",
		wake:      newWakeTimer(m.cfg.Clock, m.notify),
		renewNow:  make(chan struct{}, 1),
	}
}

// authority reports whether this replica's last renewal of the Lease still
// lets it act, and until when.
func (l *leaderLease) authority() (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clock.Now().Before(l.deadline), l.deadline
}

// whyNot says why the Lease gives no authority ("" when it does).
func (l *leaderLease) whyNot() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.clock.Now().Before(l.deadline) {
		return ""
	}
	return l.waiting
}

func (l *leaderLease) ours(holder string) bool { return strings.HasPrefix(holder, l.prefix) }

// run renews the Lease every retry period until ctx ends or the replica
// leaves, and drops authority at once when a watch shows the Lease deleted
// or held by anyone outside the fleet.
func (l *leaderLease) run(ctx context.Context) error {
	leases, err := watchLeases(ctx, l.store, l.cfg.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", l.cfg.Name).String()
		},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { l.watched(obj, false) },
			UpdateFunc: func(_, obj any) { l.watched(obj, false) },
			DeleteFunc: func(obj any) { l.watched(obj, true) },
		})
	if err != nil {
		return fmt.Errorf("watching kube-controller-manager's leader lease: %w", err)
	}
	defer leases.stop()
	l.mu.Lock()
	l.cache = func() *coordinationv1.Lease { return leases.get(l.cfg.Namespace, l.cfg.Name) }
	l.mu.Unlock()

	clk := l.clock
	for {
		started := clk.Now()
		// Jittered within the retry period: replicas started together
		// would otherwise renew in step and keep conflicting.
		next := started.Add(l.cfg.RetryPeriod - time.Duration(rand.Int64N(int64(l.cfg.RetryPeriod/4))))
		if expires := l.tryAcquireOrRenew(ctx); !expires.IsZero() && expires.Before(next) {
			// Try again the moment a KCM's record may be taken, not up
			// to a retry period later.
			next = expires
		}
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(next.Sub(clk.Now())):
		case <-l.renewNow:
		}
	}
}

// askRenewal wakes run for a renewal now.
func (l *leaderLease) askRenewal() {
	select {
	case l.renewNow <- struct{}{}:
	default:
	}
}

// watched voids authority on sight of a Lease that no longer protects this
// replica: deleted (a KCM creates it anew and leads at once) or held by
// someone else or no one.
func (l *leaderLease) watched(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if !deleted && l.ours(holder) {
		return
	}
	l.mu.Lock()
	now := l.clock.Now()
	voided := now.Before(l.deadline)
	if voided {
		l.deadline = now
	}
	l.mu.Unlock()
	if voided {
		l.logger.Error(nil, "kube-controller-manager's leader lease no longer held by the fleet; stopping every piece", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name), "deleted", deleted, "holder", holder)
		l.fleet.notify()
	}
}

// record is the Lease's leader election record as client-go (and so KCM)
// reads and compares it.
func record(lease *coordinationv1.Lease) (*rl.LeaderElectionRecord, []byte, error) {
	rec := rl.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the leader election record: %w", err)
	}
	return rec, raw, nil
}

// tryAcquireOrRenew is one attempt, as client-go's of the same name, except
// that a Lease held by another replica of the fleet counts as held by us.
// While a KCM holds the Lease it returns when the record may be taken if it
// does not change again (zero otherwise).
func (l *leaderLease) tryAcquireOrRenew(ctx context.Context) (expires time.Time) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.isLeft() {
		return
	}
	clk := l.clock
	reqCtx, cancel := context.WithTimeout(ctx, l.cfg.RenewDeadline)
	defer cancel()
	// The watch cache is usually current (other replicas' renewals arrive
	// in milliseconds), which saves a GET per renewal; a stale copy only
	// makes the conditional write conflict, and then a GET decides.
	if cached := l.cachedLease(); cached != nil {
		if expires, conflict := l.renewFrom(reqCtx, cached); !conflict {
			return expires
		}
	}
	store := l.store
	lease, err := store.Get(reqCtx, l.cfg.Namespace, l.cfg.Name)
	switch {
	case apierrors.IsNotFound(err):
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.cfg.Name, Namespace: l.cfg.Namespace}}
		sent := clk.Now()
		l.fill(fresh, sent, true, nil)
		_, err := store.Create(reqCtx, fresh)
		l.written(ctx, sent, err, "")
		return
	case err != nil:
		l.failed(fmt.Errorf("reading kube-controller-manager's leader lease: %w", err))
		return
	}
	expires, _ = l.renewFrom(reqCtx, lease)
	return expires
}

// renewFrom judges lease as read (from the watch cache or a GET) and, unless
// a KCM holds it, writes this replica's renewal over it, conditionally on
// its resourceVersion. conflict reports a write that lost to another
// writer.
func (l *leaderLease) renewFrom(ctx context.Context, lease *coordinationv1.Lease) (expires time.Time, conflict bool) {
	clk := l.clock
	rec, raw, err := record(lease)
	if err != nil {
		l.failed(err)
		return
	}
	now := clk.Now()
	l.mu.Lock()
	if !bytes.Equal(raw, l.observedRaw) {
		l.observedRaw, l.observedAt = raw, now
	}
	observedAt := l.observedAt
	l.mu.Unlock()
	holder := rec.HolderIdentity
	takeover := !l.ours(holder)
	if holder != "" && takeover && now.Before(observedAt.Add(l.cfg.takeoverWait())) {
		l.mu.Lock()
		l.deadline = time.Time{}
		l.waiting = fmt.Sprintf("waiting for kube-controller-manager %s to release its leader lease", holder)
		changed := holder != l.lastHolder
		l.lastHolder = holder
		l.mu.Unlock()
		if changed {
			l.logger.Info("kube-controller-manager holds its leader lease; running nothing until it is released or expires", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name), "holder", holder, "takeoverWait", l.cfg.takeoverWait())
			l.fleet.notify()
		}
		// A millisecond past, so the next attempt finds it expired.
		return observedAt.Add(l.cfg.takeoverWait() + time.Millisecond), false
	}
	var writers []string
	if !takeover {
		writers = l.liveWriters(lease.Annotations[WritersAnnotation], now)
	}
	updated := lease.DeepCopy()
	sent := clk.Now()
	l.fill(updated, sent, takeover, writers)
	if takeover {
		updated.Spec.LeaseTransitions = ptr.To(int32(rec.LeaderTransitions + 1))
	}
	// The update carries the resourceVersion read: it fails if anyone
	// (a KCM taking over, another replica) wrote in between.
	_, err = l.store.Update(ctx, updated)
	if err == nil {
		annotation := lease.Annotations[WritersAnnotation]
		if takeover {
			// Taken from a KCM (or released): no member's renewal
			// still holds, and any that acts later renews after this
			// write, which lists this replica.
			annotation = ""
		}
		l.wroteOver(sent, annotation)
	}
	l.written(ctx, sent, err, holder)
	return time.Time{}, apierrors.IsConflict(err)
}

// fill writes this replica's record into lease, renewed at now.
func (l *leaderLease) fill(lease *coordinationv1.Lease, now time.Time, acquire bool, writers []string) {
	l.mu.Lock()
	// Whole seconds, as KCM compares records: every renewal must look new.
	renew := now
	if !l.lastRenew.IsZero() && renew.Unix() <= l.lastRenew.Unix() {
		renew = time.Unix(l.lastRenew.Unix()+1, 0)
	}
	l.lastRenew = renew
	l.mu.Unlock()
	lease.Spec.HolderIdentity = ptr.To(l.holder)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(l.cfg.LeaseDuration / time.Second))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: renew}
	if acquire || lease.Spec.AcquireTime == nil {
		lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	set := map[string]bool{l.writer: true}
	for _, w := range writers {
		set[w] = true
	}
	lease.Annotations[WritersAnnotation] = encodeWriters(set)
}

// written records the outcome of a write sent at sent. heldBy is the
// holder the write replaced.
func (l *leaderLease) written(ctx context.Context, sent time.Time, err error, heldBy string) {
	if err != nil {
		l.failed(fmt.Errorf("renewing kube-controller-manager's leader lease: %w", err))
		return
	}
	leaderLeaseRenewals.WithLabelValues("success").Inc()
	l.mu.Lock()
	was := l.clock.Now().Before(l.deadline)
	if !was {
		l.heldSince = sent
	}
	l.deadline = sent.Add(l.cfg.RenewDeadline)
	l.waiting = "kube-controller-manager's leader lease not renewed within its renew deadline"
	l.lastHolder = l.holder
	l.mu.Unlock()
	if !was {
		l.logger.Info("Holding kube-controller-manager's leader lease for the fleet", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name), "holder", l.holder, "previousHolder", heldBy)
	}
	l.fleet.notify()
	l.wake.at(ctx, sent.Add(l.cfg.RenewDeadline))
}

func (l *leaderLease) failed(err error) {
	leaderLeaseRenewals.WithLabelValues("failure").Inc()
	if apierrors.IsConflict(err) {
		// Another replica (or a KCM) wrote between our read and write;
		// the next attempt reads again.
		l.logger.V(2).Info("Leader lease changed while renewing; retrying", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name))
		return
	}
	l.logger.Error(err, "Leader lease not renewed", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name))
}

func (l *leaderLease) isLeft() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left
}

// cachedLease is the Lease as the watch has it, or nil (not watching yet,
// not synced, or absent: then a GET decides).
func (l *leaderLease) cachedLease() *coordinationv1.Lease {
	l.mu.Lock()
	read := l.cache
	l.mu.Unlock()
	if read == nil {
		return nil
	}
	if lease := read(); lease != nil {
		return lease.DeepCopy()
	}
	return nil
}

// isHeld reports whether this replica's renewal still holds.
func (l *leaderLease) isHeld() bool {
	ok, _ := l.authority()
	return ok
}
