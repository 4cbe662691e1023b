package informers

import (
	"context"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// A source is one request of an ownedListWatch: the trunk that watches,
// a feeder that lists namespaces into it, or an adopting source while
// every namespace is held; compaction makes them one trunk again.

// compactDelay lets feeders hand over before the sources are merged.
const compactDelay = 2 * time.Second

// scheduleCompact merges sources soon. Called with mu held.
func (lw *ownedListWatch) scheduleCompact() {
	if lw.compacting {
		return
	}
	lw.compacting = true
	time.AfterFunc(compactDelay, lw.compact)
}

// compact makes the watching sources one trunk again, adopting exactly
// while every namespace is held: holding every namespace for a singleton
// starts an adopting source beside the trunk (its list carries every
// namespace), and releasing them ends its adopting at once
// (holdEverywhere) and leaves two sources to merge. The merged source
// watches from the oldest version of those it replaces and drops, per
// namespace, the events they had delivered, so nothing is lost or
// repeated; if that version has expired, it lists its namespaces again (a
// local relist).
func (lw *ownedListWatch) compact() {
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.compacting = false
	for s := range lw.sources {
		if s.feeds != nil || len(s.joining) > 0 {
			// A merge would leave the feeders' namespaces behind.
			lw.scheduleCompact()
			return
		}
	}
	merged, listed := lw.mergedSource()
	if merged == nil {
		return
	}
	for _, s := range listed {
		delete(lw.sources, s)
		if lw.stream != nil {
			lw.stream.stop(s)
		}
	}
	lw.sources[merged] = struct{}{}
	if lw.stream != nil {
		lw.stream.start(merged)
	}
	lw.countSources()
}

// mergedSource is the one source that replaces the watching sources,
// and those it replaces; nil when they are one source already, of the
// right shape. Called with lw.mu held.
func (lw *ownedListWatch) mergedSource() (*source, []*source) {
	var listed []*source
	through := map[string]string{}
	var namespaces []string
	oldest := ""
	for s := range lw.sources {
		if s.version == "" {
			continue
		}
		listed = append(listed, s)
		if oldest == "" || newerVersion(oldest, s.version) {
			oldest = s.version
		}
		for _, ns := range s.namespaces {
			through[ns] = s.delivered(ns)
			namespaces = append(namespaces, ns)
		}
	}
	// The merged source adopts only if a source it replaces did: an
	// adopter's list carried every namespace no other source held, and
	// without it a namespace adopted at its first event would miss its
	// older objects.
	adopts, keeps := false, false
	for _, s := range listed {
		adopts = adopts || s.adopts && lw.everywhere
		keeps = keeps || s.keeps
	}
	reshape := false
	for _, s := range listed {
		reshape = reshape || s.adopts != adopts
	}
	if len(listed) == 0 || len(listed) == 1 && !reshape {
		return nil, nil
	}
	sort.Strings(namespaces)
	merged := &source{namespaces: namespaces, version: oldest, floors: map[string]string{}, adopts: adopts, keeps: keeps}
	for _, ns := range namespaces {
		if newerVersion(through[ns], merged.version) {
			merged.floors[ns] = through[ns]
		}
	}
	merged.advance(merged.version)
	return merged, listed
}

// source is a watching source (the trunk, or an adopting one) or a
// feeder: the namespaces it carries and its resume version ("": list
// first). A watching source watches every namespace; the client keeps the
// ones it carries.
type source struct {
	namespaces []string // sorted
	version    string
	// adopts: while every namespace is held (holdEverywhere): it
	// also takes every namespace no other source holds, at its first
	// object, listed or watched. Its list and watch carry every
	// namespace from its version on, so a namespace created later needs
	// no request of its own, and its objects reach the informer as soon
	// as a cluster-wide informer's would: held namespaces joined by a
	// list after the Namespaces informer saw them, and a singleton read
	// a new namespace's first objects late (resourcequota counted the
	// PVCs created with their quota as none, and its monitors, which
	// have no add handler, never counted again until the full resync).
	adopts bool
	// keeps: the source takes the namespaces of kept partitions at their
	// first event (ownedpartitions.go): a trunk, or an adopting source
	// made when none watched; a merge of sources one of which kept. One
	// made to adopt beside a keeper never keeps, even once it no longer
	// adopts: it left those namespaces to the keeper.
	keeps bool
	// floors: per namespace, the version through which the sources this
	// one merged had delivered its events (a merged source resumes from
	// the oldest of theirs and drops what they delivered); nil once its
	// own version has passed them all.
	floors map[string]string
	// joining (the trunk): namespaces being loaded, each with the feeder
	// that lists it and the trunk's events of it held back until the
	// feeder's list is handed over.
	joining map[string]*joining
	// feeds (a feeder): the trunk its namespaces join. A feeder lists
	// and never watches.
	feeds *source
	// created (a feeder): its namespaces were created in partitions the
	// replica had loaded, so no other replica wrote into them, and its
	// list need only be as new as its trunk's version (sinceTrunk).
	created bool
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

// newSources makes the sources of namespaces (sorted). Called with mu held.
func (lw *ownedListWatch) newSources(namespaces []string) []*source {
	if k := lw.keeperSource(); lw.everywhere && k != nil && len(lw.partitions) > 0 {
		// The namespaces of naming or kept partitions are the keeper's,
		// listed by a feeder: an adopting keeper's list left those of
		// naming partitions out.
		var byPartition, rest []string
		for _, ns := range namespaces {
			if lw.partitionDecoded(ns) {
				byPartition = append(byPartition, ns)
			} else {
				rest = append(rest, ns)
			}
		}
		sources := lw.joinTrunk(k, byPartition)
		return append(sources, lw.adoptAll(rest)...)
	}
	if lw.everywhere {
		return lw.adoptAll(namespaces)
	}
	// The trunk takes the namespaces; a feeder lists them. A trunk that
	// has not listed yet holds them back too: its list may have been
	// asked for before they were loaded, and once it has listed, a
	// feeder lists the ones it did not cover (emit).
	if t := lw.trunk(); t != nil {
		return lw.joinTrunk(t, namespaces)
	}
	s := &source{namespaces: slices.Clone(namespaces), keeps: true}
	lw.sources[s] = struct{}{}
	return []*source{s}
}

// joinTrunk makes namespaces join trunk t through a new feeder (none
// while t has not listed: its list covers them, or a feeder lists those
// it did not after it, emit). Called with mu held.
func (lw *ownedListWatch) joinTrunk(t *source, namespaces []string) []*source {
	if len(namespaces) == 0 {
		return nil
	}
	if t.version == "" {
		t.join(namespaces, nil)
		return nil
	}
	f := &source{namespaces: slices.Clone(namespaces), feeds: t}
	t.join(namespaces, f)
	lw.sources[f] = struct{}{}
	return []*source{f}
}

// adoptAll hands namespaces to the adopting source, made if there is
// none. Called with mu held.
func (lw *ownedListWatch) adoptAll(namespaces []string) []*source {
	if a := lw.adopter(); a != nil {
		for _, ns := range namespaces {
			a.insert(ns)
			if _, waiting := lw.awaited[ns]; waiting && a.version != "" {
				// No event of it came since a's version, at which a's
				// list carried every namespace no other source held: it
				// had no objects then.
				lw.awaited[ns] = []keyVersion{}
			}
		}
		return nil
	}
	s := &source{namespaces: slices.Clone(namespaces), adopts: true, keeps: !lw.hasKeeper()}
	lw.sources[s] = struct{}{}
	return []*source{s}
}
