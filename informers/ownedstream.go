package informers

import (
	"context"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// WatchWithContext opens the one stream: every source resumes from its
// own version, not the reflector's (sources' events arrive out of order),
// until the reflector stops the stream.
func (lw *ownedListWatch) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	t, err := lw.target()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &ownedStream{lw: lw, target: t, ctx: ctx, cancel: cancel, out: make(chan watch.Event), timeout: options.TimeoutSeconds, producers: map[*source]context.CancelFunc{}}
	lw.sendMu.Lock()
	lw.mu.Lock()
	if lw.stream != nil {
		lw.stream.Stop()
	}
	lw.stream = s
	purge := lw.purge
	lw.purge = nil
	lw.mu.Unlock()
	go func() {
		defer lw.sendMu.Unlock()
		lw.sendPurge(s, purge)
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if lw.stream != s {
			return
		}
		for src := range lw.sources {
			s.start(src)
		}
	}()
	go func() {
		<-ctx.Done()
		lw.mu.Lock()
		if lw.stream == s {
			lw.stream = nil
		}
		lw.mu.Unlock()
		s.wg.Wait()
		close(s.out)
	}()
	return s, nil
}

// ownedStream is one stream of an ownedListWatch: a producer per source.
type ownedStream struct {
	lw      *ownedListWatch
	target  *listWatchTarget
	ctx     context.Context
	cancel  context.CancelFunc
	out     chan watch.Event
	timeout *int64
	wg      sync.WaitGroup

	// producers, guarded by lw.mu.
	producers map[*source]context.CancelFunc
}

func (s *ownedStream) Stop()                          { s.cancel() }
func (s *ownedStream) ResultChan() <-chan watch.Event { return s.out }

// start runs src's producer. Called with lw.mu held.
func (s *ownedStream) start(src *source) {
	if s.ctx.Err() != nil {
		return
	}
	if _, ok := s.producers[src]; ok {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.producers[src] = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.produce(ctx, src)
	}()
}

// stop ends src's producer. Called with lw.mu held.
func (s *ownedStream) stop(src *source) {
	if cancel, ok := s.producers[src]; ok {
		cancel()
		delete(s.producers, src)
	}
}

// send hands e to the reflector; false if the stream ended first. Called
// with lw.sendMu held.
func (s *ownedStream) send(e watch.Event) bool {
	select {
	case s.out <- e:
		if m, err := meta.Accessor(e.Object); err == nil {
			s.lw.stored = m.GetResourceVersion()
			s.lw.raiseHighest(s.lw.stored)
		}
		return true
	case <-s.ctx.Done():
		return false
	}
}

// emit sends the events of src, while it is a source, as decide says and
// records them in the ledger; then src resumes from version ("":
// unchanged). listed, for src's list, names the namespaces it covered:
// their deletions are computed here against the ledger. watched, for a
// watch, is src's watchGen when it opened: once superseded, it emits
// nothing.
func (s *ownedStream) emit(ctx context.Context, src *source, watched *uint64, events []watch.Event, version string, listed map[string]string) bool {
	lw := s.lw
	relist := listed != nil
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	if _, current := lw.sources[src]; !current || ctx.Err() != nil || watched != nil && *watched != src.watchGen {
		lw.mu.Unlock()
		return false
	}
	var covered []string
	var stale map[string]bool
	if relist {
		covered, stale = lw.relistCovers(src, listed, version)
		events = append(events, lw.deletionsAbsent(covered, events)...)
	}
	lw.mu.Unlock()
	var added []runtime.Object
	for _, e := range events {
		m, err := meta.Accessor(e.Object)
		if err != nil {
			continue
		}
		ns := m.GetNamespace()
		if stale[ns] {
			continue
		}
		switch s.decide(src, e, m, relist) {
		case eventDropped:
			continue
		case eventUnchanged:
			added = append(added, e.Object)
			continue
		}
		if !s.send(e) {
			return false
		}
		lw.recordSent(e, ns, m.GetName())
		if relist && e.Type == watch.Added {
			added = append(added, e.Object)
		}
	}
	s.emitted(src, version, relist, covered, stale, added)
	return s.bookmark()
}

// eventFate is what emit does with one event of a source.
type eventFate int

const (
	eventSent      eventFate = iota // sent to the informer
	eventDropped                    // not its to send (or held back for a feeder)
	eventUnchanged                  // a relist's object the store holds unchanged: counted as listed, not sent
)

