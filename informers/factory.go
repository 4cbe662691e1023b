// Package informers builds the informer views through which the fleet's
// controllers see one replica-wide cache: a SharedInformerFactory for a
// singleton (every object, from the replica's shared informers), for the
// replica's one set of partition controllers (the namespaces of the
// partitions the replica owns now, a Scope that grows and shrinks while
// they run), or, in the per-piece informer modes, for one partition piece
// (by server-side sharded watch or one watch per namespace: see Mode). A
// view's event handlers are removed from the shared informers when its
// controllers stop.
package informers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// PieceConfig is what a partition piece's informers are made from.
type PieceConfig struct {
	Mode Mode // resolved: not ModeAuto
	// Client sees everything; its config (ShardedConfig for
	// ModeShardedWatch) and RESTClients (for ModeNamespaceWatch) are made
	// from the same rest.Config.
	Client kubernetes.Interface
	// ShardedClient lists and watches only the piece's namespaces
	// (ModeShardedWatch).
	ShardedClient kubernetes.Interface
	// RESTClients list and watch a namespace each (ModeNamespaceWatch).
	RESTClients *RESTClients
	// Shared is the replica's factory (cluster-scoped kinds, and every
	// kind in ModeFilteredWatch); it runs until SharedStop closes.
	Shared     informers.SharedInformerFactory
	SharedStop <-chan struct{}
	Mapper     meta.RESTMapper
	// InPiece reports whether a namespace belongs to the piece (a
	// partition piece of its own).
	InPiece func(namespace string) bool
	// Scope: the view of the replica's partition controller set, whose
	// namespaces change while it runs (ModeFilteredWatch only). With
	// neither InPiece nor Scope the view is cluster-wide (a singleton).
	Scope     *Scope
	Resync    time.Duration
	Transform cache.TransformFunc
}

// PieceFactory is the informer factory of one piece, or of the replica's
// partition controller set (Scope).
type PieceFactory struct {
	PieceConfig
	// inner holds the piece's own informers of namespaced kinds.
	inner informers.SharedInformerFactory

	mu         sync.Mutex
	namespaces cache.SharedIndexInformer
	handlers   []registration
	started    []context.CancelFunc
	// live: Start was called, handlers on shared informers go live at once;
	// before it they wait in pending.
	live    bool
	stopped bool
	pending []pendingHandler
}

type pendingHandler struct {
	informer cache.SharedIndexInformer
	add      func() (cache.ResourceEventHandlerRegistration, *scopedHandler, error)
	handle   *deferredRegistration
}

// addSharedHandler adds a piece's handler to a shared informer now if the
// piece's informers have started, else when they start (see
// deferredRegistration).
func (f *PieceFactory) addSharedHandler(informer cache.SharedIndexInformer, add func() (cache.ResourceEventHandlerRegistration, *scopedHandler, error)) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, errors.New("the piece has stopped")
	}
	if f.live {
		return f.addNow(informer, add)
	}
	handle := newDeferredRegistration()
	f.pending = append(f.pending, pendingHandler{informer: informer, add: add, handle: handle})
	return handle, nil
}

// goLive adds the pending handlers. Called with f.mu held.
func (f *PieceFactory) goLive() {
	f.live = true
	for _, p := range f.pending {
		h, err := f.addNow(p.informer, p.add)
		if err != nil {
			// Only a stopped shared informer refuses: the replica is ending.
			klog.ErrorS(err, "Adding a piece's handler to a shared informer")
			close(p.handle.registered)
			continue
		}
		p.handle.set(h)
	}
	f.pending = nil
}

// addNow adds a handler and records it for Shutdown. Called with f.mu held.
func (f *PieceFactory) addNow(informer cache.SharedIndexInformer, add func() (cache.ResourceEventHandlerRegistration, *scopedHandler, error)) (cache.ResourceEventHandlerRegistration, error) {
	h, scoped, err := add()
	if err != nil {
		return nil, err
	}
	f.handlers = append(f.handlers, registration{informer: informer, handle: h, scoped: scoped})
	return h, nil
}

type registration struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
	// scoped: the handler's Scope wrapper, unregistered with the handle.
	scoped *scopedHandler
}

