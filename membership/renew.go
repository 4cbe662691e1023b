package membership

// This replica's own Lease: renewing it, and leaving the fleet.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// renewLoop writes the Lease every retry period, and at once when Publish
// changed the state, until ctx ends.
func (m *Member) renewLoop(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(m.cfg.RetryPeriod)
	defer ticker.Stop()
	for {
		m.renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-m.publish:
		}
	}
}

// renew writes the desired state once.
func (m *Member) renew(ctx context.Context) {
	// Serialised with Leave: no renewal may recreate the Lease after it.
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	st, heldAtSend, ok := m.nextState()
	if !ok {
		return
	}
	value, err := st.EncodeVersion(st.Version)
	if err != nil {
		m.logger.Error(err, "Not publishing state")
		return
	}
	sent := m.cfg.Clock.Now()
	reqCtx, cancel := context.WithTimeout(ctx, m.cfg.renewTimeout())
	lease, err := m.write(reqCtx, value, sent)
	cancel()
	answered := m.cfg.Clock.Now()
	renewDuration.Observe(answered.Sub(sent).Seconds())
	m.mu.Lock()
	defer m.notify()
	defer m.mu.Unlock()
	if err == nil && answered.Sub(sent) > m.cfg.renewTimeout() {
		err = fmt.Errorf("renewal answered after %v, longer than %v", answered.Sub(sent), m.cfg.renewTimeout())
	}
	if err != nil {
		renewals.WithLabelValues("failure").Inc()
		m.renewFails++
		m.logger.Error(err, "Renewing lease failed", "lease", m.cfg.Identity, "failures", m.renewFails, "authorityLeft", timeLeft(m.deadline, answered))
		return
	}
	if m.renewFails > 0 {
		m.logger.Info("Renewing lease works again", "lease", m.cfg.Identity, "after", m.renewFails)
	}
	renewals.WithLabelValues("success").Inc()
	m.renewFails = 0
	m.lease = lease
	m.renewedLocked(lease.ResourceVersion, sent)
	m.listIfWatchBehindLocked(answered)
	m.confirmed = st
	if heldAtSend || len(st.Running) == 0 {
		m.deadline = sent.Add(m.cfg.RenewDeadline)
	}
	if !heldAtSend {
		// Joining, or rejoining after authority ran out (an apiserver
		// outage, a long pause): while it could not renew it may have
		// judged live members expired, and they it. It owns nothing until
		// every member that may act is certainly seen again (Joining).
		m.joinedAt = answered
		m.logger.Info("Joined the fleet; owning nothing until every member is seen, at most one lease duration", "lease", m.cfg.Identity, "duration", m.cfg.LeaseDuration)
		go func() {
			select {
			case <-m.cfg.Clock.After(m.cfg.LeaseDuration):
				m.notify()
			case <-ctx.Done():
			}
		}()
	}
	m.deadlineWake.at(ctx, m.deadline)
}

// nextState is the state the next renewal writes, and whether authority
// held when it was composed; ok is false when nothing may be written (the
// replica left, or lost authority with pieces still running or too
// recently to rejoin).
func (m *Member) nextState() (st State, heldAtSend, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaving {
		return st, false, false
	}
	st = m.desired
	now := m.cfg.Clock.Now()
	heldAtSend = now.Before(m.deadline)
	// A replica without authority rejoins only once nothing runs, and no
	// sooner than its lease would have run out had it stopped renewing:
	// a rejoin tells the others its pieces are free at once, while a
	// write it admitted before its deadline may still be on its way (the
	// reset of its connection recalls nothing already on the wire;
	// docs/benchmarks/chaos has the soak that caught a partition started
	// elsewhere 650 ms past its owner's deadline).
	if !heldAtSend && (len(st.Running) > 0 || now.Before(m.rejoinAt())) {
		return st, false, false
	}
	if !heldAtSend {
		// This write (re)joins: others must not count this replica in the
		// ring until its quiet period is over.
		st.Joining = true
	}
	m.seq++
	st.Seq = m.seq
	st.Version = m.writeVersionLocked()
	st.Weights = m.weightsOfLocked(st.Running)
	st.Loading = m.loadingOfLocked(st.Running)
	st.Young = m.youngOfLocked()
	if st.Version != m.confirmed.Version && m.confirmed.Version != 0 {
		m.logger.Info("Writing another state version: the members observed read it", "version", st.Version, "was", m.confirmed.Version)
	}
	return st, heldAtSend, true
}

