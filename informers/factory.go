// Package informers builds the informer views of pieces: for a namespace
// partition, a SharedInformerFactory whose namespaced kinds list and watch
// only the partition's namespaces (server-side sharded watch), whose
// Namespaces view holds only the partition's namespaces, and whose
// cluster-scoped kinds come from one factory shared by the whole replica,
// with the piece's event handlers removed again when it stops.
package informers

import (
	"context"
	"fmt"
	"reflect"
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
)

// ScopeResolver tells whether a kind is namespaced (a RESTMapper does).
type ScopeResolver interface {
	RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error)
}

// PieceFactory is the informer factory of one partition piece.
type PieceFactory struct {
	inner  informers.SharedInformerFactory // sharded: namespaced kinds
	shared informers.SharedInformerFactory // the replica's: cluster-scoped kinds
	// sharedStop ends the replica's shared informers: they outlive pieces.
	sharedStop <-chan struct{}
	scopes     ScopeResolver
	// inPiece reports whether a namespace belongs to the piece.
	inPiece     func(namespace string) bool
	plainClient kubernetes.Interface
	resync      time.Duration
	transform   cache.TransformFunc

	mu         sync.Mutex
	namespaces cache.SharedIndexInformer
	handlers   []registration
	started    []context.CancelFunc
}

type registration struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
}

// NewPieceFactory builds the factory of a partition piece. shardedClient
// must list and watch only the piece's namespaces; plainClient sees
// everything (the piece's Namespaces view filters it with inPiece).
func NewPieceFactory(shardedClient, plainClient kubernetes.Interface, shared informers.SharedInformerFactory, sharedStop <-chan struct{},
	scopes ScopeResolver, inPiece func(string) bool, resync time.Duration, transform cache.TransformFunc) *PieceFactory {
	return &PieceFactory{
		inner:       informers.NewSharedInformerFactoryWithOptions(shardedClient, resync, informers.WithTransform(transform)),
		shared:      shared,
		sharedStop:  sharedStop,
		scopes:      scopes,
		inPiece:     inPiece,
		plainClient: plainClient,
		resync:      resync,
		transform:   transform,
	}
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
	mapping, err := f.scopes.RESTMapping(gvks[0].GroupKind(), gvks[0].Version)
	if err != nil {
		return false
	}
	return mapping.Scope.Name() == meta.RESTScopeNameRoot
}

// InformerFor routes each kind: Namespaces to the piece's filtered view,
// other cluster-scoped kinds to the shared factory (with handler
// tracking), namespaced kinds to the sharded factory.
func (f *PieceFactory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	if _, ok := obj.(*corev1.Namespace); ok {
		return f.namespaceInformer()
	}
	if f.clusterScoped(obj) {
		return &trackedInformer{SharedIndexInformer: f.shared.InformerFor(obj, newFunc), factory: f}
	}
	return f.inner.InformerFor(obj, newFunc)
}

func (f *PieceFactory) namespaceInformer() cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.namespaces != nil {
		return f.namespaces
	}
	client := f.plainClient
	keep := func(obj runtime.Object) bool {
		ns, ok := obj.(*corev1.Namespace)
		return ok && f.inPiece(ns.Name)
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
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Bookmark || e.Type == watch.Error {
					return e, true
				}
				return e, keep(e.Object)
			}), nil
		},
	}
	// As generated informers do: tell the reflector whether the client can
	// stream the initial list (watch-list); fakes cannot.
	f.namespaces = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Namespace{}, f.resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if f.transform != nil {
		_ = f.namespaces.SetTransform(f.transform)
	}
	return f.namespaces
}

// trackedInformer records the handlers a piece adds to a shared informer,
// so they can be removed when the piece stops: controllers never remove
// their own.
type trackedInformer struct {
	cache.SharedIndexInformer
	factory *PieceFactory
}

func (t *trackedInformer) track(h cache.ResourceEventHandlerRegistration, err error) (cache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		t.factory.mu.Lock()
		t.factory.handlers = append(t.factory.handlers, registration{informer: t.SharedIndexInformer, handle: h})
		t.factory.mu.Unlock()
	}
	return h, err
}

func (t *trackedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return t.track(t.SharedIndexInformer.AddEventHandler(h))
}

func (t *trackedInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return t.track(t.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (t *trackedInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return t.track(t.SharedIndexInformer.AddEventHandlerWithOptions(h, options))
}

// Start starts the piece's informers until stopCh closes, and any new
// shared ones for the replica's lifetime (a shared informer started with a
// piece's stop channel would die with that piece under every other piece).
func (f *PieceFactory) Start(stopCh <-chan struct{}) {
	f.inner.Start(stopCh)
	f.shared.Start(f.sharedStop)
	f.mu.Lock()
	defer f.mu.Unlock()
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

// StartWithContext is Start with a context.
func (f *PieceFactory) StartWithContext(ctx context.Context) { f.Start(ctx.Done()) }

// Shutdown stops the piece's own informers, waits for them, and removes the
// piece's handlers from the shared ones. Call it after every controller of
// the piece has returned.
func (f *PieceFactory) Shutdown() {
	f.inner.Shutdown()
	f.mu.Lock()
	cancels := f.started
	f.started = nil
	handlers := f.handlers
	f.handlers = nil
	f.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	for _, h := range handlers {
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
	for t, ok := range f.shared.WaitForCacheSync(stopCh) {
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
	if gvr.Group == "" && gvr.Resource == "namespaces" {
		return genericInformer{informer: f.namespaceInformer(), resource: gvr.GroupResource()}, nil
	}
	if mapper, ok := f.scopes.(meta.RESTMapper); ok {
		if gvk, err := mapper.KindFor(gvr); err == nil {
			if mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil && mapping.Scope.Name() == meta.RESTScopeNameRoot {
				gi, err := f.shared.ForResource(gvr)
				if err != nil {
					return nil, err
				}
				return genericInformer{informer: &trackedInformer{SharedIndexInformer: gi.Informer(), factory: f}, resource: gvr.GroupResource()}, nil
			}
		}
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
