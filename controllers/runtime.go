package controllers

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/server/healthz"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/features"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// Runtime runs pieces with Kubernetes' own controllers: it is the
// shard.Runner of a replica. Partition pieces are rows of its partition
// table, singleton pieces runs of their own (singletonRuns). One Runtime
// per process.
type Runtime struct {
	config      *kcmconfig.CompletedConfig
	descriptors map[string]*kcmapp.ControllerDescriptor
	mode        informers.Mode

	// singletonBuilder: singleton pieces' clients, each with its own
	// limiter as in KCM.
	singletonBuilder *sharedLimiterBuilder
	// Partition controllers build their clients here: same limiters, plus
	// the partition table's write gates.
	partitionRootBuilder, partitionBuilder *sharedLimiterBuilder
	// table holds the partition pieces; singletons the singleton pieces
	// that run. Both report to ended.
	table      *partitionTable
	singletons singletonRuns
	ended      chan shard.Ended
	// factories: the informer factory of each running singleton piece
	// (by piece name) and of the partition controllers ("partition"),
	// for Census.
	factories      sync.Map
	restClients    *informers.RESTClients
	metadataClient metadata.Interface
	restMapper     *restmapper.DeferredDiscoveryRESTMapper
	// kindScopes: which kinds are cluster-scoped, from the same discovery.
	kindScopes informers.KindScopes
	// shared is the replica's one cluster-wide cache, typed and
	// metadata-only: every piece sees it through informers.PieceFactory
	// views, and an informer stops when the last piece using it stops;
	// owned, when the mode has one, caches the partition controllers'
	// namespaced kinds instead.
	shared     *informers.Pool
	owned      *informers.OwnedCache
	sharedStop <-chan struct{}
	// namespaces caches every Namespace; partitionOf places them;
	// namespacesAdded: NamespacesAdded; settling: those just added
	// (newnamespaces.go).
	namespaces      cache.SharedIndexInformer
	partitionOf     func(string) int
	namespacesAdded chan struct{}
	settling        settlingNamespaces
	// ctx is the replica's lifetime.
	ctx context.Context
	// replicas: RuntimeConfig.Replicas.
	replicas func() int
	metrics  *controllers.ControllerManagerMetrics

	debugMu sync.RWMutex
	debug   map[string]http.Handler // controller name -> its debugging handler
}

// RuntimeConfig is what a replica's Runtime is built from.
type RuntimeConfig struct {
	// KCM is kube-controller-manager's completed configuration, from the
	// same flags.
	KCM *kcmconfig.CompletedConfig
	// Identity names the replica in its clients' user agents and metrics.
	Identity string
	// Ring places namespaces in partitions.
	Ring shard.RingConfig
	// Mode is how the partition controllers' namespaced kinds are cached;
	// it must be resolved (informers.Resolve).
	Mode informers.Mode
	// SelectorTerms and NamespaceWatchMax size the owned cache's lists
	// (--shard-selector-max-terms, --namespace-watch-max-namespaces).
	SelectorTerms, NamespaceWatchMax int
	// SelectedWatches: resources whose owned cache watch carries a shard
	// selector naming the loaded namespaces (--selected-watch-resources).
	SelectedWatches []string
	// Authority gates every write: none is sent while the replica may
	// not act.
	Authority shard.Authority
	// Weights, when set, receives what each loaded partition holds, every
	// weightInterval (weights.go): the weights the replica publishes.
	// Only the modes with an owned cache measure them.
	Weights func(map[int]uint64)
	// Young, when set, receives what each young namespace of the loaded
	// partitions holds, every youngInterval (weights.go).
	Young func(map[string]uint64)
	// Loading, when set, is told the partitions being loaded into the
	// owned cache and since when, as each load starts and ends (the
	// Lease names a slow one: membership.Member.SetLoading).
	Loading func(map[int]time.Time)
	// LoadStuckAfter: a load going on for longer is logged with what it
	// waits for and counted stuck (the lease duration; 0: never).
	LoadStuckAfter time.Duration
	// Replicas counts the fleet's live replicas, this one included; when
	// set, the partition controllers' worker counts are KCM's divided
	// among them (shareWorkers) when they are built. Nil: KCM's counts.
	Replicas func() int
}

