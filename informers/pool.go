package informers

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// PoolConfig is what a Pool is made from.
type PoolConfig struct {
	Client    kubernetes.Interface
	Metadata  metadata.Interface
	Resync    time.Duration
	Transform cache.TransformFunc
}

// Pool is the replica's cluster-wide informers, typed and metadata-only:
// one per kind, shared by its users (pieces' factories, the replica) and
// stopped when the last releases it, so a singleton moving away takes its
// caches with it (client-go's factory stops its informers only all
// together). Each informer has a client-go factory of its own, so it stops
// alone and ForResource keeps client-go's mapping of resources to informers.
type Pool struct {
	logger klog.Logger
	config PoolConfig
	// done is the replica's lifetime: every informer stops with it.
	done <-chan struct{}

	mu      sync.Mutex
	entries map[poolKey]*poolEntry
	// creations: what the Namespaces informer's watches told of.
	creations *Creations
	// started: users that called Start. An informer they ask for later
	// starts at once: a controller building listers on demand
	// (resourcequota's evaluators) would wait forever for the next Start.
	started map[any]bool
}

// poolKey names a typed informer by Go type, a metadata one by resource.
type poolKey struct {
	typed    reflect.Type
	metadata schema.GroupVersionResource
}

func (k poolKey) String() string {
	if k.typed != nil {
		return k.typed.String()
	}
	return "metadata " + k.metadata.String()
}

type poolEntry struct {
	key poolKey
	// factory: the informer's own client-go factory, typed or metadata-only.
	factory interface {
		Start(<-chan struct{})
		Shutdown()
	}
	informer cache.SharedIndexInformer
	users    map[any]struct{}
	stop     chan struct{}
}

func (e *poolEntry) start() { e.factory.Start(e.stop) }

// NewPool makes an empty pool whose informers all stop when ctx ends.
func NewPool(ctx context.Context, c PoolConfig) *Pool {
	registerMetrics()
	p := &Pool{config: c, logger: klog.FromContext(ctx), done: ctx.Done(), entries: map[poolKey]*poolEntry{}, started: map[any]bool{}}
	go func() {
		<-ctx.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		for key, e := range p.entries {
			p.remove(key, e)
		}
	}()
	return p
}

// entry finds or makes the informer of key for user. Called with mu held.
func (p *Pool) entry(user any, key poolKey, build func(*poolEntry)) *poolEntry {
	e, ok := p.entries[key]
	if !ok {
		e = &poolEntry{key: key, users: map[any]struct{}{}, stop: make(chan struct{})}
		build(e)
		p.entries[key] = e
		sharedInformers.Inc()
		p.logger.V(2).Info("Shared informer made", "informer", key)
	}
	e.users[user] = struct{}{}
	if p.started[user] && !p.ending() {
		e.start() // idempotent: client-go's factory starts an informer once
	}
	return e
}

// ending says whether the replica is ending (its informers are stopping).
func (p *Pool) ending() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// InformerFor gives user the typed informer of obj's kind, made by newFunc.
func (p *Pool) InformerFor(user any, obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entry(user, poolKey{typed: reflect.TypeOf(obj)}, func(e *poolEntry) {
		typed := p.newTyped()
		e.factory, e.informer = typed, typed.InformerFor(obj, newFunc)
	})
	return e.informer
}

// ForResource gives user the typed informer of gvr, as client-go maps it.
func (p *Pool) ForResource(user any, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) (cache.SharedIndexInformer, error) {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("informer for %s: %w", gvr, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := poolKey{typed: reflect.TypeOf(obj)}
	var build func(*poolEntry)
	if _, ok := p.entries[key]; !ok {
		// Asked before entry() adds user: a resource client-go has no
		// informer for leaves no entry and no user behind.
		typed := p.newTyped()
		generic, err := typed.ForResource(gvr)
		if err != nil {
			return nil, err
		}
		build = func(e *poolEntry) { e.factory, e.informer = typed, generic.Informer() }
	}
	return p.entry(user, key, build).informer, nil
}

// Namespaces gives user the shared Namespaces informer and the creations it
// records. Call it before anything else asks for Namespaces: the first to
// ask makes it.
func (p *Pool) Namespaces(user any) (cache.SharedIndexInformer, *Creations) {
	p.mu.Lock()
	if p.creations == nil {
		p.creations = &Creations{at: map[string]string{}}
	}
	c := p.creations
	p.mu.Unlock()
	return p.InformerFor(user, &corev1.Namespace{}, c.newInformer), c
}

// MetadataFor gives user the metadata-only informer of gvr.
func (p *Pool) MetadataFor(user any, gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entry(user, poolKey{metadata: gvr}, func(e *poolEntry) {
		m := metadatainformer.NewSharedInformerFactoryWithOptions(p.config.Metadata, p.config.Resync, metadatainformer.WithTransform(p.config.Transform))
		e.factory, e.informer = m, m.ForResource(gvr).Informer()
	})
	return e.informer
}

func (p *Pool) newTyped() informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(p.config.Client, p.config.Resync, informers.WithTransform(p.config.Transform))
}

// Start starts user's informers, now and as it asks for more; each runs
// until its last user releases it or the replica ends.
func (p *Pool) Start(user any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ending() {
		return // its informers are stopping
	}
	p.started[user] = true
	for _, e := range p.entries {
		if _, ok := e.users[user]; ok {
			e.start()
		}
	}
}

// WaitForCacheSync waits for user's informers, saying which synced.
func (p *Pool) WaitForCacheSync(user any, stopCh <-chan struct{}) map[poolKey]bool {
	p.mu.Lock()
	var mine []*poolEntry
	for _, e := range p.entries {
		if _, ok := e.users[user]; ok {
			mine = append(mine, e)
		}
	}
	p.mu.Unlock()
	out := map[poolKey]bool{}
	for _, e := range mine {
		out[e.key] = cache.WaitForCacheSync(stopCh, e.informer.HasSynced)
	}
	return out
}

// Release gives back every informer user holds: those it was the last
// user of stop. Remove user's event handlers first.
func (p *Pool) Release(user any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.started, user)
	for key, e := range p.entries {
		if _, ok := e.users[user]; !ok {
			continue
		}
		delete(e.users, user)
		if len(e.users) == 0 {
			p.remove(key, e)
		}
	}
}

// remove stops e's informer. Called with mu held.
func (p *Pool) remove(key poolKey, e *poolEntry) {
	delete(p.entries, key)
	close(e.stop)
	sharedInformers.Dec()
	p.logger.V(2).Info("Shared informer stopped: no piece uses it", "informer", key)
	// Shutdown waits for the informer's goroutines.
	go e.factory.Shutdown()
}
