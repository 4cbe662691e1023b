package informers

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// sharedView is a piece's view of a shared informer: it records the
// handlers added, for the piece to remove (controllers never remove their
// own), and with a scope shows handlers and store only its namespaces.
type sharedView struct {
	cache.SharedIndexInformer
	factory *PieceFactory
	// scope: nil for cluster-scoped kinds and cluster-wide views.
	scope *Scope
	// byName: the objects are Namespaces, placed by their own name.
	byName bool
}

// view is f's view of a namespaced kind's informer (byName: Namespaces).
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
		// (resyncEvery): the shared informer may be running already.
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

// resyncEvery calls resync (every object, as an update to itself) every
// period, jittered 10%, once synced, until stop is called or end closes. It
// is a handler's own resync: once a shared informer has started, client-go
// raises a shorter period to the informer's (12 to 24 hours), but the
// namespace and resourcequota controllers ask for 5 minutes and the HPA for
// 15 s, as KCM gives them.
func resyncEvery(end <-chan struct{}, synced func() bool, resync func(), period time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-end:
				return
			case <-time.After(wait.Jitter(period, 0.1)):
			}
			if synced() {
				resync()
			}
		}
	}()
	return func() { close(done) }
}

// deferredRegistration is the handle of a handler that goes live only when
// the piece starts its informers: a running shared informer calls a new
// handler at once for every object it holds, and controllers add handlers
// in their constructors, before setting the fields those handlers use (in
// KCM no event arrives before the informers start).
type deferredRegistration struct {
	inner      atomic.Pointer[cache.ResourceEventHandlerRegistration]
	registered chan struct{} // closed once inner is set or abandoned
	// stop closes when the piece or the replica stops; waiters give up.
	stop <-chan struct{}
}

func newDeferredRegistration(stop <-chan struct{}) *deferredRegistration {
	return &deferredRegistration{registered: make(chan struct{}), stop: stop}
}

func (d *deferredRegistration) set(r cache.ResourceEventHandlerRegistration) {
	d.inner.Store(&r)
	close(d.registered)
}

func (d *deferredRegistration) live() cache.ResourceEventHandlerRegistration {
	if r := d.inner.Load(); r != nil {
		return *r
	}
	return nil
}

func (d *deferredRegistration) HasSynced() bool {
	r := d.live()
	return r != nil && r.HasSynced()
}

func (d *deferredRegistration) HasSyncedChecker() cache.DoneChecker { return deferredChecker{d} }

type deferredChecker struct{ d *deferredRegistration }

func (c deferredChecker) Name() string { return "piece handler on a shared informer" }

// Done closes once the handler is live and synced; one abandoned, or not
// synced when its piece stops, never syncs (the waiting goroutine ends).
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

// AddIndexers adds only the indexers the shared informer lacks: every
// piece asks for the same ones, and client-go refuses a name added twice.
func (v *sharedView) AddIndexers(indexers cache.Indexers) error {
	return addMissingIndexers(v.SharedIndexInformer.GetIndexer(), indexers)
}

// SetTransform is refused: the transform is the replica's, set at creation.
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

// sharedIndexer is a cluster-wide view's indexer, whose AddIndexers adds
// only what is missing: the shared informer outlives a piece, so a
// controller adding indexers on the indexer (resourceclaim does) would fail
// to build when its piece returns to a replica ("indexer conflict").
type sharedIndexer struct{ cache.Indexer }

func (s sharedIndexer) AddIndexers(indexers cache.Indexers) error {
	return addMissingIndexers(s.Indexer, indexers)
}

// indexersMu makes addMissingIndexers' check-then-add atomic across pieces.
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

// errReadOnly: a view's store is read-only, as informer stores are.
var errReadOnly = errors.New("a piece's view of a replica-wide informer store is read-only")

// pieceIndexer is a read-only view of a shared indexer showing only the
// piece's namespaces; lists go through the namespace index, so a piece pays
// for its own objects, not the whole cluster's.
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

func (p *pieceIndexer) List() []any { return listInPiece(p, p.Indexer.List, p.keep, p.Indexer.ByIndex) }

func (p *pieceIndexer) ListKeys() []string {
	return listInPiece(p, p.Indexer.ListKeys, p.keepKey, p.Indexer.IndexKeys)
}

// listInPiece lists the piece's objects or keys: by the namespace index
// (byIndex) where there is one, else every entry (all) that keep keeps.
func listInPiece[T any](p *pieceIndexer, all func() []T, keep func(T) bool, byIndex func(name, value string) ([]T, error)) []T {
	namespaces, indexed := p.namespaces()
	if !indexed {
		return filter(all(), keep)
	}
	var out []T
	for _, ns := range namespaces {
		items, _ := byIndex(cache.NamespaceIndex, ns)
		out = append(out, items...)
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
