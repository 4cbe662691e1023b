package informers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/admissionregistration"
	"k8s.io/client-go/informers/apiserverinternal"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/autoscaling"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/certificates"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/events"
	"k8s.io/client-go/informers/extensions"
	"k8s.io/client-go/informers/flowcontrol"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/networking"
	"k8s.io/client-go/informers/node"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/scheduling"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/informers/storagemigration"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// PieceConfig is what a piece's informer views are made from.
type PieceConfig struct {
	// Shared: the replica's pool; the factory holds what it used till Shutdown.
	Shared *Pool
	// SharedStop is the replica's lifetime; the owned cache runs until then.
	SharedStop <-chan struct{}
	Mapper     meta.RESTMapper
	// Scopes tells which kinds are cluster-scoped.
	Scopes KindScopes
	// PieceStop closes when the piece stops, so a scope look-up waiting out
	// a failed discovery does not hold a stopped piece (nil: SharedStop).
	PieceStop <-chan struct{}
	// Scope: the partition set's view; nil: cluster-wide (a singleton).
	Scope *Scope
	// Owned caches the Scope's namespaced kinds; nil: Shared (filtered-watch).
	Owned *OwnedCache
	// Held: the owned cache's informers a singleton reads instead of the
	// pool's, by object type (OwnedCache.HoldEverywhere).
	Held map[reflect.Type]cache.SharedIndexInformer
	// Logger is the piece's (default: klog.Background()).
	Logger klog.Logger
}

// PieceFactory is the informer factory of a singleton or the partition set.
type PieceFactory struct {
	PieceConfig

	mu       sync.Mutex
	handlers []registration
	// live: Start was called; until then new handlers wait in pending.
	live    bool
	stopped bool
	pending []pendingHandler
	// building, census: the informers handed out, by controller (census.go).
	building string
	census   []censusEntry

	stopOnce sync.Once
	stopCh   <-chan struct{} // stop's channel
}

type pendingHandler struct {
	informer cache.SharedIndexInformer
	add      addHandler
	handle   *deferredRegistration
}

// addSharedHandler adds a piece's handler to a shared informer now if the
// piece has started, else at Start (deferredRegistration).
func (f *PieceFactory) addSharedHandler(informer cache.SharedIndexInformer, add addHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, errors.New("the piece has stopped")
	}
	if f.live {
		return f.addNow(informer, add)
	}
	handle := newDeferredRegistration(f.stop())
	f.pending = append(f.pending, pendingHandler{informer: informer, add: add, handle: handle})
	return handle, nil
}

// addNow adds a handler and records it for Shutdown. Called with f.mu held.
func (f *PieceFactory) addNow(informer cache.SharedIndexInformer, add addHandler) (cache.ResourceEventHandlerRegistration, error) {
	r, err := add()
	if err != nil {
		return nil, err
	}
	r.informer = informer
	f.handlers = append(f.handlers, r)
	return r.handle, nil
}

type addHandler func() (registration, error)

type registration struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
	// scoped: the handler's queue in the Scope's dispatcher, if any.
	scoped *scopedHandler
	// stopResync ends the handler's own resync (resyncEvery), if any.
	stopResync func()
}

// NewPieceFactory builds the factory of a singleton or of the partition set.
func NewPieceFactory(c PieceConfig) (*PieceFactory, error) {
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if c.Owned != nil && c.Scope == nil {
		return nil, errors.New("an owned cache serves the partition view (Scope) only")
	}
	if c.Scopes == nil {
		return nil, errors.New("a piece's factory needs the kinds' scopes")
	}
	return &PieceFactory{PieceConfig: c}, nil
}

var _ informers.SharedInformerFactory = &PieceFactory{}

// clusterScoped decides where obj's kind comes from: a kind the scheme or
// the apiserver does not know counts as namespaced (clusterScopedWhenKnown).
func (f *PieceFactory) clusterScoped(obj runtime.Object) bool {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return false
	}
	return clusterScopedKind(f.Logger, f.Scopes, gvks[0], f.stop())
}

// stop closes when the piece or the replica stops.
func (f *PieceFactory) stop() <-chan struct{} {
	f.stopOnce.Do(func() {
		if f.PieceStop == nil {
			f.stopCh = f.SharedStop
			return
		}
		either := make(chan struct{})
		go func() {
			defer close(either)
			select {
			case <-f.PieceStop:
			case <-f.SharedStop:
			}
		}()
		f.stopCh = either
	})
	return f.stopCh
}

// InformerFor gives the piece's informer of obj's kind (typedInformer).
func (f *PieceFactory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	informer, source, selector := f.typedInformer(obj, func() cache.SharedIndexInformer { return f.Shared.InformerFor(f, obj, newFunc) })
	f.record(obj, schema.GroupVersionResource{}, true, source, selector, informer)
	return informer
}

// typedInformer picks where obj's kind comes from; pooled makes the pool's
// informer of it.
func (f *PieceFactory) typedInformer(obj runtime.Object, pooled func() cache.SharedIndexInformer) (informer cache.SharedIndexInformer, source, fieldSelector string) {
	clusterWide := SourceClusterWide
	if f.Scope != nil {
		clusterWide = SourceScopedView
	}
	if _, ok := obj.(*corev1.Namespace); ok {
		return f.view(pooled(), true), clusterWide, ""
	}
	if held, ok := f.Held[reflect.TypeOf(obj)]; ok {
		return &sharedView{SharedIndexInformer: held, factory: f}, SourceHeldEverywhere, ""
	}
	if f.clusterScoped(obj) {
		return &sharedView{SharedIndexInformer: pooled(), factory: f}, SourceClusterWide, ""
	}
	if f.Owned != nil {
		return f.view(f.Owned.InformerFor(obj), false), SourceOwnedPartitions, f.Owned.FieldSelectorOf(obj)
	}
	return f.view(pooled(), false), clusterWide, ""
}