// decide is the fate of event e (of object m) of src; a joining
// namespace's events go to its backlog.
func (s *ownedStream) decide(src *source, e watch.Event, m metav1.Object, relist bool) eventFate {
	lw := s.lw
	ns := m.GetNamespace()
	lw.mu.Lock()
	loaded := lw.loaded[ns] || lw.take(src, ns)
	// At or below a floor: handed over, or held back already (takeFrom).
	floor, floored := src.floors[ns]
	floored = floored && !relist && !newerVersion(m.GetResourceVersion(), floor)
	j, joining := src.joining[ns]
	if joining && loaded && !relist && !floored {
		j.backlog = append(j.backlog, e)
	}
	// The ledger changes only under sendMu, which the caller holds.
	_, sent := lw.ledger[ns][m.GetName()]
	lw.mu.Unlock()
	if !loaded || !src.has(ns) || joining || floored {
		return eventDropped
	}
	if !relist {
		if e.Type == watch.Deleted && !sent {
			// A trunk resumed from before a namespace was unloaded
			// replays such deletions (and takes a kept partition's
			// namespace at the first); a plain informer never tells
			// handlers of an object they never saw.
			return eventDropped
		}
	} else if e.Type == watch.Added && sent && lw.stores(ns, m.GetName(), m.GetResourceVersion()) {
		// Unchanged since sent: sending it again would only call
		// every OnUpdate with the same object.
		return eventUnchanged
	}
	return eventSent
}

// emitted records that src has delivered through version and, after a
// list, what it handed over; the joining namespaces it did not cover get
// a feeder. Called with sendMu held.
func (s *ownedStream) emitted(src *source, version string, relist bool, covered []string, stale map[string]bool, added []runtime.Object) {
	lw := s.lw
	lw.mu.Lock()
	if relist {
		for ns := range src.floors {
			if !stale[ns] {
				delete(src.floors, ns)
			}
		}
	}
	if version != "" {
		src.advance(version)
	}
	if relist {
		lw.noteListed(covered, added)
		if f := lw.feedJoining(src); f != nil {
			s.start(f)
		}
	}
	lw.mu.Unlock()
	lw.raiseHighest(version)
}

// raiseHighest makes version the newest delivered if it is newer ("" never
// is). Called with sendMu held.
func (lw *ownedListWatch) raiseHighest(version string) {
	if newerVersion(version, lw.highest) {
		lw.highest = version
	}
}

// relistCovers splits the namespaces src's list (at version) covered into
// those it hands over, which stop joining, and the stale ones, which a
// feeder handed over at a newer version and the list must not take back.
// Called with mu held.
func (lw *ownedListWatch) relistCovers(src *source, listed map[string]string, version string) (covered []string, stale map[string]bool) {
	stale = map[string]bool{}
	for ns := range listed {
		if floor, ok := src.floors[ns]; ok && newerVersion(floor, version) {
			stale[ns] = true
			continue
		}
		if ns != "" && src.has(ns) {
			covered = append(covered, ns)
		}
	}
	sort.Strings(covered)
	for _, ns := range covered {
		delete(src.joining, ns)
	}
	return covered, stale
}

// deletionsAbsent are deletions of the objects the informer holds in
// namespaces that a list (events) no longer has. Called with mu held.
func (lw *ownedListWatch) deletionsAbsent(namespaces []string, events []watch.Event) []watch.Event {
	present := map[string]bool{}
	for _, e := range events {
		if m, err := meta.Accessor(e.Object); err == nil {
			present[m.GetNamespace()+"/"+m.GetName()] = true
		}
	}
	indexer := lw.indexer()
	var deletions []watch.Event
	for _, ns := range namespaces {
		for name := range lw.ledger[ns] {
			if present[ns+"/"+name] {
				continue
			}
			obj, exists, err := indexer.GetByKey(ns + "/" + name)
			if err != nil || !exists {
				obj = lw.placeholder(ns, name, "")
			}
			if obj != nil {
				deletions = append(deletions, watch.Event{Type: watch.Deleted, Object: obj.(runtime.Object)})
			}
		}
	}
	return deletions
}

// stores says whether the informer's store has ns/name at version; only
// meaningful for an object in the ledger (an unloaded namespace's
// deletions may still be on their way to the store).
func (lw *ownedListWatch) stores(ns, name, version string) bool {
	stored, ok := storedVersion(lw.indexer(), ns+"/"+name)
	return ok && stored == version
}

func (lw *ownedListWatch) recordSent(e watch.Event, ns, name string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if e.Type == watch.Deleted {
		delete(lw.ledger[ns], name)
	} else {
		record(lw.ledger, ns, name)
	}
}