// write updates (or creates) the Lease with value.
func (m *Member) write(ctx context.Context, value string, now time.Time) (*coordinationv1.Lease, error) {
	store := m.cfg.Store
	m.mu.Lock()
	current := m.lease
	m.mu.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		if current == nil {
			lease := m.leaseObject(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: m.cfg.Identity, Namespace: m.cfg.Namespace}}, value, now)
			created, err := store.Create(ctx, lease)
			if apierrors.IsAlreadyExists(err) {
				// Someone created it between our read and write: read it
				// and let the next renewal decide (acquire is only at
				// start; a live other holder shows as a conflict loop).
				current, err = store.Get(ctx, m.cfg.Namespace, m.cfg.Identity)
				if err != nil {
					return nil, fmt.Errorf("reading lease after create conflict: %w", err)
				}
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("creating lease: %w", err)
			}
			return created, nil
		}
		updated, err := store.Update(ctx, m.leaseObject(current.DeepCopy(), value, now))
		switch {
		case apierrors.IsNotFound(err):
			m.logger.Info("Own lease was deleted by someone else; creating it again", "lease", m.cfg.Identity)
			current = nil
			continue
		case apierrors.IsConflict(err):
			// Our own writes are serial, so a conflict is another writer
			// (an operator, a controller). Overwrite with our state: the
			// Lease is ours.
			current, err = store.Get(ctx, m.cfg.Namespace, m.cfg.Identity)
			if apierrors.IsNotFound(err) {
				current = nil
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading lease after conflict: %w", err)
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("updating lease: %w", err)
		}
		return updated, nil
	}
	return nil, errors.New("lease kept changing under concurrent writers")
}

func (m *Member) leaseObject(l *coordinationv1.Lease, value string, now time.Time) *coordinationv1.Lease {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[FleetLabel] = m.cfg.Fleet
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[StateAnnotation] = value
	if m.supports != "" {
		l.Annotations[SupportsAnnotation] = m.supports
	}
	if m.cfg.Partitions > 0 {
		l.Annotations[PartitionsAnnotation] = strconv.Itoa(m.cfg.Partitions)
	}
	l.Spec.HolderIdentity = ptr.To(m.cfg.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(m.cfg.LeaseDuration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if l.Spec.AcquireTime == nil || m.lease == nil || m.confirmed.Incarnation != m.incarnation {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	}
	return l
}

// Leave publishes a final state with nothing running and deletes the Lease,
// so the others take over at once instead of after a lease duration. The
// caller must have stopped every piece.
func (m *Member) Leave(ctx context.Context) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.Lock()
	st := m.desired
	st.Running, st.Leaving, st.Joining = nil, true, false
	m.seq++
	st.Seq = m.seq
	st.Version = m.writeVersionLocked()
	m.leaving = true
	m.deadline = time.Time{}
	m.mu.Unlock()
	value, err := st.EncodeVersion(st.Version)
	if err != nil {
		return err
	}
	lease, err := m.write(ctx, value, m.cfg.Clock.Now())
	if err != nil {
		return fmt.Errorf("publishing leave: %w", err)
	}
	err = m.cfg.Store.Delete(ctx, m.cfg.Namespace, m.cfg.Identity, metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting lease: %w", err)
	}
	m.logger.Info("Left the fleet", "lease", m.cfg.Identity)
	if m.leader != nil {
		return m.leader.leave(ctx)
	}
	return nil
}

// timeLeft is how long until deadline, on this replica's clock (negative:
// since when it passed; 0 when there is none). A deadline is an instant
// of the observer's clock: printed as a date it misleads a reader
// comparing it with another machine's logs.
func timeLeft(deadline, now time.Time) time.Duration {
	if deadline.IsZero() {
		return 0
	}
	return deadline.Sub(now).Round(time.Millisecond)
}

// rejoinAt is the earliest a replica that lost authority may rejoin: its
// last deadline plus the margin by which the others' lease outlasts it
// (LeaseDuration - RenewDeadline), when a member that stops renewing
// loses its pieces. A replica that never held authority may join at once.
// Called with mu held.
func (m *Member) rejoinAt() time.Time {
	if m.deadline.IsZero() {
		return m.deadline
	}
	return m.deadline.Add(m.cfg.LeaseDuration - m.cfg.RenewDeadline)
}
