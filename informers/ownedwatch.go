package informers

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ownedListWatch lists and watches one namespaced kind in the loaded
// namespaces, through a trunk and its feeders, and hands one informer one
// stream. Loading namespaces lists only them; unloading makes no request
// (docs/design.md, "The owned cache"). The stream never fails, since any
// error the reflector sees makes it relist every namespace: a source
// retries on its own and, when its version has expired, lists its
// namespaces again and hands over the difference. Every object is filtered
// on the client, so a server that ignores the selector (or an FNV
// collision) costs bandwidth, never a foreign object in the cache.
type ownedListWatch struct {
	target  func() (*listWatchTarget, error)
	sharded bool
	// maxTerms: namespaces per shard selector of a feeder's list.
	maxTerms int
	// wideAbove: without selectors, a feeder lists more namespaces than
	// this in one cluster-wide list (0: never).
	wideAbove int
	// everywhere: held everywhere, so the trunk's watch carries no shard
	// selector (watchSelector). Guarded by mu.
	everywhere bool
	// letGoGen counts the holds and releases of every partition, so that
	// a release's last step is skipped once another came (letGoEverywhere).
	letGoGen uint64
	// indexer is the informer's store, for the objects a purge deletes.
	indexer func() cache.Indexer
	// partitionOf places a namespace; listNamespaceNames reads every
	// namespace's name consistently (ownedpartitions.go). Either nil:
	// the kind keeps namespaces by name only.
	partitionOf        func(namespace string) int
	listNamespaceNames func(ctx context.Context) ([]string, error)

	// sendMu: an event is checked against the loaded set, sent and recorded
	// in the ledger under it, so a purge never misses an object on its way.
	sendMu sync.Mutex
	// highest: the newest version any source has delivered; stored: the
	// version the informer's store takes from what was sent last (an
	// event's object's, or a bookmark's). Guarded by sendMu.
	highest, stored string

	mu     sync.Mutex
	loaded map[string]bool
	// partitions: the loaded partitions the trunk keeps by partition,
	// each naming or kept; noted: per naming partition, the namespaces
	// whose events the trunk dropped (ownedpartitions.go).
	partitions map[int]partitionPhase
	noted      map[int]map[string]bool
	// named counts the partitions made naming; namedAt: the count at
	// which each naming partition was (nameGain's token).
	named   uint64
	namedAt map[int]uint64
	sources map[*source]struct{}
	ledger  map[string]map[string]struct{}
	purge   []watch.Event
	stream  *ownedStream
	// awaited: per namespace, the objects its first list handed over; nil
	// until then.
	awaited map[string][]keyVersion
	// behind: per namespace, how many gains' catch-ups wait for it.
	behind map[string]int
	// closedWaitForTest, when set, is every wait after a close (a test
	// holds a source in it). Guarded by mu.
	closedWaitForTest time.Duration
}

// countSources publishes the source metrics. Called with mu held.
func (lw *ownedListWatch) countSources() {
	if t, err := lw.target(); err == nil {
		ownedSources.WithLabelValues(t.resource).Set(float64(len(lw.sources)))
		watching := 0
		for s := range lw.sources {
			if s.feeds == nil {
				watching++
			}
		}
		ownedWideSources.WithLabelValues(t.resource).Set(float64(watching))
	}
}

type keyVersion struct{ key, version string }

func newOwnedListWatch(target func() (*listWatchTarget, error), sharded bool, maxTerms, wideAbove int) *ownedListWatch {
	return &ownedListWatch{target: target, sharded: sharded, maxTerms: maxTerms, wideAbove: wideAbove,
		loaded: map[string]bool{}, partitions: map[int]partitionPhase{}, noted: map[int]map[string]bool{}, namedAt: map[int]uint64{}, sources: map[*source]struct{}{}, ledger: map[string]map[string]struct{}{}, awaited: map[string][]keyVersion{}, behind: map[string]int{}}
}

var _ cache.ListerWatcherWithContext = &ownedListWatch{}
var _ cache.ListerWatcher = &ownedListWatch{}

func (lw *ownedListWatch) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

func (lw *ownedListWatch) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// IsWatchListSemanticsUnSupported: the reflector must list, then watch,
// since the sources' lists are ours to make.
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

// newSources makes the sources of namespaces (sorted). A trunk that has
// not listed yet holds them back too: its list may have been asked for
// before they were loaded, so once it has listed, a feeder lists the ones
// it did not cover (emitted). Called with mu held.
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

