package membership

// When a join ends: a process that has just written its Lease, or one
// whose authority ran out, owns nothing until it has certainly seen every
// member that may act (package shard's rule 4).

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Joining reports whether this incarnation is still joining: it must not
// own anything, because it may not yet have seen every member that may
// act (see package shard). A join begins with the first write of this
// process's Lease, and again whenever authority that had run out comes
// back: a renewal of its own Lease or of kube-controller-manager's leader
// Lease after the last one's authority ran out. It lasts one lease
// duration, by when every live member has renewed its Lease in sight, or
// ends earlier once both of these hold:
//
//   - a consistent list of the fleet's Leases, sent after the join began,
//     is observed: every member whose Lease exists is seen, as of a time
//     after the join began, and none is judged expired (a member judged
//     expired is left out of the views, and after an apiserver outage
//     that judgement is no proof: see unseenLocked);
//   - a renewal of kube-controller-manager's leader Lease, sent after the
//     join began, succeeded, and every writer listed on the version it
//     replaced is seen (or known to have stopped). A member acts only on
//     a renewal of that Lease, and each renewal lists its writer, so this
//     covers a member whose own Lease was deleted by hand and not yet
//     recreated, which no list shows.
//
// A join that waits asks for the list and the renewal it needs at once:
// waiting the whole lease duration would make every rolling restart pay
// a lease duration per replica.
//
// It stays joining while a live member's Lease holds a state version it
// does not read: that member is invisible to it (a newer release writes
// the version every member reads, so this lasts until the writer has seen
// this member, normally one renewal). Once a join is over it stays over
// until the next (re)join: a Lease that turns unreadable later (written by
// hand, or by a member of a newer release before it saw this one) holds no
// member that already owns pieces.
func (m *Member) Joining() bool {
	var read writersRead
	var heldSince time.Time
	if m.leader != nil {
		// Read before m.mu: the leader Lease takes m.mu under its own lock.
		read, heldSince = m.leader.lastRead()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.synced || m.joinedAt.IsZero() {
		return true
	}
	start := m.joinedAt
	if heldSince.After(start) {
		start = heldSince
	}
	if m.joinOver.Equal(start) {
		return false
	}
	waited := m.cfg.Clock.Since(start)
	unseen := m.unseenLocked(read, start)
	if waited < m.cfg.LeaseDuration && unseen != "" {
		if m.leader != nil && m.listSent.Before(start) {
			m.wantList(start)
		}
		if m.leader != nil && (!read.ok || read.sent.Before(start)) && !m.renewAsked.Equal(start) {
			// Once per join: the renewal loop comes round up to a retry
			// period later.
			m.renewAsked = start
			m.leader.askRenewal()
		}
		return true
	}
	if name := m.unreadMemberLocked(); name != "" {
		return true
	}
	m.joinOver = start
	m.logger.Info("Finished joining the fleet", "lease", m.cfg.Identity, "after", waited.Round(time.Millisecond), "everyMemberSeen", unseen == "")
	return false
}

// unseenLocked says why this member cannot yet be sure it has seen every
// member that may act since start ("" when it can): see Joining. m.mu is
// held.
func (m *Member) unseenLocked(read writersRead, start time.Time) string {
	switch {
	case m.leader == nil:
		return "no leader lease to read the writers of"
	case m.listSent.Before(start):
		return "the fleet's Leases not listed since the join began"
	case !read.ok || read.sent.Before(start):
		return "kube-controller-manager's leader lease not renewed since the join began"
	}
	for _, w := range read.writers {
		identity, incarnation, ok := strings.Cut(w, "/")
		if !ok {
			return fmt.Sprintf("writer %q unreadable", w)
		}
		if identity == m.cfg.Identity {
			// This incarnation, or a former one: it took over the Lease
			// only after that one left or stopped renewing.
			continue
		}
		if m.otherWriterStatusLocked(identity, incarnation) == writerUnknown {
			return fmt.Sprintf("writer %s not seen", w)
		}
	}
	// A member this one leaves out of its views must certainly act no
	// more. Expiry is not certain here: after an apiserver outage longer
	// than a lease duration, members confirm each other's expiry before
	// any has renewed again, and two that each left the other out would
	// both take every piece (TestHandoverAPIServerRestart guards it). Such
	// a member renews, or the join ends at the lease duration. (A member
	// whose Lease was deleted by hand and not recreated for a lease
	// duration has no authority; if it comes back, it joins again, seeing
	// this one.)
	for name, o := range m.obs {
		// Garbage holds no one, an unread version keeps the join going
		// by itself (unreadMemberLocked), a graceful leave is final.
		if o.good && !o.state.Leaving && o.expired && !o.deleted {
			return fmt.Sprintf("member %s judged expired", name)
		}
	}
	return ""
}

// wantList asks listLoop for a list sent at or after start; m.mu is held.
func (m *Member) wantList(start time.Time) {
	if start.After(m.listWanted) {
		m.listWanted = start
	}
	select {
	case m.listWake <- struct{}{}:
	default:
	}
}

// listLoop lists the fleet's Leases whenever a join wants it, retrying
// until a list succeeds.
func (m *Member) listLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.listWake:
		}
		for {
			m.mu.Lock()
			wanted := m.listSent.Before(m.listWanted)
			m.mu.Unlock()
			if !wanted {
				break
			}
			if err := m.listOnce(ctx); err != nil {
				m.logger.V(2).Info("Listing the fleet's leases for a join failed; retrying", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-m.cfg.Clock.After(m.cfg.RetryPeriod / 4):
				}
			}
		}
	}
}

// listOnce reads the fleet's Leases from the apiserver (a consistent read:
// not served from a cache that may lag) and observes them.
func (m *Member) listOnce(ctx context.Context) error {
	selector := labels.SelectorFromSet(labels.Set{FleetLabel: m.cfg.Fleet}).String()
	sent := m.cfg.Clock.Now()
	reqCtx, cancel := context.WithTimeout(ctx, m.cfg.renewTimeout())
	defer cancel()
	list, err := m.cfg.Store.List(reqCtx, m.cfg.Namespace, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("listing the fleet's leases: %w", err)
	}
	m.observeListed(list.Items)
	m.mu.Lock()
	m.listSent = sent
	m.mu.Unlock()
	m.notify()
	return nil
}

// observeListed observes the listed Leases, so that what this member
// knows of every other is at least as new as the list, which was sent after
// the join began. Observations from before the join are not enough: a
// replica cut off from the apiserver keeps its last copy of each Lease,
// and on its return those still acknowledge the epoch it published
// before the cut, while the others have left it out of their views and
// taken its pieces, so it would start a partition beside the replica that
// took it (TestNetworkCutWithControllers guards it).
// Observing drops what is older than what was seen; a deletion already
// seen is kept (a list sent before the deletion would undo it).
func (m *Member) observeListed(leases []coordinationv1.Lease) {
	for i := range leases {
		m.mu.Lock()
		o := m.obs[leases[i].Name]
		deleted := o != nil && o.deleted
		m.mu.Unlock()
		if !deleted {
			m.observe(&leases[i], false)
		}
	}
}