// runtimeClients are the replica-wide clients every piece shares.
type runtimeClients struct {
	// root: the controller manager's own identity; controllers: each
	// controller's own ServiceAccount with --use-service-account-credentials.
	root, controllers *sharedLimiterBuilder
	// plain and ownedCache are the informers' clients (the owned cache's
	// names it in its user agent).
	plain      kubernetes.Interface
	ownedCache *restclient.Config
	metadata   metadata.Interface
	discovery  discovery.CachedDiscoveryInterface
}

// ownedCacheBurst is the burst of the owned cache's client budget: a gain
// lists every kind the cache holds at once (a consistent read of the
// namespaces, a list per kind, a catch-up list per kind held everywhere),
// where KCM's informers list each kind once, at start. Behind the
// informers' budget (kube-api-qps 20, burst 30) the lists of one gain went
// out 50 ms apart, and a namespace created as its partition moved waited
// 0.4-0.7 s for its default ServiceAccount (TestNamespaceFirstMoments, a
// fleet of three, --v=4: "client-side throttling" waits of 85 to 535 ms
// before the gain's lists). 200 is the burst KCM gives its discovery
// clients, whose requests also come many at once, and rarely.
const ownedCacheBurst = 200

// newRuntimeClients builds client builders whose clients share one rate
// limiter per controller across all pieces (so a fleet of one spends
// exactly what kube-controller-manager spends), and the informers' and
// discovery's clients.
func newRuntimeClients(logger klog.Logger, cfg RuntimeConfig) (*runtimeClients, error) {
	c := cfg.KCM
	root := newSharedLimiterBuilder(logger, clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}, cfg.Identity, cfg.Authority)
	clients := &runtimeClients{root: root, controllers: root}
	if c.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		clients.controllers = newSharedLimiterBuilder(logger, clientbuilder.NewDynamicClientBuilder(restclient.AnonymousClientConfig(c.Kubeconfig), c.Client.CoreV1(), "kube-system"), cfg.Identity, cfg.Authority)
	}
	informerConfig, err := root.Config("shared-informers")
	if err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	// The owned cache's requests name it in their user agent, so that the
	// apiserver's audit log tells them from the pool's, and have a budget
	// of their own: the informers' QPS with ownedCacheBurst.
	clients.ownedCache = restclient.CopyConfig(informerConfig)
	clients.ownedCache.UserAgent = membership.UserAgent(cfg.Identity, "owned-cache")
	clients.ownedCache.RateLimiter = root.limiter("owned-cache", informerConfig.QPS, ownedCacheBurst)
	if clients.plain, err = kubernetes.NewForConfig(informerConfig); err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	metadataConfig, err := root.Config("metadata-informers")
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	if clients.metadata, err = metadata.NewForConfig(metadataConfig); err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	discoveryClient, err := root.DiscoveryClient("controller-discovery")
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	clients.discovery = cacheddiscovery.NewMemCacheClient(discoveryClient)
	return clients, nil
}

// NewRuntime prepares the replica-wide parts: the clients
// (newRuntimeClients), one RESTMapper, one pool of typed and metadata
// informers that every singleton and the partition controller set see,
// and, in the modes that have one, the owned cache of the partition
// controllers' namespaced kinds.
func NewRuntime(ctx context.Context, cfg RuntimeConfig) (*Runtime, error) {
	descriptors := Descriptors()
	if err := Check(descriptors); err != nil {
		return nil, err
	}
	clients, err := newRuntimeClients(klog.FromContext(ctx), cfg)
	if err != nil {
		return nil, err
	}
	c := cfg.KCM
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(clients.discovery)
	go resetEvery(ctx, 30*time.Second, restMapper)
	controllers.Register()
	registerMetrics()
	memberInfo.WithLabelValues(cfg.Identity, string(cfg.Mode)).Set(1)
	r := &Runtime{
		config: c, descriptors: descriptors, mode: cfg.Mode,
		singletonBuilder: clients.controllers.forSingletons(),
		// Every piece is reported once per run: room for all of them.
		ended:          make(chan shard.Ended, cfg.Ring.Partitions+len(Catalog)),
		restClients:    informers.NewRESTClients(clients.ownedCache),
		metadataClient: clients.metadata, restMapper: restMapper,
		kindScopes: informers.DiscoveryScopes{Discovery: clients.discovery},
		shared: informers.NewPool(ctx, informers.PoolConfig{
			Client: clients.plain, Metadata: clients.metadata, Resync: kcmapp.ResyncPeriod(c)(), Transform: trimManagedFields,
		}),
		sharedStop: ctx.Done(),
		replicas:   cfg.Replicas,
		ctx:        ctx,
		metrics:    controllers.NewControllerManagerMetrics("kube-controller-manager"),
	}
	// Every Namespace is cached (they are few and small), for the
	// replica's lifetime: the owned cache places namespaces by them, and
	// they run from now so that the first partition can be loaded before
	// any informer starts.
	namespaces, creations := r.shared.Namespaces(r)
	r.namespaces, r.partitionOf, r.namespacesAdded = namespaces, cfg.Ring.NamespacePartition, make(chan struct{}, 1)
	if _, err := namespaces.AddEventHandler(r.signalNamespacesAdded(dealSettle)); err != nil {
		return nil, fmt.Errorf("namespaces informer: %w", err)
	}
	r.shared.Start(r)
	if cfg.Mode != informers.ModeFilteredWatch {
		if r.owned, err = newOwnedCache(ctx, cfg, r.restClients, restMapper, namespaces, creations); err != nil {
			return nil, err
		}
	}
	r.table = r.newPartitionTable(cfg.Ring)
	r.table.publishLoading, r.table.stuckAfter = cfg.Loading, cfg.LoadStuckAfter
	r.partitionRootBuilder = clients.root.forPartitions(r.table)
	r.partitionBuilder = clients.controllers.forPartitions(r.table)
	go r.table.loop(ctx)
	r.startMeasuring(ctx, cfg)
	return r, nil
}

