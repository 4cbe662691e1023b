// Which State versions a member reads and writes beside members of
// another release (see StateVersion).

package membership

import "slices"

// readVersions are the State versions this member reads: what its
// Supports says, else every version this release reads.
func (m *Member) readVersions() []int {
	if len(m.cfg.Supports.StateVersions) > 0 {
		return m.cfg.Supports.StateVersions
	}
	return StateVersions
}

// writeVersionLocked is the newest State version that this member and
// every member it observes read, so that no member of an older release
// reads this one's state as garbage. A member whose Lease says nothing of
// state versions (a release from before SupportsAnnotation) reads only
// version 1. Only live observations count: a member reads the versions it
// read when it started for as long as it runs, so a peer's version never
// goes away under it, and once the last member of the older release has
// left (or expired) the next write uses the newer version. m.mu is held.
func (m *Member) writeVersionLocked() int {
	version := 0
	for _, v := range m.readVersions() {
		if v > version && m.allObservedRead(v) {
			version = v
		}
	}
	if version == 0 {
		// No version in common: write the oldest this member reads, which
		// every release so far reads.
		return slices.Min(m.readVersions())
	}
	return version
}

// allObservedRead says whether every member observed alive reads version.
func (m *Member) allObservedRead(version int) bool {
	now := m.cfg.Clock.Now()
	for _, o := range m.obs {
		if !o.good || o.expired || (o.deleted && (o.state.Leaving || now.Sub(o.lastChange) > o.duration)) {
			continue
		}
		reads := o.supports.StateVersions
		if len(reads) == 0 {
			reads = []int{1}
		}
		if !slices.Contains(reads, version) {
			return false
		}
	}
	return true
}
