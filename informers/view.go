package informers

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// sharedView is how a piece sees an informer of the replica's shared
// factory: handlers it adds are recorded so they can be removed when the
// piece stops (controllers never remove their own), and, in the partition
// set's view (Scope), handlers and store see only owned namespaces.
type sharedView struct {
	cache.SharedIndexInformer
	factory *PieceFactory
	// scope: the namespaces the view shows, its handlers added through
	// the Scope's dispatcher (scopedispatch.go); nil for cluster-scoped
	// kinds and cluster-wide views.
	scope *Scope
	// byName: the objects are Namespaces, placed by their own name.
	byName bool
}

// view is the factory's view of a shared informer of a namespaced kind
// (byName: of Namespaces).
func (f *PieceFactory) view(informer cache.SharedIndexInformer, byName bool) *sharedView {
	return &sharedView{SharedIndexInformer: informer, factory: f, byName: byName, scope: f.Scope}
}

func (v *sharedView) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return v.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
}

func (v *sharedView) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return v.AddEventHandlerWithOptions(h, cache.HandlerOptions{ResyncPeriod: &resync})
}

func (v *sharedView) AddEventHandlerWithOptions(h cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	informer := v.SharedIndexInformer
	return v.factory.addSharedHandler(informer, func() (registration, error) {
		// A period of the handler's own is kept by the view
		// (resync.go): the shared informer may be running already.
		period := options.ResyncPeriod
		if period != nil && *period > 0 {
			none := time.Duration(0)
			options.ResyncPeriod = &none
		}
		var added registration
		var resync func()
		if v.scope != nil {
			scoped, err := v.scope.addHandler(informer, v.byName, h, ptr.Deref(options.Logger, klog.Background()))
			if err != nil {
				return registration{}, err
			}
			added = registration{handle: scoped, scoped: scoped}
			resync = func() { scoped.dispatcher.resync(scoped) }
		} else {
			r, err := informer.AddEventHandlerWithOptions(h, options)
			if err != nil {
				return registration{}, err
			}
			added = registration{handle: r}
			resync = func() {
				for _, obj := range informer.GetStore().List() {
					h.OnUpdate(obj, obj)
				}
			}
		}
		if period != nil && *period > 0 {
			added.stopResync = resyncEvery(v.factory.stop(), informer.HasSynced, resync, *period)
		}
		return added, nil
	})
}

// deferredRegistration is the handle of a handler on a shared informer
// that goes live only when the piece starts its informers. A running
// shared informer calls a new handler at once for every object it holds;
// controllers add handlers in their constructors, before they have set
// the fields those handlers use, because in KCM no event arrives before
// the informers start. (The first piece to add a Deployment handler to a
// running shared informer crashed in addDeployment.)
type deferredRegistration struct {
	mu         sync.Mutex
	inner      cache.ResourceEventHandlerRegistration
	registered chan struct{} // closed once inner is set or abandoned
	// stop closes when the piece (or the replica) stops: a checker still
	// waiting then gives up.
	stop <-chan struct{}
}

func newDeferredRegistration(stop <-chan struct{}) *deferredRegistration {
	return &deferredRegistration{registered: make(chan struct{}), stop: stop}
}

func (d *deferredRegistration) set(r cache.ResourceEventHandlerRegistration) {
	d.mu.Lock()
	d.inner = r
	d.mu.Unlock()
	close(d.registered)
}

func (d *deferredRegistration) live() cache.ResourceEventHandlerRegistration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inner
}

func (d *deferredRegistration) HasSynced() bool {
	r := d.live()
	return r != nil && r.HasSynced()
}

func (d *deferredRegistration) HasSyncedChecker() cache.DoneChecker { return deferredChecker{d} }

type deferredChecker struct{ d *deferredRegistration }

func (c deferredChecker) Name() string { return "piece handler on a shared informer" }

// Done closes once the handler is live and synced. A handler abandoned
// before it went live, or not synced when its piece stops, never syncs:
// the goroutine that waits for it ends with the piece.
func (c deferredChecker) Done() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		select {
		case <-c.d.registered:
		case <-c.d.stop:
			return
		}
		r := c.d.live()
		if r == nil {
			return
		}
		select {
		case <-r.HasSyncedChecker().Done():
			close(done)
		case <-c.d.stop:
		}
	}()
	return done
}

// AddIndexers adds the indexers the shared informer lacks. Every piece's
// controllers ask for the same ones, and a second add of a name is an
// error in client-go, so a name already there is taken as the same index.
func (v *sharedView) AddIndexers(indexers cache.Indexers) error {
	return addMissingIndexers(v.SharedIndexInformer.GetIndexer(), indexers)
}

// SetTransform is refused: the shared informer's transform is the
// replica's, set when it was made.
func (v *sharedView) SetTransform(cache.TransformFunc) error {
	return errors.New("a piece cannot set the transform of a replica-wide informer")
}

func (v *sharedView) GetStore() cache.Store { return v.GetIndexer() }