// newOwnedCache is the replica's owned cache, for the modes that have
// one.
func newOwnedCache(ctx context.Context, cfg RuntimeConfig, clients *informers.RESTClients, mapper meta.RESTMapper, namespaces cache.SharedIndexInformer, creations *informers.Creations) (*informers.OwnedCache, error) {
	owned, err := informers.NewOwnedCache(informers.OwnedCacheConfig{
		Sharded: cfg.Mode == informers.ModeShardedWatch, MaxTerms: cfg.SelectorTerms, NamespaceWatchMax: cfg.NamespaceWatchMax, RESTClients: clients, Mapper: mapper,
		Namespaces: namespaces, Creations: creations, PartitionOf: cfg.Ring.NamespacePartition, Partitions: cfg.Ring.Partitions, FieldSelectors: ownedFieldSelectors(), SelectedWatches: sets.New(cfg.SelectedWatches...),
		Resync: kcmapp.ResyncPeriod(cfg.KCM)(), Transform: trimManagedFields, Logger: klog.FromContext(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("owned cache: %w", err)
	}
	return owned, nil
}

// newPartitionTable is the replica's partition table over ring's
// partitions, acting through the owned cache when the mode has one.
func (r *Runtime) newPartitionTable(ring shard.RingConfig) *partitionTable {
	t := &partitionTable{
		scope: informers.NewScope(ring.Partitions, ring.NamespacePartition), owned: r.owned, partitionOf: ring.NamespacePartition,
		startControllers: r.startPartitionControllers, drain: newQueueDrain(legacyregistry.DefaultGatherer),
		ended: r.ended, wake: make(chan struct{}, 1), rows: map[int]*partitionRow{},
	}
	if r.owned != nil {
		// The controllers see a namespace once the owned cache holds it,
		// not when the Namespaces informer brings it.
		t.scope.GateNamespaces()
		r.owned.ReportTo(t)
	}
	return t
}

// resetEvery forgets the RESTMapper's discovery every period until ctx
// ends, as KCM does, so that kinds installed later are found.
func resetEvery(ctx context.Context, period time.Duration, restMapper *restmapper.DeferredDiscoveryRESTMapper) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			restMapper.Reset()
		}
	}
}

// Singletons lists the singleton controllers this replica's flags enable,
// the names of the fleet's singleton pieces.
func (r *Runtime) Singletons() []string {
	var out []string
	for name, e := range Catalog {
		if e.Kind != Singleton || !r.enabled(name) {
			continue
		}
		if name == names.StorageVersionMigratorController && utilfeature.DefaultFeatureGate.Enabled(features.StorageVersionMigrator) {
			// KCM hands it the garbage collector's graph builder
			// (ControllerContext.GraphBuilder), which lives in the
			// garbage collector's piece, maybe on another replica; as a
			// piece of its own it would get none and panic on its first
			// migration, on every replica that took it over. Without the
			// gate its constructor builds nothing, as in KCM.
			klog.FromContext(r.ctx).Error(nil, "Not running the storage-version-migrator: the fleet cannot give it the garbage collector's graph yet (docs/controllers.md)", "controller", name)
			continue
		}
		out = append(out, name)
	}
	return out
}