// feedJoining makes a feeder for the namespaces joining trunk with none,
// if any; the caller starts it. Called with mu held.
func (lw *ownedListWatch) feedJoining(trunk *source) *source {
	var namespaces []string
	for ns, j := range trunk.joining {
		if j.feeder == nil {
			namespaces = append(namespaces, ns)
		}
	}
	if len(namespaces) == 0 {
		return nil
	}
	sort.Strings(namespaces)
	f := &source{namespaces: namespaces, feeds: trunk}
	trunk.join(namespaces, f)
	lw.sources[f] = struct{}{}
	lw.countSources()
	return f
}

// feed hands over feeder f's list (takeFeed) and ends f. The trunk's
// events are held back from before f's list was asked for, so together
// they miss nothing.
func (s *ownedStream) feed(ctx context.Context, f *source, items []runtime.Object, versions map[string]string) {
	lw := s.lw
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	namespaces, events, listedCount, ok := s.takeFeed(ctx, f, items, versions)
	lw.countSources()
	lw.mu.Unlock()
	if !ok {
		return
	}
	var added []runtime.Object
	for i, e := range events {
		m, err := meta.Accessor(e.Object)
		if err != nil {
			continue
		}
		if !s.send(e) {
			return
		}
		lw.recordSent(e, m.GetNamespace(), m.GetName())
		if i < listedCount && e.Type == watch.Added {
			added = append(added, e.Object)
		}
	}
	lw.mu.Lock()
	lw.noteListed(namespaces, added)
	lw.mu.Unlock()
	for _, ns := range namespaces {
		lw.raiseHighest(versions[ns])
	}
	s.bookmark()
}

// takeFeed ends feeder f and returns the namespaces still joining its
// trunk through it, now the trunk's, and the events that bring them into
// the store: first listedCount from f's list (its objects and the
// deletions of what it lacks), then the backlog newer than the list. False
// if f or its trunk was stopped, or ctx ended. Called with lw.mu held.
func (s *ownedStream) takeFeed(ctx context.Context, f *source, items []runtime.Object, versions map[string]string) (namespaces []string, events []watch.Event, listedCount int, ok bool) {
	lw := s.lw
	// Read first: stopping f ends ctx, its producer's.
	stopped := ctx.Err() != nil
	_, current := lw.sources[f]
	delete(lw.sources, f)
	s.stop(f)
	trunk := f.feeds
	if _, trunkCurrent := lw.sources[trunk]; !current || !trunkCurrent || stopped {
		return nil, nil, 0, false
	}
	backlogs := map[string][]watch.Event{}
	for ns := range versions {
		if j := trunk.joining[ns]; j != nil && j.feeder == f {
			namespaces = append(namespaces, ns)
			backlogs[ns] = j.backlog
			delete(trunk.joining, ns)
			trunk.raiseFloor(ns, versions[ns])
		}
	}
	sort.Strings(namespaces)
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil {
			if _, taken := backlogs[m.GetNamespace()]; taken {
				events = append(events, watch.Event{Type: watch.Added, Object: item})
			}
		}
	}
	events = append(events, lw.deletionsAbsent(namespaces, events)...)
	listedCount = len(events)
	for _, ns := range namespaces {
		for _, e := range backlogs[ns] {
			if m, err := meta.Accessor(e.Object); err == nil && newerVersion(m.GetResourceVersion(), versions[ns]) {
				events = append(events, e)
			}
		}
	}
	return namespaces, events, listedCount, true
}

// bookmark brings the store's version up to the newest any source has
// delivered, if what was sent last left it behind. Called with lw.sendMu
// held. The store's version (LastStoreSyncResourceVersion), which the
// workload controllers' read-after-write checks wait on
// (pkg/controller/util/consistency), would otherwise go back with the
// older versions that lists and purges hand over, and the checks stall.
// It is the newest delivered, not the lowest every source reached, since a
// quiet source advances only with the apiserver's bookmark (about once a
// minute); a check may then pass before its write's event arrives from
// another source, a stale read the controllers' expectations cover.
func (s *ownedStream) bookmark() bool {
	lw := s.lw
	if lw.highest == "" || !newerVersion(lw.highest, lw.stored) {
		return true
	}
	obj := lw.placeholder("", "", lw.highest)
	if obj == nil {
		return true
	}
	return s.send(watch.Event{Type: watch.Bookmark, Object: obj})
}
