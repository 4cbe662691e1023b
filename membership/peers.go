// What a member observes of the others: their Leases' events, the peers
// it reports to the protocol, expiry confirmed by a fresh read, and the
// judgement of another replica's renewals of kube-controller-manager's
// Lease.

package membership

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Peer is what this replica observes of another member.
type Peer struct {
	Name  string
	State State
	// Participant: alive and not leaving. Otherwise the peer is a ghost:
	// its Lease was deleted, or a newer incarnation took it over, while it
	// listed running pieces, and it counts only until it would have
	// expired.
	Participant bool
	// ObservedAt is when, on this replica's clock, its Lease last changed.
	ObservedAt time.Time
	// Supports is what its Lease says it supports, read with State (empty
	// for a release from before SupportsAnnotation).
	Supports Supports
}

// observation is the watch-side record of one Lease.
type observation struct {
	state      State
	supports   Supports // read from the Lease that state came from
	good       bool     // state holds a valid published state
	rv         string
	lastChange time.Time
	duration   time.Duration
	deleted    bool
	expired    bool
	checking   bool
	retired    map[string]bool // incarnations superseded by a newer one
	// ghost: the last state of the incarnation a newer one superseded
	// while it listed running pieces, counted until ghostUntil.
	ghost      *State
	ghostSeen  time.Time
	ghostUntil time.Time
	lastBadLog time.Time
	// unreadVersion: the last write is of a state version this member
	// does not read; see Member.Joining.
	unreadVersion bool
}

// Peers lists the other members as observed now, in name order.
func (m *Member) Peers() []Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	names := make([]string, 0, len(m.obs))
	for name := range m.obs {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []Peer
	for _, name := range names {
		o := m.obs[name]
		if o.ghost != nil && now.Before(o.ghostUntil) {
			out = append(out, Peer{Name: name, State: *o.ghost, ObservedAt: o.ghostSeen})
		}
		if !o.good || o.expired {
			continue
		}
		p := Peer{Name: name, State: o.state, ObservedAt: o.lastChange, Supports: o.supports}
		// A Lease deleted after a graceful leave (its last state says
		// leaving: nothing runs and nothing will) is gone. A Lease deleted
		// by anyone else may belong to a live member that keeps acting on
		// what it has seen, even with nothing running yet (it may be about
		// to start what others acknowledged to it): it counts as before
		// for one lease duration, until it renews (recreating its Lease)
		// or is certainly dead. Dropped at once, another could start its
		// pieces while it starts them too.
		if o.deleted && (o.state.Leaving || now.Sub(o.lastChange) > o.duration) {
			continue
		}
		p.Participant = !o.state.Leaving
		out = append(out, p)
	}
	return out
}

// writerState is what this replica knows of another replica's renewals of
// kube-controller-manager's leader Lease.
type writerState int

const (
	// writerUnknown: not seen in the fleet, or not that incarnation.
	writerUnknown writerState = iota
	// writerLive: a member seen alive; it may act on its renewals.
	writerLive
	// writerStopped: certainly acts no more: it left gracefully (its last
	// state lists nothing running), its Lease expired (confirmed by a
	// fresh read), or a newer incarnation of it took over.
	writerStopped
)

