package informers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ownedListWatch lists and watches one namespaced kind in the namespaces
// the replica has loaded (those of the partitions it owns) and hands one
// informer one stream. It holds one watch per kind, the *trunk*: a
// cluster-wide watch whose events the client keeps only for loaded
// namespaces. Loading namespaces lists them and nothing else: a *feeder*
// source lists them (with shard selectors one request per maxTerms
// namespaces; without, one request per namespace, or one cluster-wide
// request past wideAbove namespaces), while the trunk holds back their
// events; once the list is handed over, the held events newer than it
// follow, and the namespaces are the trunk's. Unloading deletes their
// objects from the informer and drops their events; no request changes.
// So namespaces created, deleted or moving between replicas never re-open
// a watch, and nothing else is listed again (docs/design.md, "The owned
// cache"). The stream never fails, since any error the reflector sees
// makes it relist every namespace: a source retries on its own and, when
// its version has expired, lists its namespaces again and hands over the
// difference. Every object is filtered on the client, so a server that
// ignores the selector (or an FNV collision) costs bandwidth, never a
// foreign object in the cache.
type ownedListWatch struct {
	target  func() (*listWatchTarget, error)
	sharded bool
	// maxTerms: namespaces per shard selector of a feeder's list.
	maxTerms int
	// wideAbove: without selectors, a feeder lists up to this many
	// namespaces one by one, more in one cluster-wide list (0: always one
	// by one).
	wideAbove int
	// everywhere: every namespace is loaded for a singleton of this
	// replica (OwnedCache.HoldEverywhere): the trunk adopts every
	// namespace, listing nothing for them. Guarded by mu.
	everywhere bool
	// indexer is the informer's store, for the objects a purge deletes.
	indexer func() cache.Indexer

	// sendMu orders what reaches the reflector: an event is checked
	// against the loaded set, sent and recorded in the ledger under it, so
	// a purge never misses an object on its way in.
	sendMu sync.Mutex
	// highest: the newest version any source has delivered; stored: the
	// version the informer's store takes from what was sent last (an
	// event's object's, or a bookmark's). Guarded by sendMu.
	highest, stored string

	mu      sync.Mutex
	loaded  map[string]bool
	sources map[*source]struct{}
	// ledger: per namespace, the names of the objects handed to the
	// informer and not deleted since.
	ledger map[string]map[string]struct{}
	// purge: deletions waiting for the next stream.
	purge  []watch.Event
	stream *ownedStream
	// awaited: namespaces a Load waits for, with the objects (key and
	// version) their first list handed over once it has; nil until then.
	awaited map[string][]keyVersion
	// compacting: a compaction is scheduled.
	compacting bool
}

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
// namespace), and releasing them leaves an adopter that should no longer
// adopt. The merged source watches from the oldest version of those it
// replaces and drops, per namespace, the events they had delivered, so
// nothing is lost or repeated; if that version has expired, it lists its
// namespaces again (a local relist).
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
	adopts := false
	for _, s := range listed {
		adopts = adopts || s.adopts && lw.everywhere
	}
	reshape := false
	for _, s := range listed {
		reshape = reshape || s.adopts != adopts
	}
	if len(listed) == 0 || len(listed) == 1 && !reshape {
		return
	}
	for _, s := range listed {
		delete(lw.sources, s)
		if lw.stream != nil {
			lw.stream.stop(s)
		}
	}
	sort.Strings(namespaces)
	merged := &source{namespaces: namespaces, version: oldest, floors: map[string]string{}, wide: true, adopts: adopts}
	for _, ns := range namespaces {
		if newerVersion(through[ns], merged.version) {
			merged.floors[ns] = through[ns]
		}
	}
	merged.advance(merged.version)
	lw.sources[merged] = struct{}{}
	if lw.stream != nil {
		lw.stream.start(merged)
	}
	lw.countSources()
}

// countSources publishes how many sources there are (the trunk and the
// feeders listing for it). Called with mu held.
func (lw *ownedListWatch) countSources() {
	if t, err := lw.target(); err == nil {
		ownedSources.WithLabelValues(t.resource).Set(float64(len(lw.sources)))
		wide := 0
		for s := range lw.sources {
			if s.wide {
				wide++
			}
		}
		ownedWideSources.WithLabelValues(t.resource).Set(float64(wide))
	}
}