// NewPieceFactory builds the factory of a piece or of the replica's
// partition controller set.
func NewPieceFactory(c PieceConfig) (*PieceFactory, error) {
	client := c.Client
	if c.Scope != nil && c.InPiece != nil {
		return nil, errors.New("a piece factory has a Scope or InPiece, not both")
	}
	if c.InPiece == nil {
		// Singletons and the partition set see the replica's shared
		// informers only.
		if c.Scope != nil && c.Mode != ModeFilteredWatch {
			return nil, fmt.Errorf("informer mode %s has no replica-wide partition view", c.Mode)
		}
		c.Mode = ModeFilteredWatch
	}
	switch c.Mode {
	case ModeShardedWatch:
		if c.ShardedClient == nil {
			return nil, fmt.Errorf("informer mode %s needs a sharded client", c.Mode)
		}
		client = c.ShardedClient
	case ModeNamespaceWatch:
		if c.RESTClients == nil {
			return nil, fmt.Errorf("informer mode %s needs REST clients", c.Mode)
		}
	case ModeFilteredWatch:
	default:
		return nil, fmt.Errorf("informer mode %q cannot make a piece factory", c.Mode)
	}
	return &PieceFactory{
		PieceConfig: c,
		inner:       informers.NewSharedInformerFactoryWithOptions(client, c.Resync, informers.WithTransform(c.Transform)),
	}, nil
}

var _ informers.SharedInformerFactory = &PieceFactory{}

// clusterScoped decides where an informer of obj's kind comes from. An
// unknown kind is treated as namespaced: the sharded watch then fails loudly
// rather than a cluster-wide view leaking into the piece.
func (f *PieceFactory) clusterScoped(obj runtime.Object) bool {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return false
	}
	mapping, err := f.Mapper.RESTMapping(gvks[0].GroupKind(), gvks[0].Version)
	if err != nil {
		return false
	}
	return mapping.Scope.Name() == meta.RESTScopeNameRoot
}

// InformerFor routes each kind: Namespaces to the piece's filtered view,
// other cluster-scoped kinds to the shared factory (with handler
// tracking), namespaced kinds by the piece's mode.
func (f *PieceFactory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	if _, ok := obj.(*corev1.Namespace); ok {
		if f.InPiece == nil {
			return f.view(f.Shared.InformerFor(obj, newFunc), true)
		}
		return f.namespaceInformer()
	}
	if f.clusterScoped(obj) {
		return &sharedView{SharedIndexInformer: f.Shared.InformerFor(obj, newFunc), factory: f}
	}
	switch f.Mode {
	case ModeFilteredWatch:
		return f.view(f.Shared.InformerFor(obj, newFunc), false)
	case ModeNamespaceWatch:
		namespaces := f.namespaceInformer()
		return f.inner.InformerFor(obj, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
			lw := &namespacesListWatch{clients: f.RESTClients, mapper: f.Mapper, obj: obj, namespaces: informerNamespaceSet{namespaces}}
			return cache.NewSharedIndexInformer(lw, obj, f.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		})
	}
	return f.inner.InformerFor(obj, newFunc)
}

// filteredWatch passes on the events keep accepts. Unlike watch.Filter, its
// goroutine ends on Stop even while an event waits for a reader that is
// gone (the reflector stops reading before it calls Stop).
type filteredWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newFilteredWatch(in watch.Interface, keep func(watch.Event) bool) *filteredWatch {
	w := &filteredWatch{in: in, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		defer in.Stop()
		for {
			select {
			case <-w.stop:
				return
			case e, ok := <-in.ResultChan():
				if !ok {
					return
				}
				if !keep(e) {
					continue
				}
				select {
				case w.out <- e:
				case <-w.stop:
					return
				}
			}
		}
	}()
	return w
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.out }
func (w *filteredWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }

// informerNamespaceSet is the piece's Namespaces view as a namespaceSet.
type informerNamespaceSet struct{ cache.SharedIndexInformer }

func (s informerNamespaceSet) Names() []string {
	names := s.GetStore().ListKeys()
	sort.Strings(names)
	return names
}

func (s informerNamespaceSet) Notify(changed func()) (func(), error) {
	if s.IsStopped() {
		// The piece is stopping: its namespaces change no more.
		return func() {}, nil
	}
	handle, err := s.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = s.RemoveEventHandler(handle) }, nil
}

func (f *PieceFactory) namespaceInformer() cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.namespaces != nil {
		return f.namespaces
	}
	client := f.Client
	keep := func(obj runtime.Object) bool {
		ns, ok := obj.(*corev1.Namespace)
		return ok && f.InPiece(ns.Name)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			list, err := client.CoreV1().Namespaces().List(ctx, options)
			if err != nil {
				return nil, err
			}
			items := list.Items[:0]
			for i := range list.Items {
				if keep(&list.Items[i]) {
					items = append(items, list.Items[i])
				}
			}
			list.Items = items
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			w, err := client.CoreV1().Namespaces().Watch(ctx, options)
			if err != nil {
				return nil, err
			}
			return newFilteredWatch(w, func(e watch.Event) bool {
				return e.Type == watch.Bookmark || e.Type == watch.Error || keep(e.Object)
			}), nil
		},
	}
	// As generated informers do: tell the reflector whether the client can
	// stream the initial list (watch-list); fakes cannot.
	f.namespaces = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Namespace{}, f.Resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if f.Transform != nil {
		_ = f.namespaces.SetTransform(f.Transform)
	}
	return f.namespaces
}

