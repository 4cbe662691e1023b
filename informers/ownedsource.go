package informers

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/watch"
)

// source is the trunk or a feeder: the namespaces it carries and its
// resume version ("": list first).
type source struct {
	namespaces []string // sorted
	version    string
	// floors: nil once the source's version has passed them all.
	floors map[string]string
	// joining (the trunk): per joining namespace, its feeder and backlog.
	joining map[string]*joining
	// feeds (a feeder): the trunk its namespaces join.
	feeds *source
	// watchCovers: the namespaces the shard selector of the open watch
	// names; nil while it carries none. A namespace joining outside them
	// supersedes the watch. The version stays where the superseded watch
	// left it, older than the joining namespace's list, so the new watch
	// delivers every event of it the list does not carry.
	watchCovers map[string]bool
	watchGen    uint64
	cancelWatch context.CancelFunc
	// woken carries the wake (ownedcatchup.go). One sent while the source
	// watches stays for its next wait: one early resume, at most, per gain.
	woken chan struct{}
}

// wakeChan is the channel that wakes the source. Called with mu held.
func (s *source) wakeChan() chan struct{} {
	if s.woken == nil {
		s.woken = make(chan struct{}, 1)
	}
	return s.woken
}

// supersedeWatch ends the open watch: nothing it delivers from now on is
// emitted. Called with mu held.
func (s *source) supersedeWatch() {
	s.watchGen++
	s.watchCovers = nil
	if s.cancelWatch != nil {
		s.cancelWatch()
		s.cancelWatch = nil
	}
}

// joining is a namespace on its way into the trunk.
type joining struct {
	feeder  *source
	backlog []watch.Event
}

// join marks namespaces as joining s through feeder. Called with mu held.
func (s *source) join(namespaces []string, feeder *source) {
	if s.joining == nil {
		s.joining = map[string]*joining{}
	}
	for _, ns := range namespaces {
		s.insert(ns)
		s.joining[ns] = &joining{feeder: feeder}
		if s.watchCovers != nil && !s.watchCovers[ns] {
			s.supersedeWatch()
		}
	}
}

// takeFrom makes the trunk carry ns, created at version born, with no
// list: every object of ns is newer than born, so a watch from born or
// before delivers all of it. A trunk past born (its watch dropped or did
// not select ns's events) resumes from born with every other namespace
// floored at what it had delivered, so it replays only ns's events.
// Called with mu held.
func (s *source) takeFrom(ns, born string) {
	s.insert(ns)
	past := newerVersion(s.version, born) && !plantedTakeFromTrunk
	if past {
		for _, other := range s.namespaces {
			if delivered := s.delivered(other); other != ns && newerVersion(delivered, born) {
				s.setFloor(other, delivered)
			}
		}
		s.version = born
	}
	if past || s.watchCovers != nil && !s.watchCovers[ns] {
		s.supersedeWatch()
	}
}

func (s *source) remove(ns string) {
	if i, ok := slices.BinarySearch(s.namespaces, ns); ok {
		s.namespaces = slices.Delete(s.namespaces, i, i+1)
	}
	delete(s.joining, ns)
}

// delivered is the version through which ns's events were handed over.
func (s *source) delivered(ns string) string {
	if floor, ok := s.floors[ns]; ok && newerVersion(floor, s.version) {
		return floor
	}
	return s.version
}

// raiseFloor records that a feeder's list handed ns over through version.
// Without it a trunk behind the list (waiting to resume) would replay
// ns's older events after it: objects would go back to older versions,
// and the deletion of one the list never had would reach every handler.
func (s *source) raiseFloor(ns, version string) {
	if newerVersion(version, s.delivered(ns)) {
		s.setFloor(ns, version)
	}
}

// setFloor makes version ns's floor.
func (s *source) setFloor(ns, version string) {
	if s.floors == nil {
		s.floors = map[string]string{}
	}
	s.floors[ns] = version
}

// advance records that the source has delivered through version.
func (s *source) advance(version string) {
	s.version = version
	for _, floor := range s.floors {
		if newerVersion(floor, version) {
			return
		}
	}
	s.floors = nil
}

func (s *source) insert(ns string) {
	if i, ok := slices.BinarySearch(s.namespaces, ns); !ok {
		s.namespaces = slices.Insert(s.namespaces, i, ns)
	}
}

func (s *source) has(ns string) bool {
	_, ok := slices.BinarySearch(s.namespaces, ns)
	return ok
}
