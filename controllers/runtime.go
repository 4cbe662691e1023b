package controllers

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/features"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// Runtime runs pieces with Kubernetes' own controllers (it is the
// shard.Runner of a replica). One Runtime per process.
type Runtime struct {
	config      *kcmconfig.CompletedConfig
	identity    string
	descriptors map[string]*kcmapp.ControllerDescriptor
	ring        shard.RingConfig
	mode        informers.Mode

	rootBuilder *sharedLimiterBuilder
	// singletonBuilder: singleton pieces' clients, each with its own
	// limiter as in KCM.
	singletonBuilder *sharedLimiterBuilder
	// Partition controllers build their clients here: same limiters, plus
	// the partition write fence.
	partitions *partitionFence
	// singletonRuns: each running singleton piece's write gate
	// (shard.Piece -> *partitionFence with one slot), for Revoke.
	singletonRuns sync.Map
	// factories: the informer factory of each running singleton piece
	// (by piece name) and of the partition controllers ("partition"),
	// for Census.
	factories                              sync.Map
	partitionRootBuilder, partitionBuilder *sharedLimiterBuilder
	restClients                            *informers.RESTClients
	plainClient                            kubernetes.Interface
	metadataClient                         metadata.Interface
	restMapper                             *restmapper.DeferredDiscoveryRESTMapper
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
	// ctx is the replica's lifetime.
	ctx context.Context
	// partitionSet runs the partition controllers.
	partitionSet *partitionSet
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

// newRuntimeClients builds client builders whose clients share one rate
// limiter per controller across all pieces (so a fleet of one spends
// exactly what kube-controller-manager spends), and the informers' and
// discovery's clients.
func newRuntimeClients(cfg RuntimeConfig) (*runtimeClients, error) {
	c := cfg.KCM
	root := newSharedLimiterBuilder(clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}, cfg.Identity, cfg.Authority)
	clients := &runtimeClients{root: root, controllers: root}
	if c.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		clients.controllers = newSharedLimiterBuilder(clientbuilder.NewDynamicClientBuilder(restclient.AnonymousClientConfig(c.Kubeconfig), c.Client.CoreV1(), "kube-system"), cfg.Identity, cfg.Authority)
	}
	informerConfig, err := root.Config("shared-informers")
	if err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	// The owned cache's requests name it in their user agent, so that the
	// apiserver's audit log tells them from the pool's; it shares the
	// informers' client budget.
	clients.ownedCache = restclient.CopyConfig(informerConfig)
	clients.ownedCache.UserAgent = "fleet-controller-manager/" + cfg.Identity + "/owned-cache"
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
	clients, err := newRuntimeClients(cfg)
	if err != nil {
		return nil, err
	}
	c := cfg.KCM
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(clients.discovery)
	go resetEvery(ctx, 30*time.Second, restMapper)
	controllers.Register()
	registerMetrics()
	memberInfo.WithLabelValues(cfg.Identity, string(cfg.Mode)).Set(1)
	partitions := newPartitionFence(cfg.Ring.NamespacePartition)
	r := &Runtime{
		config: c, identity: cfg.Identity, descriptors: descriptors, ring: cfg.Ring, mode: cfg.Mode,
		rootBuilder: clients.root, singletonBuilder: clients.controllers.forSingletons(),
		partitions:           partitions,
		partitionRootBuilder: clients.root.forPartitions(partitions),
		partitionBuilder:     clients.controllers.forPartitions(partitions),
		restClients:          informers.NewRESTClients(clients.ownedCache),
		plainClient:          clients.plain, metadataClient: clients.metadata, restMapper: restMapper,
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
	namespaces, err := r.shared.ForResource(r, corev1.SchemeGroupVersion.WithResource("namespaces"), corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err != nil {
		return nil, fmt.Errorf("namespaces informer: %w", err)
	}
	r.shared.Start(r)
	if cfg.Mode != informers.ModeFilteredWatch {
		if r.owned, err = informers.NewOwnedCache(informers.OwnedCacheConfig{
			Sharded: cfg.Mode == informers.ModeShardedWatch, MaxTerms: cfg.SelectorTerms, NamespaceWatchMax: cfg.NamespaceWatchMax, RESTClients: r.restClients, Mapper: restMapper,
			Namespaces: namespaces, PartitionOf: cfg.Ring.NamespacePartition, FieldSelectors: ownedFieldSelectors(), SelectedWatches: sets.New(cfg.SelectedWatches...),
			Resync: kcmapp.ResyncPeriod(c)(), Transform: trimManagedFields,
		}); err != nil {
			return nil, fmt.Errorf("owned cache: %w", err)
		}
	}
	r.partitionSet = newPartitionSet(r)
	return r, nil
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
			klog.ErrorS(nil, "Not running the storage-version-migrator: the fleet cannot give it the garbage collector's graph yet (docs/controllers.md)", "controller", name)
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

// Run runs one piece until ctx is cancelled and returns once the piece can
// no longer act: a singleton once its controllers have returned; a
// partition once its write fence is closed and the writes already sent are
// answered (its controllers, fenced, may still be winding down).
// Run ignores the authority it is handed: every piece's clients check the
// one NewRuntime was given, the same replica's.
func (r *Runtime) Run(ctx context.Context, piece shard.Piece, _ shard.Authority) error {
	ctx = klog.NewContext(ctx, withoutReregistrationErrors(klog.FromContext(ctx)))
	if !piece.IsPartition() {
		return r.runSingleton(ctx, piece)
	}
	return r.partitionSet.run(ctx, piece)
}

// Prepare tells the partition set which partition pieces a step starts
// together (shard.Preparer), so that it gains them in one reconcile, all
// loaded into the owned cache at once.
func (r *Runtime) Prepare(pieces []shard.Piece) {
	var partitions []int
	for _, piece := range pieces {
		if piece.IsPartition() {
			partitions = append(partitions, piece.Partition())
		}
	}
	if len(partitions) > 0 {
		r.partitionSet.prepare(partitions)
	}
}

// Revoke refuses the stopped piece's new writes at once (shard.Revoker):
// its Run closes the same gate and waits for the writes in flight, but only
// once its goroutine gets there, and a replica whose authority came back
// in between could otherwise send a stopped piece's write.
func (r *Runtime) Revoke(piece shard.Piece) {
	if piece.IsPartition() {
		r.partitions.Revoke(piece.Partition())
		return
	}
	if run, ok := r.singletonRuns.Load(piece); ok {
		run.(*partitionFence).Revoke(0)
	}
}

// partitionControllers are the partition controllers the flags enable,
// but for the token controller, which KCM builds by hand
// (newTokensController).
func (r *Runtime) partitionControllers() map[string]*kcmapp.ControllerDescriptor {
	descriptors := map[string]*kcmapp.ControllerDescriptor{}
	for name, e := range Catalog {
		if e.Kind == Partition && name != names.ServiceAccountTokenController {
			descriptors[name] = r.descriptors[name]
		}
	}
	return descriptors
}

// buildPartitionControllers builds the partition controllers on cc, the
// token controller first, as KCM starts it. They are built one at a time,
// so that factory's census says which controller asked for which
// informer.
func (r *Runtime) buildPartitionControllers(ctx context.Context, cc kcmapp.ControllerContext, factory *informers.PieceFactory) ([]kcmapp.Controller, error) {
	defer factory.Building("")
	var built []kcmapp.Controller
	if r.enabled(names.ServiceAccountTokenController) {
		factory.Building(names.ServiceAccountTokenController)
		tokens, err := r.newTokensController(ctx, cc)
		if err != nil {
			return nil, err
		}
		built = append(built, tokens)
	}
	descriptors := r.partitionControllers()
	order := make([]string, 0, len(descriptors))
	for name := range descriptors {
		order = append(order, name)
	}
	sort.Strings(order)
	for _, name := range order {
		factory.Building(name)
		one, err := kcmapp.BuildControllers(ctx, cc, map[string]*kcmapp.ControllerDescriptor{name: descriptors[name]}, nil, ignoreHealthChecks{})
		if err != nil {
			return nil, err
		}
		built = append(built, one...)
	}
	return built, nil
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
	klog.V(2).InfoS("Informers synced", "for", kind, "took", time.Since(start).Round(time.Millisecond))
}

type controllerFunc struct {
	name string
	run  func(context.Context)
}

func (c controllerFunc) Name() string            { return c.name }
func (c controllerFunc) Run(ctx context.Context) { c.run(ctx) }

// ignoreHealthChecks: per-controller health checks of pieces come and go
// with the pieces; /healthz reports the replica's own health instead.
type ignoreHealthChecks struct{}

func (ignoreHealthChecks) AddHealthChecker(...healthz.HealthChecker) {}

var _ shard.Revoker = (*Runtime)(nil)
