package membership

import "time"

// A Lease watch can stall while its connection lives (a proxy holding the
// stream, a stuck watch cache): renewals go on succeeding, and this member
// goes on judging the others by what it last saw of them. A piece handed
// to it then waits for the stall to end, since the giver's release is not
// seen. This member's own renewals tell when: the watch must deliver each
// of them. While one written more than RetryPeriod ago is still
// undelivered, every renewal asks listLoop for a consistent list of the
// Leases, until the watch catches up.

// maxUnseenRenewals bounds the renewals kept while the watch is behind: a
// caught-up watch delivers the newest, which clears them all.
const maxUnseenRenewals = 16

// unseenRenewal is a renewal the watch has not delivered yet.
type unseenRenewal struct {
	rv   string
	sent time.Time
}

// renewedLocked records a renewal of this member's Lease, written at rv;
// m.mu is held.
func (m *Member) renewedLocked(rv string, sent time.Time) {
	if rv == m.deliveredOwn {
		// The watch delivered it before its answer was read.
		return
	}
	if len(m.unseenRenewals) == maxUnseenRenewals {
		m.unseenRenewals = m.unseenRenewals[1:]
	}
	m.unseenRenewals = append(m.unseenRenewals, unseenRenewal{rv: rv, sent: sent})
}

// watchedOwn takes the watch's delivery of obj: this member's Lease
// delivered at a version it wrote means every renewal up to it is seen.
func (m *Member) watchedOwn(obj any) {
	lease := leaseOf(obj)
	if lease == nil || lease.Name != m.cfg.Identity {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deliveredOwn = lease.ResourceVersion
	for i, r := range m.unseenRenewals {
		if r.rv == lease.ResourceVersion {
			m.unseenRenewals = m.unseenRenewals[i+1:]
			if m.watchLagging && len(m.unseenRenewals) == 0 {
				m.watchLagging = false
				m.logger.Info("Lease watch caught up with this replica's renewals")
			}
			return
		}
	}
}

// listIfWatchBehindLocked asks for a list of the Leases if the watch has
// not delivered a renewal sent more than RetryPeriod before now; m.mu is
// held.
func (m *Member) listIfWatchBehindLocked(now time.Time) {
	if len(m.unseenRenewals) == 0 {
		return
	}
	behind := now.Sub(m.unseenRenewals[0].sent)
	if behind <= m.cfg.RetryPeriod {
		return
	}
	if !m.watchLagging {
		m.watchLagging = true
		m.logger.Info("Lease watch is behind this replica's own renewals; listing the fleet's Leases with every renewal until it catches up", "behind", behind.Round(time.Millisecond))
	}
	watchLagLists.Inc()
	m.wantList(now)
}