// ListWithContext lists every loaded namespace in new sources, as one list
// (the reflector's first list, or its relist after a failure).
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
	trunk := lw.newSources(namespaces)[0]
	lw.countSources()
	lw.mu.Unlock()

	all, versions, err := lw.listSource(ctx, t, trunk, lw.highest == "")
	if err != nil {
		return nil, err
	}
	version := versions[""]
	highest := "0"
	if newerVersion(version, highest) {
		highest = version
	}
	ledger := map[string]map[string]struct{}{}
	lw.mu.Lock()
	trunk.version = version
	lw.feedJoining(trunk)
	var kept []runtime.Object
	for _, item := range all {
		m, err := meta.Accessor(item)
		if err != nil {
			continue
		}
		if !lw.loaded[m.GetNamespace()] {
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

func record(ledger map[string]map[string]struct{}, ns, name string) {
	names := ledger[ns]
	if names == nil {
		names = map[string]struct{}{}
		ledger[ns] = names
	}
	names[name] = struct{}{}
}

// noteListed records what the lists of awaited namespaces handed over.
// Called with mu held.
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

// take makes the trunk src carry ns, not loaded, when its partition is
// kept or leaving (claims), and says whether it did. Called with mu held.
func (lw *ownedListWatch) take(src *source, ns string) bool {
	if lw.loaded[ns] || ns == "" || !lw.claims(ns) {
		return false
	}
	lw.loaded[ns] = true
	src.insert(ns)
	return true
}

// decodes says whether the trunk decodes an event of namespace (loaded,
// or of a naming or kept partition). What it skips was written before the
// namespace's load began, so that load's later list carries it.
func (lw *ownedListWatch) decodes(namespace string) bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, ok := lw.phaseOf(namespace)
	return lw.loaded[namespace] || ok
}

// noNamespace selects nothing a namespaced kind has: the FNV-1a hash of
// the empty namespace, which only cluster-scoped objects carry.
var noNamespace = namespaceSelector([]string{""})

// watchSelector is the shard selector naming src's namespaces that its
// next watch carries, or "" (every namespace, filtered on the client).
// Called with mu held.
func (lw *ownedListWatch) watchSelector(t *listWatchTarget, src *source) string {
	if !lw.sharded || !t.selectWatch || lw.everywhere || lw.leaving() || len(src.namespaces) > MaxSelectorTerms {
		return ""
	}
	if len(src.namespaces) == 0 {
		return noNamespace
	}
	return namespaceSelector(src.namespaces)
}

// load adds namespaces, each listed unless it is loaded already, its
// partition is kept (taken at its first event), or born has its creation
// version (takeFrom). Naming partitions' namespaces are listed, as the
// trunk drops their events until the gain is done. With await,
// loadedInto reports when the informer holds what the lists handed over.
// It returns the namespaces no list of this load reads.
func (lw *ownedListWatch) load(namespaces []string, await bool, born map[string]string) (unlisted []string) {
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	var added []string
	for _, ns := range namespaces {
		if lw.loaded[ns] {
			unlisted = append(unlisted, ns)
			continue
		}
		if phase, ok := lw.phaseOf(ns); ok && phase == partitionKept {
			// Taken at its first event; a hold of every namespace
			// catches it up with the server (catchUp).
			unlisted = append(unlisted, ns)
			continue
		}
		lw.loaded[ns] = true
		if t := lw.trunk(); born[ns] != "" && t != nil && t.version != "" && len(lw.partitions) == 0 {
			t.takeFrom(ns, born[ns])
			if target, err := lw.target(); err == nil {
				namespacesTakenFromCreation.WithLabelValues(target.resource).Inc()
			}
			unlisted = append(unlisted, ns)
			continue
		}
		added = append(added, ns)
		if await {
			lw.awaited[ns] = nil
		}
	}
	sort.Strings(added)
	if len(added) == 0 {
		return unlisted
	}
	sources := lw.newSources(added)
	if lw.stream != nil {
		for _, s := range sources {
			lw.stream.start(s)
		}
	}
	lw.countSources()
	return unlisted
}

// loadedInto says whether the informer holds every object the lists of
// the awaited namespaces handed over, at least as new, or has been told of
// its deletion since.
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
			if version, stored := storedVersion(indexer, kv.key); !stored || newerVersion(kv.version, version) {
				return false
			}
		}
		delete(lw.awaited, ns)
	}
	return true
}

// storedVersion is the version of the object indexer holds at key, if it
// holds one.
func storedVersion(indexer cache.Indexer, key string) (string, bool) {
	obj, exists, err := indexer.GetByKey(key)
	if err != nil || !exists {
		return "", false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	return m.GetResourceVersion(), true
}

// leaving: some partition is leaving. Called with mu held.
func (lw *ownedListWatch) leaving() bool {
	for _, phase := range lw.partitions {
		if phase == partitionLeaving {
			return true
		}
	}
	return false
}
