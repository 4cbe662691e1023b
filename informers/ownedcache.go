package informers

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// OwnedCacheConfig is what an OwnedCache is made from.
type OwnedCacheConfig struct {
	// Logger is the replica's (default: klog.Background()).
	Logger klog.Logger
	// Sharded: list loaded namespaces with shard selectors (the apiserver
	// serves ShardedListAndWatch); else one list per namespace.
	Sharded bool
	// MaxTerms: the most namespaces one selector names (sharded).
	MaxTerms int
	// NamespaceWatchMax: without selectors, past this many namespaces
	// loaded at once list every namespace and keep theirs (0: never).
	NamespaceWatchMax int
	RESTClients       *RESTClients
	Mapper            meta.RESTMapper
	// Namespaces is the replica's informer of all Namespaces; it must run.
	Namespaces cache.SharedIndexInformer
	// Creations (Pool.Namespaces); nil lists every new namespace of a
	// selected watch.
	Creations   *Creations
	PartitionOf func(namespace string) int
	// Partitions is how many partitions PartitionOf places namespaces in;
	// HoldEverywhere loads each of them.
	Partitions int
	// FieldSelectors narrows a kind's informer to the objects matching its
	// selector. A narrowed kind cannot be held everywhere: a singleton
	// reading it reads the pool's.
	FieldSelectors map[reflect.Type]fields.Selector
	// SelectedWatches names the resources (e.g. "pods") whose trunk's
	// watch names the loaded namespaces in a shard selector (Sharded only),
	// so kube-apiserver sends the replica only their events; the others'
	// watches are filtered on the client.
	SelectedWatches sets.Set[string]
	Resync          time.Duration
	Transform       cache.TransformFunc
}

// OwnedCache is the replica's cache of namespaced kinds for its partition
// controllers: one informer per kind, holding the objects of the loaded
// partitions' namespaces. Load and Unload relist no other partition.
type OwnedCache struct {
	config OwnedCacheConfig

	mu         sync.Mutex
	informers  map[reflect.Type]*ownedInformer
	partitions map[int]bool
	// naming: partitions whose gains are reading their namespaces, with
	// how many; join leaves their new namespaces to the gain.
	naming map[int]int
	stop   <-chan struct{}
	// created: namespaces created in loaded partitions, waiting for the
	// join each starts; born: their creation versions (Creations).
	created []string
	born    map[string]string
	// held (doc.go). A deleted namespace stays held: the trunk keeps
	// decoding its events, so one created again under its name is held
	// from its first moment.
	held map[string]bool
	// reportMu orders the reports to reporter as held changes.
	reportMu sync.Mutex
	reporter HeldReporter
	// namespaceReads shares the consistent reads of the namespaces.
	namespaceReads *namespaceReads
}

type ownedInformer struct {
	informer cache.SharedIndexInformer
	lw       *ownedListWatch
	// everywhere counts the HoldEverywhere not yet released.
	everywhere int
}

// NewOwnedCache makes an empty cache (no partition loaded).
func NewOwnedCache(c OwnedCacheConfig) (*OwnedCache, error) {
	if c.MaxTerms < 1 || c.MaxTerms > MaxSelectorTerms {
		return nil, fmt.Errorf("shard selector terms must be between 1 and %d, got %d", MaxSelectorTerms, c.MaxTerms)
	}
	if c.PartitionOf != nil && c.Partitions < 1 {
		return nil, fmt.Errorf("partitions must be at least 1, got %d", c.Partitions)
	}
	if c.NamespaceWatchMax < 0 {
		return nil, fmt.Errorf("namespace watches must be at least 0, got %d", c.NamespaceWatchMax)
	}
	for t, selector := range c.FieldSelectors {
		if selector == nil || selector.Empty() {
			return nil, fmt.Errorf("field selector of %v is empty: leave the kind out to cache all its objects", t)
		}
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	registerMetrics()
	if plantedStuckLoad {
		c.Logger.Error(nil, "THIS BUILD CARRIES A PLANTED FAULT, for tests only: a load of a partition holding a namespace named "+stuckLoadPrefix+"* never finishes")
	}
	o := &OwnedCache{config: c, informers: map[reflect.Type]*ownedInformer{}, partitions: map[int]bool{}, naming: map[int]int{}, held: map[string]bool{}, born: map[string]string{}}
	o.namespaceReads = &namespaceReads{read: o.namespaceNames}
	if _, err := c.Namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: o.namespaceAdded}); err != nil {
		return nil, fmt.Errorf("following namespaces: %w", err)
	}
	return o, nil
}