// Start starts the piece's informers until stopCh closes, and any new
// shared ones for the replica's lifetime (a shared informer started with a
// piece's stop channel would die with that piece under every other piece).
func (f *PieceFactory) Start(stopCh <-chan struct{}) {
	f.inner.Start(stopCh)
	f.Shared.Start(f.SharedStop)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live && !f.stopped {
		f.goLive()
	}
	if f.namespaces != nil && len(f.started) == 0 {
		ctx, cancel := context.WithCancel(context.Background())
		f.started = append(f.started, cancel)
		go func() {
			select {
			case <-stopCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		go f.namespaces.RunWithContext(ctx)
	}
}

// goLiveOnce puts pending handlers live unless that happened or the piece
// stopped.
func (f *PieceFactory) goLiveOnce() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live && !f.stopped {
		f.goLive()
	}
}

// StartWithContext is Start with a context.
func (f *PieceFactory) StartWithContext(ctx context.Context) { f.Start(ctx.Done()) }

// Shutdown stops the piece's own informers, waits for them, and removes the
// piece's handlers from the shared ones. Call it after every controller of
// the piece has returned.
func (f *PieceFactory) Shutdown() {
	f.inner.Shutdown()
	f.mu.Lock()
	f.stopped = true
	for _, p := range f.pending {
		close(p.handle.registered)
	}
	f.pending = nil
	cancels := f.started
	f.started = nil
	handlers := f.handlers
	f.handlers = nil
	f.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	for _, h := range handlers {
		if h.scoped != nil {
			f.Scope.unregister(h.scoped)
		}
		if err := h.informer.RemoveEventHandler(h.handle); err != nil {
			// Only fails for a handle of another informer: a bug here.
			panic(fmt.Sprintf("removing a piece's event handler: %v", err))
		}
	}
}

// Handlers is how many handlers the piece holds on shared informers (tests).
func (f *PieceFactory) Handlers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.handlers)
}

// WaitForCacheSync waits for the piece's informers.
func (f *PieceFactory) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	out := f.inner.WaitForCacheSync(stopCh)
	for t, ok := range f.Shared.WaitForCacheSync(stopCh) {
		out[t] = ok
	}
	f.mu.Lock()
	ns := f.namespaces
	f.mu.Unlock()
	if ns != nil {
		out[reflect.TypeOf(&corev1.Namespace{})] = cache.WaitForCacheSync(stopCh, ns.HasSynced)
	}
	return out
}

// WaitForCacheSyncWithContext waits for the piece's informers.
func (f *PieceFactory) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	synced := f.WaitForCacheSync(ctx.Done())
	return cache.SyncResult{Synced: synced, Err: ctx.Err()}
}

// ForResource gives a generic informer of the resource, routed like
// InformerFor.
func (f *PieceFactory) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	generic := func(informer cache.SharedIndexInformer) (informers.GenericInformer, error) {
		return genericInformer{informer: informer, resource: gvr.GroupResource()}, nil
	}
	if gvr.Group == "" && gvr.Resource == "namespaces" && f.InPiece != nil {
		return generic(f.namespaceInformer())
	}
	gvk, err := f.Mapper.KindFor(gvr)
	if err != nil {
		return nil, fmt.Errorf("kind of %s: %w", gvr, err)
	}
	mapping, err := f.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("scope of %s: %w", gvr, err)
	}
	clusterScoped := mapping.Scope.Name() == meta.RESTScopeNameRoot
	switch {
	case clusterScoped || f.Mode == ModeFilteredWatch:
		gi, err := f.Shared.ForResource(gvr)
		if err != nil {
			return nil, err
		}
		if clusterScoped && !(gvr.Group == "" && gvr.Resource == "namespaces") {
			return generic(&sharedView{SharedIndexInformer: gi.Informer(), factory: f})
		}
		return generic(f.view(gi.Informer(), clusterScoped))
	case f.Mode == ModeNamespaceWatch:
		obj, err := scheme.Scheme.New(gvk)
		if err != nil {
			return nil, fmt.Errorf("informer for %s: %w", gvr, err)
		}
		return generic(f.InformerFor(obj, nil))
	}
	return f.inner.ForResource(gvr)
}

type genericInformer struct {
	informer cache.SharedIndexInformer
	resource schema.GroupResource
}

func (g genericInformer) Informer() cache.SharedIndexInformer { return g.informer }
func (g genericInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(g.informer.GetIndexer(), g.resource)
}

// InformerName is the sharded factory's name (nil: unnamed).
func (f *PieceFactory) InformerName() *cache.InformerName { return f.inner.InformerName() }

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