// bookmarkObject is an object of the informer's kind carrying only a
// resource version, for a bookmark event.
func (lw *ownedListWatch) bookmarkObject(version string) runtime.Object {
	obj, ok := lw.placeholder("", "").(runtime.Object)
	if !ok {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	m.SetResourceVersion(version)
	return obj
}

// source is one request's worth of namespaces and its resume version
// ("": list first).
type source struct {
	namespaces []string // sorted
	version    string
	// wide: requests every namespace (no selector); the client keeps
	// only namespaces.
	wide bool
	// adopts: wide while every namespace is held (holdEverywhere): it
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
}

// joining is a namespace on its way into the trunk.
type joining struct {
	feeder *source
	held   []watch.Event
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

type keyVersion struct{ key, version string }

func newOwnedListWatch(target func() (*listWatchTarget, error), sharded bool, maxTerms, wideAbove int) *ownedListWatch {
	return &ownedListWatch{target: target, sharded: sharded, maxTerms: maxTerms, wideAbove: wideAbove,
		loaded: map[string]bool{}, sources: map[*source]struct{}{}, ledger: map[string]map[string]struct{}{}, awaited: map[string][]keyVersion{}}
}

var _ cache.ListerWatcherWithContext = &ownedListWatch{}
var _ cache.ListerWatcher = &ownedListWatch{}

func (lw *ownedListWatch) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

func (lw *ownedListWatch) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// IsWatchListSemanticsUnSupported: the reflector must list, then watch; the
// sources' lists are ours to make.
func (lw *ownedListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// trunk is the source that watches, if there is one. Called with mu held.
func (lw *ownedListWatch) trunk() *source {
	for s := range lw.sources {
		if s.feeds == nil {
			return s
		}
	}
	return nil
}

// holdEverywhere says that every namespace is (or is no longer) loaded
// for a singleton; the sources are reshaped once listed (compact).
func (lw *ownedListWatch) holdEverywhere(everywhere bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.everywhere = everywhere
	lw.scheduleCompact()
}

// newSources makes the sources of namespaces (sorted). Called with mu held.
func (lw *ownedListWatch) newSources(namespaces []string) []*source {
	if lw.everywhere {
		// Every namespace is held: one source adopts them all.
		if a := lw.adopter(); a != nil {
			for _, ns := range namespaces {
				a.insert(ns)
				if _, waiting := lw.awaited[ns]; waiting && a.version != "" {
					// No event of it came since a's version, at which
					// a's list carried every namespace no other source
					// held: it had no objects then.
					lw.awaited[ns] = []keyVersion{}
				}
			}
			return nil
		}
		s := &source{namespaces: slices.Clone(namespaces), wide: true, adopts: true}
		lw.sources[s] = struct{}{}
		return []*source{s}
	}
	// The trunk takes the namespaces; a feeder lists them. A trunk that
	// has not listed yet holds them back too: its list may have been
	// asked for before they were loaded, and once it has listed, a
	// feeder lists the ones it did not cover (emit).
	if t := lw.trunk(); t != nil {
		if t.version == "" {
			t.join(namespaces, nil)
			return nil
		}
		f := &source{namespaces: slices.Clone(namespaces), feeds: t}
		t.join(namespaces, f)
		lw.sources[f] = struct{}{}
		return []*source{f}
	}
	s := &source{namespaces: slices.Clone(namespaces), wide: true}
	lw.sources[s] = struct{}{}
	return []*source{s}
}

// ListWithContext lists every loaded namespace, in new sources, as one
// list (the reflector's first list, or its relist after a failure).
func (lw *ownedListWatch) ListWithContext(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	t, err := lw.target()
	if err != nil {
		return nil, err
	}
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	var namespaces []string
	for ns := range lw.loaded {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	lw.sources = map[*source]struct{}{}
	sources := lw.newSources(namespaces)
	lw.countSources()
	lw.mu.Unlock()

	var all []runtime.Object
	highest := "0"
	listed := map[*source]string{}
	for _, s := range sources {
		items, versions, err := lw.listSource(ctx, t, s)
		if err != nil {
			return nil, err
		}
		version := versions[""]
		all = append(all, items...)
		listed[s] = version
		if newerVersion(version, highest) {
			highest = version
		}
	}
	ledger := map[string]map[string]struct{}{}
	lw.mu.Lock()
	for s, version := range listed {
		s.version = version
	}
	var kept []runtime.Object
	for _, item := range all {
		m, err := meta.Accessor(item)
		if err != nil {
			continue
		}
		if a := lw.adopter(); !lw.loaded[m.GetNamespace()] && (a == nil || !lw.adopt(a, m.GetNamespace())) {
			continue
		}
		kept = append(kept, item)
		record(ledger, m.GetNamespace(), m.GetName())
	}
	lw.ledger = ledger
	lw.purge = nil
	lw.noteListed(namespaces, kept)
	lw.mu.Unlock()
	// The store's version is the list's (Replace).
	lw.highest, lw.stored = highest, highest
	return t.newList(kept, highest)
}

// listSource lists the objects of src's namespaces, as they are when it
// is called, and says which namespaces it covered, each with the version
// its list was read at. A feeder lists with shard selectors (one request
// per maxTerms namespaces), else one request per namespace, or past
// wideAbove namespaces one cluster-wide request. The trunk lists with one
// selector naming its namespaces when they fit, else cluster-wide, and
// when it has none reads only the current version. Objects of other
// namespaces are dropped here, except an adopting source's.
func (lw *ownedListWatch) listSource(ctx context.Context, t *listWatchTarget, src *source) ([]runtime.Object, map[string]string, error) {
	lw.mu.Lock()
	namespaces := slices.Clone(src.namespaces)
	lw.mu.Unlock()
	covered := func(namespaces []string, version string, versions map[string]string) {
		for _, ns := range namespaces {
			versions[ns] = version
		}
	}
	versions := map[string]string{}
	switch {
	case src.feeds != nil && lw.sharded:
		var out []runtime.Object
		for _, group := range chunks(namespaces, lw.maxTerms) {
			items, version, err := lw.listRequest(ctx, t, group, selectorList)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			covered(group, version, versions)
		}
		return out, versions, nil
	case src.feeds != nil && (lw.wideAbove == 0 || len(namespaces) <= lw.wideAbove):
		var out []runtime.Object
		for _, ns := range namespaces {
			items, version, err := t.listNamespace(ctx, ns, metav1.ListOptions{})
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			versions[ns] = version
		}
		return out, versions, nil
	}
	kind := wideList
	switch {
	case src.adopts:
		kind = adoptingList
	case len(namespaces) == 0:
		kind = versionOnly
	case lw.sharded && src.feeds == nil && len(namespaces) <= lw.maxTerms:
		kind = selectorList
	}
	items, version, err := lw.listRequest(ctx, t, namespaces, kind)
	if err != nil {
		return nil, nil, err
	}
	covered(namespaces, version, versions)
	versions[""] = version
	return items, versions, nil
}

// listKind is how listRequest asks.
type listKind int

const (
	wideList     listKind = iota // every namespace, keeping only namespaces'
	selectorList                 // a shard selector naming namespaces
	adoptingList                 // every namespace, keeping all
	versionOnly                  // only the current version
)

// listRequest makes one paged cluster-wide list of t and returns the
// objects in namespaces (every object for adoptingList) and the list's
// version.
func (lw *ownedListWatch) listRequest(ctx context.Context, t *listWatchTarget, namespaces []string, kind listKind) ([]runtime.Object, string, error) {
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	var out []runtime.Object
	options := metav1.ListOptions{Limit: 500, FieldSelector: t.fieldSelector}
	switch kind {
	case selectorList:
		options.ShardSelector = namespaceSelector(namespaces)
	case versionOnly:
		options.Limit = 1
	}
	for {
		list, err := t.client.Get().Resource(t.resource).VersionedParams(&options, scheme.ParameterCodec).Do(ctx).Get()
		if err != nil {
			return nil, "", fmt.Errorf("listing %s in %d namespaces: %w", t.resource, len(namespaces), err)
		}
		listMeta, err := meta.ListAccessor(list)
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		if sharded, ok := listMeta.(metav1.ShardedListInterface); kind == selectorList && (!ok || sharded.GetShardInfo() == nil) {
			selectorIgnored.WithLabelValues(t.resource).Inc()
		}
		items, err := meta.ExtractListWithAlloc(list)
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		for _, item := range items {
			// An adopting source keeps every namespace: emit decides.
			if m, err := meta.Accessor(item); err == nil && (kind == adoptingList || want[m.GetNamespace()]) {
				out = append(out, item)
			}
		}
		if listMeta.GetContinue() == "" || kind == versionOnly {
			return out, listMeta.GetResourceVersion(), nil
		}
		options.Continue = listMeta.GetContinue()
	}
}

func record(ledger map[string]map[string]struct{}, ns, name string) {
	names := ledger[ns]
	if names == nil {
		names = map[string]struct{}{}
		ledger[ns] = names
	}
	names[name] = struct{}{}
}

// noteListed records, for the namespaces a Load waits for, what their
// list handed over. Called with mu held.
func (lw *ownedListWatch) noteListed(namespaces []string, items []runtime.Object) {
	var waiting bool
	for _, ns := range namespaces {
		if _, ok := lw.awaited[ns]; ok {
			waiting = true
			lw.awaited[ns] = []keyVersion{}
		}
	}
	if !waiting {
		return
	}
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			continue
		}
		if got, ok := lw.awaited[m.GetNamespace()]; ok {
			lw.awaited[m.GetNamespace()] = append(got, keyVersion{key: m.GetNamespace() + "/" + m.GetName(), version: m.GetResourceVersion()})
		}
	}
}

// adopt says whether ns is loaded, after src takes it if src adopts and
// no source holds it. Called with mu held.
func (lw *ownedListWatch) adopt(src *source, ns string) bool {
	if lw.loaded[ns] {
		return true
	}
	if !src.adopts || !lw.everywhere {
		return false
	}
	lw.loaded[ns] = true
	src.insert(ns)
	return true
}

// adopter is a source that adopts, if there is one. Called with mu held.
func (lw *ownedListWatch) adopter() *source {
	for s := range lw.sources {
		if s.adopts {
			return s
		}
	}
	return nil
}

// namespaces lists the loaded namespaces.
func (lw *ownedListWatch) namespaces() []string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	out := make([]string, 0, len(lw.loaded))
	for ns := range lw.loaded {
		out = append(out, ns)
	}
	return out
}

// load adds namespaces; with await, loaded reports when the informer
// holds what their lists handed over.
func (lw *ownedListWatch) load(namespaces []string, await bool) {
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	var added []string
	for _, ns := range namespaces {
		if lw.loaded[ns] {
			continue
		}
		lw.loaded[ns] = true
		added = append(added, ns)
		if await {
			lw.awaited[ns] = nil
		}
	}
	sort.Strings(added)
	if len(added) == 0 && (!lw.everywhere || lw.adopter() != nil) {
		return
	}
	sources := lw.newSources(added)
	if lw.stream != nil {
		for _, s := range sources {
			lw.stream.start(s)
		}
	}
	lw.countSources()
}

// loaded says whether the informer holds every object the lists of
// namespaces (being loaded with await) handed over, at least as new, or
// has been told of its deletion since; namespaces not awaited count as
// loaded.
func (lw *ownedListWatch) loadedInto(namespaces []string) bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	indexer := lw.indexer()
	for _, ns := range namespaces {
		items, ok := lw.awaited[ns]
		if !ok {
			continue
		}
		if items == nil {
			return false
		}
		for _, kv := range items {
			_, name, _ := cache.SplitMetaNamespaceKey(kv.key)
			if _, inLedger := lw.ledger[ns][name]; !inLedger {
				continue
			}
			obj, exists, err := indexer.GetByKey(kv.key)
			if err != nil || !exists {
				return false
			}
			m, err := meta.Accessor(obj)
			if err != nil || newerVersion(kv.version, m.GetResourceVersion()) {
				return false
			}
		}
		delete(lw.awaited, ns)
	}
	return true
}