func (o *OwnedCache) namespaceAdded(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.partitions[o.config.PartitionOf(ns.Name)] && !o.heldEverywhere() {
		return
	}
	o.created = append(o.created, ns.Name)
	if v := o.config.Creations.Of(ns.Name, ns.ResourceVersion); v != "" {
		o.born[ns.Name] = v
	}
	// A kind that must list it (met in a list) shows it once listed;
	// the others at once.
	go o.join()
}

// heldEverywhere: some informer holds every namespace. Called with mu held.
func (o *OwnedCache) heldEverywhere() bool {
	for _, i := range o.informers {
		if i.everywhere > 0 {
			return true
		}
	}
	return false
}

// HoldEverywhere makes the informer of obj's kind hold every namespace
// until as many ReleaseEverywhere, and returns it once it does, so that
// singletons reading every object of a kind the partition controllers read
// (every Pod) share its cache. Start the cache first.
func (o *OwnedCache) HoldEverywhere(ctx context.Context, obj runtime.Object) (cache.SharedIndexInformer, error) {
	if selector, ok := o.config.FieldSelectors[reflect.TypeOf(obj)]; ok {
		return nil, fmt.Errorf("the owned cache holds only the %T objects matching %q, not every one", obj, selector)
	}
	if err := o.waitNamespaces(ctx); err != nil {
		return nil, err
	}
	i := o.informerOf(obj)
	if err := o.gainEverywhere(ctx, i); err != nil {
		o.ReleaseEverywhere(obj)
		return nil, fmt.Errorf("loading every namespace of %T: %w", obj, err)
	}
	return i.informer, nil
}

// ReleaseEverywhere ends one HoldEverywhere: after the last, the informer
// drops the namespaces of partitions not loaded, as deletions scoped
// handlers do not see. Remove the singleton's handlers first.
func (o *OwnedCache) ReleaseEverywhere(obj runtime.Object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i, ok := o.informers[reflect.TypeOf(obj)]
	if !ok || i.everywhere == 0 {
		return
	}
	i.everywhere--
	if i.everywhere > 0 {
		return
	}
	i.lw.drop(func(p int) bool { return !o.partitions[p] }, o.config.Partitions, true)
	gen, leaving := i.lw.leaveEverywhere()
	if !leaving {
		return
	}
	names := o.config.Namespaces.GetStore().ListKeys()
	if o.stop == nil || plantedLetGoFromInformer {
		// Not started: the first list reads them again.
		i.lw.letGoEverywhere(gen, names)
		return
	}
	stop := o.stop
	go func() {
		names, err := o.readNamespaces(wait.ContextForChannel(stop))
		if err != nil {
			return // the cache stops
		}
		i.lw.letGoEverywhere(gen, names)
	}()
}

// InformerFor gives the cache's informer of obj's kind, which must be a
// namespaced built-in kind.
func (o *OwnedCache) InformerFor(obj runtime.Object) cache.SharedIndexInformer {
	return o.informerOf(obj).informer
}

// informerOf is the cache's informer of obj's kind, made on first use.
func (o *OwnedCache) informerOf(obj runtime.Object) *ownedInformer {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := reflect.TypeOf(obj)
	if i, ok := o.informers[t]; ok {
		return i
	}
	var lw *ownedListWatch
	keep := func(namespace string) bool { return lw.decodes(namespace) }
	lw = newOwnedListWatch(targetOf(o.config.RESTClients, o.config.Mapper, obj, o.config.FieldSelectors[t], o.config.SelectedWatches, keep), o.config.Sharded, o.config.MaxTerms, o.config.NamespaceWatchMax)
	informer := cache.NewSharedIndexInformer(lw, obj, o.config.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if o.config.Transform != nil {
		_ = informer.SetTransform(o.config.Transform)
	}
	lw.indexer = informer.GetIndexer
	lw.partitionOf, lw.listNamespaceNames = o.config.PartitionOf, o.namespaceReads.get
	// Not yet run: its first list and the read after it (takeUncarried)
	// bring every namespace of the loaded partitions.
	lw.keepGain(o.partitions, o.namespacesOf(o.partitions), false, lw.nameGain(o.partitions))
	i := &ownedInformer{informer: informer, lw: lw}
	o.informers[t] = i
	if o.stop != nil {
		go informer.Run(o.stop)
	}
	return i
}

// Start runs the informers (and any made later) until stop closes.
func (o *OwnedCache) Start(stop <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stop != nil {
		return
	}
	o.stop = stop
	for _, i := range o.informers {
		go i.informer.Run(stop)
	}
}

// HasSynced: every informer has listed.
func (o *OwnedCache) HasSynced() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, i := range o.informers {
		if !i.informer.HasSynced() {
			return false
		}
	}
	return true
}

