package informers

import (
	"context"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/watch"
)

// A source is one request of an ownedListWatch: the trunk that watches,
// or a feeder that lists namespaces into it.

// source is the trunk or a feeder: the namespaces it carries and its
// resume version ("": list first). The trunk watches every namespace (or,
// selected, those it carries) and the client keeps the ones it carries;
// it takes the namespaces of kept partitions at their first event
// (ownedpartitions.go).
type source struct {
	namespaces []string // sorted
	version    string
	// floors: per namespace, the version through which a feeder's list
	// handed its objects over; the trunk drops its events up to it. nil
	// once its own version has passed them all.
	floors map[string]string
	// joining (the trunk): namespaces being loaded, each with the feeder
	// that lists it and the trunk's events of it held back until the
	// feeder's list is handed over.
	joining map[string]*joining
	// feeds (a feeder): the trunk its namespaces join. A feeder lists
	// and never watches.
	feeds *source
	// watchCovers: the namespaces the shard selector of the source's open
	// watch names (watchSelector); nil while it carries none. A namespace
	// joining the source outside them supersedes the watch: watchGen
	// moves on, the watch delivers nothing more and is cancelled
	// (cancelWatch), and the source watches again from its version with
	// a selector naming every namespace it carries. Its version stays
	// where the superseded watch left it, older than the joining
	// namespace's list, so the new watch delivers every event of it the
	// list does not carry.
	watchCovers map[string]bool
	watchGen    uint64
	cancelWatch context.CancelFunc
	// woken cuts short the wait of a watching source after kube-apiserver
	// closed its watch early: a gain waiting for the source to catch up
	// (ownedcatchup.go) resumes its watch now. One wake sent while the
	// source watches stays for its next wait, which it cuts short: one
	// early resume, at most, per gain. Made by wakeChan.
	woken chan struct{}
}

// wakeChan is the channel that wakes the source. Called with mu held.
func (s *source) wakeChan() chan struct{} {
	if s.woken == nil {
		s.woken = make(chan struct{}, 1)
	}
	return s.woken
}

// supersedeWatch ends the source's open watch: nothing it delivers from
// now on is emitted. Called with mu held.
func (s *source) supersedeWatch() {
	s.watchGen++
	s.watchCovers = nil
	if s.cancelWatch != nil {
		s.cancelWatch()
		s.cancelWatch = nil
	}
}

// joining is a namespace on its way into the trunk: the feeder that
// lists it, and its backlog, the trunk's events of it held back until
// the feeder's list is handed over.
type joining struct {
	feeder  *source
	backlog []watch.Event
}

// join marks namespaces as joining s through feeder: s holds back their
// events from now on. Called with mu held.
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
// before delivers all of it. A trunk that has delivered past born (its
// watch dropped ns's events, or did not select them) resumes from born,
// every other namespace floored at what it had delivered, so that it
// hands over again only ns's events; a selected watch not naming ns is
// superseded. Called with mu held.
func (s *source) takeFrom(ns, born string) {
	s.insert(ns)
	past := newerVersion(s.version, born) && !plantedTakeFromTrunk
	if past {
		for _, other := range s.namespaces {
			if delivered := s.delivered(other); other != ns && newerVersion(delivered, born) {
				if s.floors == nil {
					s.floors = map[string]string{}
				}
				s.floors[other] = delivered
			}
		}
		s.version = born
	}
	if past || s.watchCovers != nil && !s.watchCovers[ns] {
		s.supersedeWatch()
	}
}

// remove takes ns out of the source's namespaces.
func (s *source) remove(ns string) {
	i := sort.SearchStrings(s.namespaces, ns)
	if i < len(s.namespaces) && s.namespaces[i] == ns {
		s.namespaces = slices.Delete(s.namespaces, i, i+1)
	}
	delete(s.joining, ns)
}

// delivered is the version through which ns's events have been handed
// over.
func (s *source) delivered(ns string) string {
	if floor, ok := s.floors[ns]; ok && newerVersion(floor, s.version) {
		return floor
	}
	return s.version
}

// raiseFloor records that ns's events have been handed over through
// version by another request (a feeder's list): if the source has not
// reached it, it drops ns's events up to it. A trunk behind the list (its
// watch waiting to resume) would otherwise replay the namespace's older
// events after the list: objects would go back to older versions, and the
// deletion of one the list never had would reach every handler.
func (s *source) raiseFloor(ns, version string) {
	if !newerVersion(version, s.delivered(ns)) {
		return
	}
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

// insert adds ns to the source's namespaces.
func (s *source) insert(ns string) {
	i := sort.SearchStrings(s.namespaces, ns)
	if i < len(s.namespaces) && s.namespaces[i] == ns {
		return
	}
	s.namespaces = slices.Insert(s.namespaces, i, ns)
}

func (s *source) has(ns string) bool {
	i := sort.SearchStrings(s.namespaces, ns)
	return i < len(s.namespaces) && s.namespaces[i] == ns
}

// newSources makes the sources of namespaces (sorted): the trunk takes
// them and a feeder lists them. A trunk that has not listed yet holds
// them back too: its list may have been asked for before they were
// loaded, and once it has listed, a feeder lists the ones it did not
// cover (emit). Called with mu held.
func (lw *ownedListWatch) newSources(namespaces []string) []*source {
	t := lw.trunk()
	switch {
	case t == nil:
		s := &source{namespaces: slices.Clone(namespaces)}
		lw.sources[s] = struct{}{}
		return []*source{s}
	case len(namespaces) == 0:
		return nil
	case t.version == "":
		t.join(namespaces, nil)
		return nil
	}
	f := &source{namespaces: slices.Clone(namespaces), feeds: t}
	t.join(namespaces, f)
	lw.sources[f] = struct{}{}
	return []*source{f}
}