// unload removes namespaces: their sources stop or narrow (resuming from
// their own version, a subset of the same stream), then every object the
// informer holds of them is deleted from it.
func (lw *ownedListWatch) unload(namespaces []string) {
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	gone := map[string]bool{}
	for _, ns := range namespaces {
		if lw.loaded[ns] {
			gone[ns] = true
			delete(lw.loaded, ns)
		}
		delete(lw.awaited, ns)
	}
	if len(gone) == 0 {
		lw.mu.Unlock()
		return
	}
	// The trunk's watch carries every namespace: it drops their events
	// from now on. A feeder left with nothing to list stops; one still
	// listing them hands over only what is still joining (feed).
	for s := range lw.sources {
		for ns := range gone {
			s.remove(ns)
		}
		if s.feeds != nil && len(s.namespaces) == 0 {
			delete(lw.sources, s)
			if lw.stream != nil {
				lw.stream.stop(s)
			}
		}
	}
	lw.countSources()
	indexer := lw.indexer()
	var deletions []watch.Event
	for ns := range gone {
		for name := range lw.ledger[ns] {
			obj, exists, err := indexer.GetByKey(ns + "/" + name)
			if err != nil || !exists {
				obj = lw.placeholder(ns, name)
			}
			if obj != nil {
				deletions = append(deletions, watch.Event{Type: watch.Deleted, Object: obj.(runtime.Object)})
			}
		}
		delete(lw.ledger, ns)
	}
	stream := lw.stream
	lw.mu.Unlock()
	lw.sendPurge(stream, deletions)
}