// enabled: selected by --controllers, its feature gates on, and not a cloud
// controller without a cloud provider. Controllers that would not run are
// not made pieces at all.
func (r *Runtime) enabled(name string) bool {
	d := r.descriptors[name]
	if d == nil {
		return false
	}
	cc := kcmapp.ControllerContext{ComponentConfig: r.config.ComponentConfig}
	if !cc.IsControllerEnabled(d) {
		return false
	}
	for _, gate := range d.GetRequiredFeatureGates() {
		if !utilfeature.DefaultFeatureGate.Enabled(gate) {
			return false
		}
	}
	return !d.IsCloudProviderController() || r.config.ComponentConfig.KubeCloudShared.CloudProvider.Name != ""
}

func trimManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// Start starts pieces (shard.Runner): the partitions as one set, gained
// together by the partition table, each singleton as a run of its own.
func (r *Runtime) Start(pieces []shard.Piece) {
	partitions, singletons := split(pieces)
	for _, piece := range singletons {
		r.startSingleton(piece)
	}
	if len(partitions) > 0 {
		r.table.Start(partitions)
	}
}

// Stop stops pieces (shard.Runner): their write gates are shut before it
// returns, so that no write of theirs is sent after the Manager logs the
// stop, even if the replica's authority comes back meanwhile, but for
// the Events reporting their last writes when they moved (writeGate's
// report tail); each is reported on Ended once its writes in flight are
// answered and the tail is over (its controllers may still be winding
// down, their writes refused).
func (r *Runtime) Stop(pieces []shard.Piece, moved bool) {
	partitions, singletons := split(pieces)
	for _, piece := range singletons {
		r.singletons.stop(piece, moved)
	}
	if len(partitions) > 0 {
		r.table.Stop(partitions, moved)
	}
}

// Ended reports each piece once it can no longer act (shard.Runner).
func (r *Runtime) Ended() <-chan shard.Ended { return r.ended }

// split divides pieces into partitions and singletons.
func split(pieces []shard.Piece) (partitions []int, singletons []shard.Piece) {
	for _, piece := range pieces {
		if piece.IsPartition() {
			partitions = append(partitions, piece.Partition())
		} else {
			singletons = append(singletons, piece)
		}
	}
	return partitions, singletons
}

// controllerContext is the part of a ControllerContext every piece shares.
func (r *Runtime) controllerContext(builder clientbuilder.ControllerClientBuilder) kcmapp.ControllerContext {
	return kcmapp.ControllerContext{
		ClientBuilder:            builder,
		ComponentConfig:          r.config.ComponentConfig,
		RESTMapper:               r.restMapper,
		InformersStarted:         make(chan struct{}),
		ResyncPeriod:             kcmapp.ResyncPeriod(r.config),
		ControllerManagerMetrics: r.metrics,
	}
}

// startInformers starts what cc's controllers asked for and tells them so,
// as KCM does once every controller is built.
func startInformers(ctx context.Context, cc kcmapp.ControllerContext, kind string) {
	cc.InformerFactory.Start(ctx.Done())
	cc.ObjectOrMetadataInformerFactory.Start(ctx.Done())
	close(cc.InformersStarted)
	go observeInformerSync(ctx, kind, cc)
}

// observeInformerSync records how long the informers took to sync
// (nothing, if ctx ends first).
func observeInformerSync(ctx context.Context, kind string, cc kcmapp.ControllerContext) {
	start := time.Now()
	for _, ok := range cc.InformerFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return
		}
	}
	informerSync.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	klog.FromContext(ctx).V(2).Info("Informers synced", "for", kind, "took", time.Since(start).Round(time.Millisecond))
}

// controllerLoop is KCM's controllerLoop (unexported there): a controller
// that is a function of its context.
type controllerLoop struct {
	name string
	run  func(context.Context)
}

func (l controllerLoop) Name() string            { return l.name }
func (l controllerLoop) Run(ctx context.Context) { l.run(ctx) }

// ignoreHealthChecks: per-controller health checks of pieces come and go
// with the pieces; /healthz reports the replica's own health instead.
type ignoreHealthChecks struct{}

func (ignoreHealthChecks) AddHealthChecker(...healthz.HealthChecker) {}

var _ shard.Runner = (*Runtime)(nil)