// Start starts the piece's informers not running yet, ignoring stop: a
// shared informer runs until every piece using it has shut down.
func (f *PieceFactory) Start(<-chan struct{}) {
	f.Shared.Start(f)
	if f.Owned != nil {
		f.Owned.Start(f.SharedStop)
	}
	f.goLiveOnce()
}

// goLiveOnce adds the pending handlers unless done or the piece stopped.
func (f *PieceFactory) goLiveOnce() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live || f.stopped {
		return
	}
	f.live = true
	for _, p := range f.pending {
		h, err := f.addNow(p.informer, p.add)
		if err != nil {
			// Only a stopped shared informer refuses: the replica is ending.
			f.Logger.Error(err, "Adding a piece's handler to a shared informer")
			close(p.handle.registered)
			continue
		}
		p.handle.set(h)
	}
	f.pending = nil
}

// StartWithContext is Start with a context.
func (f *PieceFactory) StartWithContext(ctx context.Context) { f.Start(ctx.Done()) }

// Shutdown removes the piece's handlers from the shared informers. Call it
// after every controller of the piece has returned.
func (f *PieceFactory) Shutdown() {
	f.mu.Lock()
	f.stopped = true
	for _, p := range f.pending {
		close(p.handle.registered)
	}
	f.pending = nil
	handlers := f.handlers
	f.handlers = nil
	f.mu.Unlock()
	for _, h := range handlers {
		if h.stopResync != nil {
			h.stopResync()
		}
		remove := func() error { return h.informer.RemoveEventHandler(h.handle) }
		if h.scoped != nil {
			remove = func() error { return f.Scope.removeHandler(h.scoped) }
		}
		if err := remove(); err != nil {
			// Only fails for a handle of another informer: a bug here.
			panic(fmt.Sprintf("removing a piece's event handler: %v", err))
		}
	}
	f.Shared.Release(f)
}

// WaitForCacheSync waits for the informers the piece asked for only.
func (f *PieceFactory) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	out := poolSynced(f, stopCh, func(k poolKey) (reflect.Type, bool) { return k.typed, k.typed != nil })
	if f.Owned != nil {
		out[reflect.TypeOf(f.Owned)] = cache.WaitForCacheSync(stopCh, f.Owned.HasSynced)
	}
	return out
}

// poolSynced waits for f's informers in the pool; key picks those a
// factory reports (typed or metadata-only) and names them.
func poolSynced[K comparable](f *PieceFactory, stopCh <-chan struct{}, key func(poolKey) (K, bool)) map[K]bool {
	out := map[K]bool{}
	for k, ok := range f.Shared.WaitForCacheSync(f, stopCh) {
		if name, mine := key(k); mine {
			out[name] = ok
		}
	}
	return out
}

// WaitForCacheSyncWithContext waits for the piece's informers.
func (f *PieceFactory) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	synced := f.WaitForCacheSync(ctx.Done())
	return cache.SyncResult{Synced: synced, Err: ctx.Err()}
}

// ForResource gives a generic informer of gvr, routed like InformerFor.
func (f *PieceFactory) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	gvk, err := f.Mapper.KindFor(gvr)
	if err != nil {
		return nil, fmt.Errorf("kind of %s: %w", gvr, err)
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("informer for %s: %w", gvr, err)
	}
	var pooledErr error
	informer, source, selector := f.typedInformer(obj, func() cache.SharedIndexInformer {
		i, err := f.Shared.ForResource(f, gvr, gvk)
		if err != nil {
			pooledErr = err
			return nil
		}
		return i
	})
	if pooledErr != nil {
		return nil, pooledErr
	}
	f.record(obj, gvr, true, source, selector, informer)
	return genericInformer{informer: informer, resource: gvr.GroupResource()}, nil
}

type genericInformer struct {
	informer cache.SharedIndexInformer
	resource schema.GroupResource
}

func (g genericInformer) Informer() cache.SharedIndexInformer { return g.informer }
func (g genericInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(g.informer.GetIndexer(), g.resource)
}

// InformerName: the views' informers are unnamed.
func (f *PieceFactory) InformerName() *cache.InformerName { return nil }

func (f *PieceFactory) Admissionregistration() admissionregistration.Interface {
	return admissionregistration.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Internal() apiserverinternal.Interface {
	return apiserverinternal.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Apps() apps.Interface { return apps.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Autoscaling() autoscaling.Interface {
	return autoscaling.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Batch() batch.Interface { return batch.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Certificates() certificates.Interface {
	return certificates.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Coordination() coordination.Interface {
	return coordination.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Core() core.Interface { return core.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Discovery() discovery.Interface {
	return discovery.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Events() events.Interface { return events.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Extensions() extensions.Interface {
	return extensions.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Flowcontrol() flowcontrol.Interface {
	return flowcontrol.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Networking() networking.Interface {
	return networking.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Node() node.Interface     { return node.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Policy() policy.Interface { return policy.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Rbac() rbac.Interface     { return rbac.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Resource() resource.Interface {
	return resource.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Scheduling() scheduling.Interface {
	return scheduling.New(f, metav1.NamespaceAll, nil)
}
func (f *PieceFactory) Storage() storage.Interface { return storage.New(f, metav1.NamespaceAll, nil) }
func (f *PieceFactory) Storagemigration() storagemigration.Interface {
	return storagemigration.New(f, metav1.NamespaceAll, nil)
}