// placeholder is an object with only the key, for deleting one the
// informer has not stored yet (its addition is still queued).
func (lw *ownedListWatch) placeholder(ns, name string) any {
	t, err := lw.target()
	if err != nil {
		return nil
	}
	obj, err := scheme.Scheme.New(t.listKind.GroupVersion().WithKind(t.listKind.Kind[:len(t.listKind.Kind)-len("List")]))
	if err != nil {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	m.SetNamespace(ns)
	m.SetName(name)
	return obj
}

// sendPurge sends deletions on stream, or keeps what it could not send
// for the next one. Called with sendMu held.
func (lw *ownedListWatch) sendPurge(stream *ownedStream, deletions []watch.Event) {
	for i, e := range deletions {
		if stream == nil || !stream.send(e) {
			lw.mu.Lock()
			lw.purge = append(lw.purge, deletions[i:]...)
			lw.mu.Unlock()
			return
		}
	}
	if stream != nil {
		stream.bookmark()
	}
}

// WatchWithContext opens the one stream: every source resumes from its
// own version (the reflector's is ignored: events of different sources
// arrive out of order) and keeps going until the reflector stops the
// stream.
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

// stop ends src's producer; whatever it sends from now on is dropped,
// since src is no longer a source. Called with lw.mu held.
func (s *ownedStream) stop(src *source) {
	if cancel, ok := s.producers[src]; ok {
		cancel()
		delete(s.producers, src)
	}
}

// send hands e to the reflector (false: the stream ended first). Called
// with lw.sendMu held.
func (s *ownedStream) send(e watch.Event) bool {
	select {
	case s.out <- e:
		if m, err := meta.Accessor(e.Object); err == nil {
			s.lw.stored = m.GetResourceVersion()
			if newerVersion(s.lw.stored, s.lw.highest) {
				s.lw.highest = s.lw.stored
			}
		}
		return true
	case <-s.ctx.Done():
		return false
	}
}

// emit sends events of src, if src is still a source, each if its
// namespace is loaded, and records them in the ledger; then src resumes
// from version ("": unchanged). The events of a namespace joining src are
// held back for its feeder (feed). listed, for the events of src's list,
// names the namespaces it covered: deletions of the objects they no
// longer have are computed here, against the ledger, and namespaces
// joining src that the list did not cover get a feeder.
func (s *ownedStream) emit(ctx context.Context, src *source, events []watch.Event, version string, listed map[string]string) bool {
	lw := s.lw
	relist := listed != nil
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	if _, current := lw.sources[src]; !current || ctx.Err() != nil {
		lw.mu.Unlock()
		return false
	}
	var covered []string
	if relist {
		for ns := range listed {
			if ns != "" && src.has(ns) {
				covered = append(covered, ns)
			}
		}
		sort.Strings(covered)
		events = append(events, lw.deletionsAbsent(covered, events)...)
		// The list carries them from its version on, as the trunk's
		// watch will.
		for _, ns := range covered {
			delete(src.joining, ns)
		}
	}
	lw.mu.Unlock()
	var added []runtime.Object
	for _, e := range events {
		m, err := meta.Accessor(e.Object)
		if err != nil {
			continue
		}
		ns := m.GetNamespace()
		lw.mu.Lock()
		loaded := lw.adopt(src, ns)
		j, joining := src.joining[ns]
		if joining && loaded && !relist {
			j.held = append(j.held, e)
		}
		lw.mu.Unlock()
		if !loaded || !src.has(ns) || joining {
			continue
		}
		if !relist {
			if floor, ok := src.floors[ns]; ok && !newerVersion(m.GetResourceVersion(), floor) {
				continue
			}
		}
		if !s.send(e) {
			return false
		}
		lw.recordSent(e, ns, m.GetName())
		if relist && e.Type == watch.Added {
			added = append(added, e.Object)
		}
	}
	lw.mu.Lock()
	if relist {
		src.floors = nil
	}
	if version != "" {
		src.advance(version)
	}
	if relist {
		lw.noteListed(covered, added)
		lw.feedUncovered(s, src)
		lw.scheduleCompact()
	}
	lw.mu.Unlock()
	if version != "" && newerVersion(version, lw.highest) {
		lw.highest = version
	}
	return s.bookmark()
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
				obj = lw.placeholder(ns, name)
			}
			if obj != nil {
				deletions = append(deletions, watch.Event{Type: watch.Deleted, Object: obj.(runtime.Object)})
			}
		}
	}
	return deletions
}