func (v *sharedView) GetIndexer() cache.Indexer {
	if v.scope == nil {
		return sharedIndexer{v.SharedIndexInformer.GetIndexer()}
	}
	return &pieceIndexer{Indexer: v.SharedIndexInformer.GetIndexer(), inPiece: v.scope.HasNamespace, byName: v.byName}
}

// sharedIndexer is a cluster-wide view's indexer: the shared one, whose
// AddIndexers adds only the indexers it lacks. A controller that adds its
// indexers on the indexer rather than the informer (resourceclaim does,
// on the Pods the colocated singletons share) otherwise fails to build
// whenever its piece comes back to a replica that ran it before: the
// shared informer outlives the piece, and client-go refuses a second add
// of a name ("indexer conflict").
type sharedIndexer struct{ cache.Indexer }

func (s sharedIndexer) AddIndexers(indexers cache.Indexers) error {
	return addMissingIndexers(s.Indexer, indexers)
}

// indexersMu makes addMissingIndexers' check-then-add atomic across the
// pieces of a replica.
var indexersMu sync.Mutex

func addMissingIndexers(indexer cache.Indexer, indexers cache.Indexers) error {
	indexersMu.Lock()
	defer indexersMu.Unlock()
	have := indexer.GetIndexers()
	missing := cache.Indexers{}
	for name, fn := range indexers {
		if _, ok := have[name]; !ok {
			missing[name] = fn
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return indexer.AddIndexers(missing)
}

// errReadOnly: a piece's view of a shared store is read-only, as informer
// stores are to controllers.
var errReadOnly = errors.New("a piece's view of a replica-wide informer store is read-only")

// pieceIndexer is the read-only view of a shared indexer that holds only
// the objects in the piece's namespaces. Lists go through the namespace
// index so a piece pays for its own objects, not for the whole cluster.
type pieceIndexer struct {
	cache.Indexer
	inPiece func(namespace string) bool
	// byName: the objects are Namespaces, placed by their own name.
	byName bool
}

func (p *pieceIndexer) keep(obj any) bool {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return err == nil && p.keepKey(key)
}

func (p *pieceIndexer) keepKey(key string) bool {
	if p.byName {
		return p.inPiece(key)
	}
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	return err == nil && p.inPiece(ns)
}

func (p *pieceIndexer) namespaces() ([]string, bool) {
	if _, ok := p.Indexer.GetIndexers()[cache.NamespaceIndex]; !ok || p.byName {
		return nil, false
	}
	var out []string
	for _, ns := range p.Indexer.ListIndexFuncValues(cache.NamespaceIndex) {
		if p.inPiece(ns) {
			out = append(out, ns)
		}
	}
	return out, true
}

func (p *pieceIndexer) List() []any {
	namespaces, indexed := p.namespaces()
	if !indexed {
		return filter(p.Indexer.List(), p.keep)
	}
	var out []any
	for _, ns := range namespaces {
		items, _ := p.Indexer.ByIndex(cache.NamespaceIndex, ns)
		out = append(out, items...)
	}
	return out
}

func (p *pieceIndexer) ListKeys() []string {
	namespaces, indexed := p.namespaces()
	if !indexed {
		return filter(p.Indexer.ListKeys(), p.keepKey)
	}
	var out []string
	for _, ns := range namespaces {
		keys, _ := p.Indexer.IndexKeys(cache.NamespaceIndex, ns)
		out = append(out, keys...)
	}
	return out
}

func (p *pieceIndexer) Get(obj any) (any, bool, error) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, fmt.Errorf("key of %T: %w", obj, err)
	}
	return p.GetByKey(key)
}

func (p *pieceIndexer) GetByKey(key string) (any, bool, error) {
	if !p.keepKey(key) {
		return nil, false, nil
	}
	return p.Indexer.GetByKey(key)
}

func (p *pieceIndexer) Index(indexName string, obj any) ([]any, error) {
	items, err := p.Indexer.Index(indexName, obj)
	return filter(items, p.keep), err
}

func (p *pieceIndexer) IndexKeys(indexName, value string) ([]string, error) {
	keys, err := p.Indexer.IndexKeys(indexName, value)
	return filter(keys, p.keepKey), err
}

func (p *pieceIndexer) ByIndex(indexName, value string) ([]any, error) {
	if indexName == cache.NamespaceIndex && !p.byName && !p.inPiece(value) {
		return nil, nil
	}
	items, err := p.Indexer.ByIndex(indexName, value)
	return filter(items, p.keep), err
}

func (p *pieceIndexer) AddIndexers(indexers cache.Indexers) error {
	return addMissingIndexers(p.Indexer, indexers)
}

func (p *pieceIndexer) Add(any) error               { return errReadOnly }
func (p *pieceIndexer) Update(any) error            { return errReadOnly }
func (p *pieceIndexer) Delete(any) error            { return errReadOnly }
func (p *pieceIndexer) Replace([]any, string) error { return errReadOnly }
func (p *pieceIndexer) Resync() error               { return errReadOnly }
func (p *pieceIndexer) Bookmark(string)             {}

func filter[T any](items []T, keep func(T) bool) []T {
	out := make([]T, 0, len(items))
	for _, it := range items {
		if keep(it) {
			out = append(out, it)
		}
	}
	return out
}