// namespacesOf lists the namespaces of partitions. Called with mu held.
func (o *OwnedCache) namespacesOf(partitions map[int]bool) []string {
	return o.inPartitions(o.config.Namespaces.GetStore().ListKeys(), partitions)
}

// inPartitions is names (namespaces) in partitions, sorted.
func (o *OwnedCache) inPartitions(names []string, partitions map[int]bool) []string {
	var out []string
	for _, name := range names {
		if partitions[o.config.PartitionOf(name)] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// waitNamespaces waits for the Namespaces informer's first list.
func (o *OwnedCache) waitNamespaces(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), o.config.Namespaces.HasSynced) {
		return fmt.Errorf("namespaces not synced: %w", context.Cause(ctx))
	}
	return nil
}

// Include marks partitions loaded without waiting: for partitions the
// informers' first list brings (before Start).
func (o *OwnedCache) Include(ctx context.Context, partitions ...int) error {
	return o.load(ctx, partitions, false)
}

// Load adds the namespaces of partitions and returns once every informer
// holds what their lists handed over, so controllers handed them next see
// their objects together, as after a sync. Partitions loaded together
// share one list per kind (per selector's worth of namespaces).
func (o *OwnedCache) Load(ctx context.Context, partitions ...int) error {
	return o.load(ctx, partitions, true)
}

// Unload removes p's namespaces: their objects leave every informer as
// deletions (scoped handlers drop them once p is out of scope).
func (o *OwnedCache) Unload(p int) {
	o.reportMu.Lock()
	defer o.reportMu.Unlock()
	o.mu.Lock()
	dropped := o.unload(p)
	o.mu.Unlock()
	if o.reporter != nil && len(dropped) > 0 {
		o.reporter.Dropped(dropped)
	}
}

// unload removes p's namespaces and returns those that were held. Called
// with mu held.
func (o *OwnedCache) unload(p int) (dropped []string) {
	if !o.partitions[p] {
		return nil
	}
	delete(o.partitions, p)
	for ns := range o.held {
		if o.config.PartitionOf(ns) == p {
			delete(o.held, ns)
			dropped = append(dropped, ns)
		}
	}
	unloaded := 0
	for _, i := range o.informers {
		// A kind held everywhere keeps the partition loaded for its
		// singletons until the last ReleaseEverywhere.
		n := i.lw.drop(func(q int) bool { return q == p }, o.config.Partitions, i.everywhere == 0)
		unloaded = max(unloaded, n)
	}
	ownedNamespaces.Add(-float64(unloaded))
	ownedPartitions.Dec()
	o.config.Logger.V(4).Info("Unloaded a partition from the owned cache", "partition", p, "namespaces", unloaded)
	return dropped
}

// targetOf resolves obj's resource on first use, so a RESTMapper not ready
// yet is an error the reflector retries. The trunk's watch decodes only
// the objects of the namespaces keep accepts.
func targetOf(clients *RESTClients, mapper meta.RESTMapper, obj runtime.Object, selector fields.Selector, selectedWatches sets.Set[string], keep func(namespace string) bool) func() (*listWatchTarget, error) {
	var mu sync.Mutex
	var target *listWatchTarget
	return func() (*listWatchTarget, error) {
		mu.Lock()
		defer mu.Unlock()
		if target != nil {
			return target, nil
		}
		gvks, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil {
			return nil, fmt.Errorf("kind of %T: %w", obj, err)
		}
		gvk := gvks[0]
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("resource of %s: %w", gvk, err)
		}
		client, err := clients.forGroupVersion(gvk.GroupVersion())
		if err != nil {
			return nil, err
		}
		trunkClient, err := clients.trunkClientFor(gvk.GroupVersion(), gvk.Kind, keep)
		if err != nil {
			return nil, err
		}
		target = &listWatchTarget{client: client, trunkClient: trunkClient, resource: mapping.Resource.Resource, listKind: gvk.GroupVersion().WithKind(gvk.Kind + "List"), selectWatch: selectedWatches.Has(mapping.Resource.Resource)}
		if selector != nil {
			target.fieldSelector = selector.String()
		}
		return target, nil
	}
}