// recordSent records a sent event in the ledger.
func (lw *ownedListWatch) recordSent(e watch.Event, ns, name string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if e.Type == watch.Deleted {
		delete(lw.ledger[ns], name)
	} else {
		record(lw.ledger, ns, name)
	}
}

// feedUncovered gives a feeder to the namespaces joining the trunk that
// no feeder lists (they joined while the trunk's own list was on its
// way, and it did not cover them). Called with mu held.
func (lw *ownedListWatch) feedUncovered(s *ownedStream, trunk *source) {
	if trunk.feeds != nil {
		return
	}
	var namespaces []string
	for ns, j := range trunk.joining {
		if j.feeder == nil {
			namespaces = append(namespaces, ns)
		}
	}
	if len(namespaces) == 0 {
		return
	}
	sort.Strings(namespaces)
	f := &source{namespaces: namespaces, feeds: trunk}
	trunk.join(namespaces, f)
	lw.sources[f] = struct{}{}
	s.start(f)
	lw.countSources()
}

// feed hands over feeder f's list: for every namespace still joining the
// trunk through f, its objects and the deletions of what the informer
// holds of it and the list lacks, then the trunk's events of it held back
// and newer than the list; from then on the trunk carries it. f is then
// no longer a source. The trunk's events are held from before f's list
// was asked for, so together they miss nothing.
func (s *ownedStream) feed(ctx context.Context, f *source, items []runtime.Object, versions map[string]string) {
	lw := s.lw
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	stopped := ctx.Err() != nil
	_, current := lw.sources[f]
	delete(lw.sources, f)
	s.stop(f)
	trunk := f.feeds
	_, trunkCurrent := lw.sources[trunk]
	if !current || !trunkCurrent || stopped {
		lw.countSources()
		lw.mu.Unlock()
		return
	}
	var namespaces []string
	held := map[string][]watch.Event{}
	for ns := range versions {
		if j := trunk.joining[ns]; j != nil && j.feeder == f {
			namespaces = append(namespaces, ns)
			held[ns] = j.held
			delete(trunk.joining, ns)
		}
	}
	sort.Strings(namespaces)
	take := map[string]bool{}
	for _, ns := range namespaces {
		take[ns] = true
	}
	var events []watch.Event
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil && take[m.GetNamespace()] {
			events = append(events, watch.Event{Type: watch.Added, Object: item})
		}
	}
	events = append(events, lw.deletionsAbsent(namespaces, events)...)
	listedCount := len(events)
	for _, ns := range namespaces {
		for _, e := range held[ns] {
			if m, err := meta.Accessor(e.Object); err == nil && newerVersion(m.GetResourceVersion(), versions[ns]) {
				events = append(events, e)
			}
		}
	}
	lw.countSources()
	lw.mu.Unlock()
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
		if newerVersion(versions[ns], lw.highest) {
			lw.highest = versions[ns]
		}
	}
	s.bookmark()
}