// writerStatus judges one entry ("identity/incarnation") of the writers
// list on kube-controller-manager's leader Lease.
func (m *Member) writerStatus(writer string) writerState {
	identity, incarnation, ok := strings.Cut(writer, "/")
	if !ok {
		return writerUnknown
	}
	if identity == m.cfg.Identity {
		if incarnation == m.incarnation {
			return writerLive
		}
		// This process took over its Lease only after the former
		// incarnation left or stopped renewing for a lease duration.
		return writerStopped
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.otherWriterStatusLocked(identity, incarnation)
}

// otherWriterStatusLocked judges a writer of another identity; m.mu is
// held.
func (m *Member) otherWriterStatusLocked(identity, incarnation string) writerState {
	o := m.obs[identity]
	switch {
	case o == nil:
		return writerUnknown
	case o.retired[incarnation]:
		return writerStopped
	case !o.good || o.state.Incarnation != incarnation:
		return writerUnknown
	case o.expired || o.state.Leaving:
		return writerStopped
	case o.deleted && m.cfg.Clock.Since(o.lastChange) > o.duration:
		// Deleted by hand and not recreated for a lease duration: a live
		// member recreates its Lease at its next renewal.
		return writerStopped
	}
	return writerLive
}

// observe records a Lease event.
func (m *Member) observe(obj any, deleted bool) {
	lease := leaseOf(obj)
	if lease == nil || lease.Name == m.cfg.Identity {
		return
	}
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	defer m.notify()
	defer m.mu.Unlock()
	o := m.obs[lease.Name]
	if o == nil {
		o = &observation{retired: map[string]bool{}}
		m.obs[lease.Name] = o
	}
	if deleted {
		o.deleted = true
		o.lastChange = now
		return
	}
	if lease.ResourceVersion == o.rv && !o.deleted {
		return
	}
	st, err := parseState(lease.Annotations[StateAnnotation], m.readVersions())
	// Only the version after the newest this member reads can be a live
	// peer's (releases run side by side only with the next one); any
	// other is garbage, which must not hold a joiner.
	var versionErr *unreadVersionError
	o.unreadVersion = errors.As(err, &versionErr) && versionErr.version == slices.Max(m.readVersions())+1
	switch {
	case err != nil:
		if now.Sub(o.lastBadLog) > time.Minute {
			o.lastBadLog = now
			m.logger.Error(err, "Ignoring unreadable state in fleet lease; keeping the last good one", "lease", lease.Name, "hadGoodState", o.good)
		}
	case o.retired[st.Incarnation]:
		return
	case o.good && st.Incarnation == o.state.Incarnation && st.Seq < o.state.Seq:
		// Older than what was seen: a relist must not take us back.
		return
	default:
		m.adopt(o, lease, st, now)
	}
	o.rv, o.lastChange, o.deleted, o.expired = lease.ResourceVersion, now, false, false
	o.duration = m.cfg.LeaseDuration
	if d := ptr.Deref(lease.Spec.LeaseDurationSeconds, 0); d > 0 && time.Duration(d)*time.Second > o.duration && time.Duration(d)*time.Second <= time.Hour {
		// Honour a longer duration a member asks for, never a shorter one.
		o.duration = time.Duration(d) * time.Second
	}
}

// leaseOf is the Lease an informer handler was given (nil if none).
func leaseOf(obj any) *coordinationv1.Lease {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	lease, _ := obj.(*coordinationv1.Lease)
	return lease
}

// adopt takes st, read from lease, as what o's member publishes. Called
// with mu held.
func (m *Member) adopt(o *observation, lease *coordinationv1.Lease, st State, now time.Time) {
	if o.good && st.Incarnation != o.state.Incarnation {
		o.retired[o.state.Incarnation] = true
		// A new incarnation proves nothing of the old one: it writes at
		// once when it finds its Lease deleted (by hand, or by a fault),
		// while the old one's writes could still be on their way. What
		// the old one listed stays listed for a lease duration from when
		// it was last seen, as for a Lease deleted by hand, unless its
		// authority certainly ran out.
		if len(o.state.Running) > 0 && !o.state.Leaving && !o.expired {
			old := o.state
			o.ghost, o.ghostSeen, o.ghostUntil = &old, o.lastChange, o.lastChange.Add(o.duration)
		}
	}
	supports, err := ParseSupports(lease.Annotations[SupportsAnnotation])
	if err != nil && now.Sub(o.lastBadLog) > time.Minute {
		// Read as a release from before the annotation: the worst a wrong
		// guess does is a view no one agrees on, never a piece run twice
		// (the placement is part of the view).
		o.lastBadLog = now
		m.logger.Error(err, "Ignoring unreadable supports annotation in fleet lease", "lease", lease.Name)
	}
	o.state, o.supports, o.good = st, supports, true
}

// expiryLoop confirms, with a fresh read, that Leases unchanged for their
// duration are really stale before dropping their holders. It wakes when
// the next Lease would expire, and at least every half retry period: a
// survivor of a killed replica then acts as soon as its Lease has expired,
// not up to a tick later.
func (m *Member) expiryLoop(ctx context.Context) {
	period := m.cfg.RetryPeriod / 2
	timer := m.cfg.Clock.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		wait := period
		if next := m.checkExpiries(ctx); !next.IsZero() {
			wait = min(wait, max(next.Sub(m.cfg.Clock.Now()), time.Millisecond))
		}
		timer.Reset(wait)
	}
}