// bookmark brings the store's version up to the newest any source has
// delivered, if what was sent last left it behind. Called with lw.sendMu
// held.
//
// The store reports the version of the last event it applied as the
// version it has read through (LastStoreSyncResourceVersion), and the
// read-after-write checks of the job, replicaset, daemonset and
// statefulset controllers (pkg/controller/util/consistency) wait until it
// reaches the version of their last write. One watch delivers events in
// version order, so there the store's version only grows. Here a source's
// list hands over objects at their own, older versions, and so do the
// deletions of an unloaded partition: without the bookmark the store's
// version went back and stayed there while nothing else changed, and a
// Job whose Pod had succeeded was never synced again. The version is
// the newest delivered, not the lowest every source has reached: a quiet
// source reaches the present only with the apiserver's bookmark, about
// once a minute, and every check would wait for it. So a check can pass
// while its write's event, in another source, is still on its way: a
// stale read, as without the checks, which the controllers' expectations
// cover.
func (s *ownedStream) bookmark() bool {
	lw := s.lw
	if lw.highest == "" || !newerVersion(lw.highest, lw.stored) {
		return true
	}
	obj := lw.bookmarkObject(lw.highest)
	if obj == nil {
		return true
	}
	return s.send(watch.Event{Type: watch.Bookmark, Object: obj})
}