// checkExpiries confirms the expiry of Leases unchanged for their duration,
// deletes those of members gone for good, forgets deleted ones, and returns
// when the next Lease would expire (zero if none).
func (m *Member) checkExpiries(ctx context.Context) time.Time {
	now := m.cfg.Clock.Now()
	suspects := map[string]string{} // name: the version suspected stale
	var next time.Time
	stale := map[string]string{}
	m.mu.Lock()
	for name, o := range m.obs {
		if !o.deleted && !o.expired && !o.checking {
			if now.Sub(o.lastChange) > o.duration {
				o.checking = true
				suspects[name] = o.rv
			} else if at := o.lastChange.Add(o.duration + time.Millisecond); next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if o.expired && !o.deleted && now.Sub(o.lastChange) > staleLeaseFactor*o.duration {
			stale[name] = o.rv
		}
		if o.deleted && now.Sub(o.lastChange) > o.duration+time.Minute {
			delete(m.obs, name)
		}
	}
	m.mu.Unlock()
	for name, rv := range suspects {
		m.confirmExpiry(ctx, name, rv)
	}
	for name, rv := range stale {
		m.deleteStale(ctx, name, rv)
	}
	return next
}

// staleLeaseFactor: a Lease expired for this many lease durations belongs to
// a replica that is gone for good (a Deployment's pods get new names, so a
// crashed pod's Lease would otherwise stay forever). Any member deletes it,
// on the condition that it has not changed since.
const staleLeaseFactor = 10

func (m *Member) deleteStale(ctx context.Context, name, rv string) {
	reqCtx, cancel := context.WithTimeout(ctx, m.cfg.RetryPeriod)
	defer cancel()
	err := m.cfg.Store.Delete(reqCtx, m.cfg.Namespace, name, metav1.Preconditions{ResourceVersion: &rv})
	switch {
	case err == nil:
		m.logger.Info("Deleted the lease of a member gone for good", "lease", name)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
	default:
		m.logger.V(2).Info("Cannot delete a stale lease", "lease", name, "err", err)
	}
}

// confirmExpiry reads name's Lease, suspected stale at version rv, and
// judges its member expired only if the read still shows rv (or no Lease)
// and nothing newer was observed meanwhile. Compared with the version
// observed when the read returns instead, a renewal the watch delivers
// while the read is on its way would match the read, and a live member
// would be dropped, its pieces taken while it still runs them
// (TestConfirmExpiry guards it).
func (m *Member) confirmExpiry(ctx context.Context, name, rv string) {
	reqCtx, cancel := context.WithTimeout(ctx, m.cfg.RetryPeriod)
	lease, err := m.cfg.Store.Get(reqCtx, m.cfg.Namespace, name)
	cancel()
	if plantedUnconfirmedExpiry {
		lease, err = nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), name)
	}
	m.mu.Lock()
	defer m.notify()
	defer m.mu.Unlock()
	o := m.obs[name]
	if o == nil {
		return
	}
	o.checking = false
	switch {
	case o.rv != rv || o.deleted || o.expired:
		// Observed since the suspicion: observe counted from then.
	case err != nil && !apierrors.IsNotFound(err):
		m.logger.V(2).Info("Cannot confirm lease expiry; keeping the member", "lease", name, "err", err)
	case err == nil && lease.ResourceVersion != rv:
		// It did change; the watch is behind. Count from now.
		o.lastChange = m.cfg.Clock.Now()
	default:
		o.expired = true
		m.logger.Info("Member lease expired", "lease", name, "lastChange", o.lastChange)
	}
}

// unreadMemberLocked names a live member whose Lease holds a state of a
// version this member does not read ("" when none). Such a member is
// invisible to Peers; m.mu is held.
func (m *Member) unreadMemberLocked() string {
	now := m.cfg.Clock.Now()
	for name, o := range m.obs {
		if o.unreadVersion && !o.deleted && !o.expired && now.Sub(o.lastChange) <= o.duration {
			return name
		}
	}
	return ""
}