// produce lists src when it has no version, then watches it until ctx
// ends, resuming after every close and backing off after failures.
func (s *ownedStream) produce(ctx context.Context, src *source) {
	lw := s.lw
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 7, Cap: 30 * time.Second}
	pause := func() bool {
		select {
		case <-time.After(backoff.Step()):
			return true
		case <-ctx.Done():
			return false
		}
	}
	logger := klog.FromContext(s.ctx).WithValues("resource", s.target.resource, "namespaces", len(src.namespaces))
	for ctx.Err() == nil {
		lw.mu.Lock()
		version := src.version
		lw.mu.Unlock()
		if version == "" {
			items, versions, err := lw.listSource(ctx, s.target, src)
			if err != nil {
				if ctx.Err() == nil {
					logger.Error(err, "Listing a source of the owned cache; retrying")
					pause()
				}
				continue
			}
			if src.feeds != nil {
				s.feed(ctx, src, items, versions)
				return
			}
			events := make([]watch.Event, 0, len(items))
			for _, item := range items {
				events = append(events, watch.Event{Type: watch.Added, Object: item})
			}
			if !s.emit(ctx, src, events, versions[""], versions) {
				return
			}
			version = versions[""]
		}
		options := metav1.ListOptions{ResourceVersion: version, Watch: true, AllowWatchBookmarks: true, TimeoutSeconds: s.timeout, FieldSelector: s.target.fieldSelector}
		request := s.target.client.Get().Resource(s.target.resource)
		switch {
		case src.wide:
		case lw.sharded:
			options.ShardSelector = namespaceSelector(src.namespaces)
		default:
			request = request.Namespace(src.namespaces[0])
		}
		w, err := request.VersionedParams(&options, scheme.ParameterCodec).Watch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				s.relist(src)
				continue
			}
			logger.V(2).Info("Watching a source of the owned cache failed; retrying", "err", err)
			pause()
			continue
		}
		if expired := s.follow(ctx, src, w); expired {
			s.relist(src)
		}
	}
}

// relist makes src list its namespaces again on its next round.
func (s *ownedStream) relist(src *source) {
	s.lw.mu.Lock()
	src.version = ""
	s.lw.mu.Unlock()
	sourceRelists.WithLabelValues(s.target.resource).Inc()
}

// follow passes w's events on until w ends; true if the server said src's
// version has expired.
func (s *ownedStream) follow(ctx context.Context, src *source, w watch.Interface) (expired bool) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case e, ok := <-w.ResultChan():
			if !ok {
				return false
			}
			switch e.Type {
			case watch.Error:
				err := apierrors.FromObject(e.Object)
				return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
			case watch.Bookmark:
				if m, err := meta.Accessor(e.Object); err == nil {
					s.emit(ctx, src, nil, m.GetResourceVersion(), nil)
				}
			default:
				m, err := meta.Accessor(e.Object)
				if err != nil {
					continue
				}
				if !s.emit(ctx, src, []watch.Event{e}, m.GetResourceVersion(), nil) {
					return false
				}
			}
		}
	}
}
