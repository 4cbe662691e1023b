package controllers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/healthz"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	clientinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/controller"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// Fence is the replica's authority (membership.Member): writes are refused
// once it is no longer valid.
type Fence interface{ Valid() bool }

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
	// Partition pieces build their clients here: same limiters, plus the
	// partition write fence.
	partitions                             *partitionFence
	partitionRootBuilder, partitionBuilder *sharedLimiterBuilder
	// draining: partitions whose last instance on this replica released
	// them (fence closed) while some of its controllers still return;
	// closed when they have.
	drainingMu     sync.Mutex
	draining       map[int]chan struct{}
	informerConfig *restclient.Config
	restClients    *informers.RESTClients
	plainClient    kubernetes.Interface
	metadataClient metadata.Interface
	restMapper     *restmapper.DeferredDiscoveryRESTMapper
	shared         clientinformers.SharedInformerFactory
	sharedStop     <-chan struct{}
	metrics        *controllers.ControllerManagerMetrics

	debugMu sync.RWMutex
	debug   map[string]http.Handler // controller name -> its debugging handler
}

// DebugHandler serves /debug/controllers/NAME/... for the debuggable
// controllers this replica runs now (the garbage collector's graph), as
// KCM does; a controller that moved away answers 404 here.
func (r *Runtime) DebugHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, debugPrefix)
		if !ok {
			http.NotFound(w, req)
			return
		}
		name, _, _ := strings.Cut(rest, "/")
		r.debugMu.RLock()
		h := r.debug[name]
		r.debugMu.RUnlock()
		if h == nil {
			http.Error(w, fmt.Sprintf("controller %q does not run on this replica", name), http.StatusNotFound)
			return
		}
		http.StripPrefix(debugPrefix+name, h).ServeHTTP(w, req)
	})
}

// debugPrefix is where KCM mounts controllers' debugging handlers.
const debugPrefix = "/debug/controllers/"

func (r *Runtime) registerDebug(built []kcmapp.Controller) func() {
	var names []string
	r.debugMu.Lock()
	defer r.debugMu.Unlock()
	for _, c := range built {
		d, ok := c.(controller.Debuggable)
		if !ok {
			continue
		}
		if h := d.DebuggingHandler(); h != nil {
			if r.debug == nil {
				r.debug = map[string]http.Handler{}
			}
			r.debug[c.Name()] = h
			names = append(names, c.Name())
		}
	}
	return func() {
		r.debugMu.Lock()
		defer r.debugMu.Unlock()
		for _, n := range names {
			delete(r.debug, n)
		}
	}
}

// NewRuntime prepares the replica-wide parts: client builders whose clients
// share one rate limiter per controller across all pieces (so a fleet of one
// spends exactly what kube-controller-manager spends), one RESTMapper, and
// one factory for cluster-scoped kinds (and, in filtered-watch mode, for
// every kind). mode must be resolved (informers.Resolve).
func NewRuntime(ctx context.Context, c *kcmconfig.CompletedConfig, identity string, ring shard.RingConfig, mode informers.Mode, fence Fence) (*Runtime, error) {
	descriptors := Descriptors()
	if err := Check(descriptors); err != nil {
		return nil, err
	}
	rootBuilder := newSharedLimiterBuilder(clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}, identity, fence)
	builder := rootBuilder
	if c.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		builder = newSharedLimiterBuilder(clientbuilder.NewDynamicClientBuilder(restclient.AnonymousClientConfig(c.Kubeconfig), c.Client.CoreV1(), "kube-system"), identity, fence)
	}
	partitions := newPartitionFence(ring.NamespacePartition)
	informerConfig, err := rootBuilder.Config("shared-informers")
	if err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	plain, err := kubernetes.NewForConfig(informerConfig)
	if err != nil {
		return nil, fmt.Errorf("client for informers: %w", err)
	}
	metadataConfig, err := rootBuilder.Config("metadata-informers")
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	metadataClient, err := metadata.NewForConfig(metadataConfig)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	discoveryClient, err := rootBuilder.DiscoveryClient("controller-discovery")
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(discoveryClient))
	go func() {
		ticker := time.NewTicker(30 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				restMapper.Reset()
			}
		}
	}()
	controllers.Register()
	registerMetrics()
	memberInfo.WithLabelValues(identity, string(mode)).Set(1)
	r := &Runtime{
		config: c, identity: identity, descriptors: descriptors, ring: ring, mode: mode,
		rootBuilder: rootBuilder, singletonBuilder: builder.forSingletons(), informerConfig: informerConfig,
		partitions:           partitions,
		partitionRootBuilder: rootBuilder.forPartitions(partitions),
		partitionBuilder:     builder.forPartitions(partitions),
		draining:             map[int]chan struct{}{},
		restClients:          informers.NewRESTClients(informerConfig),
		plainClient:          plain, metadataClient: metadataClient, restMapper: restMapper,
		shared:     clientinformers.NewSharedInformerFactoryWithOptions(plain, kcmapp.ResyncPeriod(c)(), clientinformers.WithTransform(trimManagedFields)),
		sharedStop: ctx.Done(),
		metrics:    controllers.NewControllerManagerMetrics("kube-controller-manager"),
	}
	go func() {
		<-ctx.Done()
		r.shared.Shutdown()
	}()
	return r, nil
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
// partition once its write fence is closed, the writes already sent are
// answered, and the controllers that write cluster-scoped objects have
// returned. The others may still be winding down (their writes refused);
// they release the piece's informers when they return, and a new instance
// of the same partition on this replica waits for them.
func (r *Runtime) Run(ctx context.Context, piece shard.Piece, _ shard.Fence) error {
	ctx = klog.NewContext(ctx, withoutReregistrationErrors(klog.FromContext(ctx)))
	if piece.IsPartition() {
		if !r.waitDrained(ctx, piece.Partition()) {
			return nil
		}
	}
	cc, shutdown, err := r.controllerContext(ctx, piece)
	if err != nil {
		return err
	}
	cleanupNow := true
	var cleanups []func()
	defer func() {
		if cleanupNow {
			for _, c := range cleanups {
				c()
			}
		}
	}()
	cleanups = append(cleanups, shutdown)
	descriptors := map[string]*kcmapp.ControllerDescriptor{}
	var tokens kcmapp.Controller
	if piece.IsPartition() {
		for name, e := range Catalog {
			if e.Kind == Partition && name != names.ServiceAccountTokenController {
				descriptors[name] = r.descriptors[name]
			}
		}
		// KCM builds the token controller by hand, with the root client,
		// and starts it before the others: so does a partition piece.
		if r.enabled(names.ServiceAccountTokenController) {
			if tokens, err = r.newTokensController(ctx, cc); err != nil {
				return err
			}
		}
	} else {
		descriptors[piece.Name()] = r.descriptors[piece.Name()]
	}
	built, err := kcmapp.BuildControllers(ctx, cc, descriptors, nil, ignoreHealthChecks{})
	if err != nil {
		return fmt.Errorf("building controllers of %s: %w", piece, err)
	}
	if tokens != nil {
		built = append([]kcmapp.Controller{tokens}, built...)
	}
	cleanups = append([]func(){r.registerDebug(built)}, cleanups...)
	if piece.IsPartition() {
		r.partitions.Open(piece.Partition())
	}
	cc.InformerFactory.Start(ctx.Done())
	cc.ObjectOrMetadataInformerFactory.Start(ctx.Done())
	close(cc.InformersStarted)
	go observeInformerSync(ctx, piece, cc)
	klog.InfoS("Piece controllers running", "piece", piece, "controllers", len(built))
	if !piece.IsPartition() {
		if len(built) == 0 {
			// As KCM: nothing to run still holds the piece until it moves.
			<-ctx.Done()
			return nil
		}
		// No shutdown timeout: a singleton is stopped only when all its
		// controllers have returned, or another replica could start them
		// while they run.
		kcmapp.RunControllers(ctx, cc, built, kcmapp.ControllerStartJitter, 0)
		return nil
	}

	var fenced, awaited []kcmapp.Controller
	for _, c := range built {
		if Catalog[c.Name()].Has(WritesClusterScoped) {
			awaited = append(awaited, c)
		} else {
			fenced = append(fenced, c)
		}
	}
	fencedDone := make(chan struct{})
	go func() {
		defer close(fencedDone)
		kcmapp.RunControllers(ctx, cc, fenced, kcmapp.ControllerStartJitter, 0)
	}()
	kcmapp.RunControllers(ctx, cc, awaited, kcmapp.ControllerStartJitter, 0)
	<-ctx.Done()
	p := piece.Partition()
	stopping := time.Now()
	// No timeout: a write in flight is answered or fails; until then the
	// piece has not stopped.
	if err := r.partitions.Close(context.Background(), p); err != nil {
		return err
	}
	select {
	case <-fencedDone:
		return nil
	default:
	}
	cleanupNow = false
	r.setDraining(p, fencedDone)
	go func() {
		<-fencedDone
		for _, c := range cleanups {
			c()
		}
		r.clearDraining(p, fencedDone)
		klog.V(2).InfoS("Fenced controllers of a released partition returned", "piece", piece, "after", time.Since(stopping).Round(time.Millisecond))
	}()
	return nil
}

// waitDrained waits for the controllers of a previous instance of
// partition p on this replica to return; false if ctx ended first.
func (r *Runtime) waitDrained(ctx context.Context, p int) bool {
	r.drainingMu.Lock()
	ch := r.draining[p]
	r.drainingMu.Unlock()
	if ch == nil {
		return true
	}
	klog.InfoS("Waiting for the previous instance of the partition to return", "partition", p)
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runtime) setDraining(p int, ch chan struct{}) {
	r.drainingMu.Lock()
	defer r.drainingMu.Unlock()
	r.draining[p] = ch
}

func (r *Runtime) clearDraining(p int, ch chan struct{}) {
	r.drainingMu.Lock()
	defer r.drainingMu.Unlock()
	if r.draining[p] == ch {
		delete(r.draining, p)
	}
}

// observeInformerSync records how long the piece's informers took to sync
// (nothing, if the piece stops first).
func observeInformerSync(ctx context.Context, piece shard.Piece, cc kcmapp.ControllerContext) {
	start := time.Now()
	for _, ok := range cc.InformerFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return
		}
	}
	kind := "partition"
	if !piece.IsPartition() {
		kind = piece.Name()
	}
	informerSync.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	klog.V(2).InfoS("Piece informers synced", "piece", piece, "took", time.Since(start).Round(time.Millisecond))
}

// controllerContext builds the ControllerContext of a piece. A singleton
// gets its own cluster-wide informers (and the garbage collector its own
// graph), as one KCM would; a partition gets the sharded PieceFactory.
func (r *Runtime) controllerContext(ctx context.Context, piece shard.Piece) (kcmapp.ControllerContext, func(), error) {
	resync := kcmapp.ResyncPeriod(r.config)
	builder := r.singletonBuilder
	if piece.IsPartition() {
		builder = r.partitionBuilder
	}
	cc := kcmapp.ControllerContext{
		ClientBuilder:            builder,
		ComponentConfig:          r.config.ComponentConfig,
		RESTMapper:               r.restMapper,
		InformersStarted:         make(chan struct{}),
		ResyncPeriod:             resync,
		ControllerManagerMetrics: r.metrics,
	}
	if piece.IsPartition() {
		p := piece.Partition()
		pc := informers.PieceConfig{
			Mode: r.mode, Client: r.plainClient, RESTClients: r.restClients,
			Shared: r.shared, SharedStop: r.sharedStop, Mapper: r.restMapper,
			InPiece: func(ns string) bool { return r.ring.NamespacePartition(ns) == p },
			Resync:  resync(), Transform: trimManagedFields,
		}
		if r.mode == informers.ModeShardedWatch {
			sharded, err := kubernetes.NewForConfig(informers.ShardedConfig(r.informerConfig, shard.ShardSelector(p, r.ring.Partitions)))
			if err != nil {
				return cc, nil, fmt.Errorf("sharded client of %s: %w", piece, err)
			}
			pc.ShardedClient = sharded
		}
		factory, err := informers.NewPieceFactory(pc)
		if err != nil {
			return cc, nil, fmt.Errorf("informers of %s: %w", piece, err)
		}
		metadataFactory := metadatainformer.NewFilteredSharedInformerFactory(r.metadataClient, resync(), "", nil)
		cc.InformerFactory = factory
		cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(factory, metadataFactory)
		return cc, func() { factory.Shutdown(); metadataFactory.Shutdown() }, nil
	}
	typed := clientinformers.NewSharedInformerFactoryWithOptions(r.plainClient, resync(), clientinformers.WithTransform(trimManagedFields))
	metadataFactory := metadatainformer.NewSharedInformerFactoryWithOptions(r.metadataClient, resync(), metadatainformer.WithTransform(trimManagedFields))
	cc.InformerFactory = typed
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(typed, metadataFactory)
	if piece.Name() == names.GarbageCollectorController && cc.ComponentConfig.GarbageCollectorController.EnableGarbageCollector {
		ignored := map[schema.GroupResource]struct{}{}
		for _, gr := range cc.ComponentConfig.GarbageCollectorController.GCIgnoredResources {
			ignored[schema.GroupResource{Group: gr.Group, Resource: gr.Resource}] = struct{}{}
		}
		cc.GraphBuilder = garbagecollector.NewDependencyGraphBuilder(ctx, r.metadataClient, r.restMapper, ignored, cc.ObjectOrMetadataInformerFactory, cc.InformersStarted)
	}
	return cc, func() { typed.Shutdown(); metadataFactory.Shutdown() }, nil
}

// newTokensController is KCM's newServiceAccountTokenController (it is not
// exported): the token controller with the root client.
func (r *Runtime) newTokensController(ctx context.Context, cc kcmapp.ControllerContext) (kcmapp.Controller, error) {
	keyFile := cc.ComponentConfig.SAController.ServiceAccountKeyFile
	if keyFile == "" {
		return nil, nil
	}
	privateKey, err := keyutil.PrivateKeyFromFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the service account signing key: %w", err)
	}
	var rootCA []byte
	if file := cc.ComponentConfig.SAController.RootCAFile; file != "" {
		if rootCA, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("reading root-ca-file: %w", err)
		}
	} else {
		cfg, err := r.partitionRootBuilder.Config("tokens-controller")
		if err != nil {
			return nil, err
		}
		rootCA = cfg.CAData
	}
	client, err := r.partitionRootBuilder.Client("tokens-controller")
	if err != nil {
		return nil, err
	}
	generator, err := serviceaccount.JWTTokenGenerator(serviceaccount.LegacyIssuer, privateKey)
	if err != nil {
		return nil, fmt.Errorf("building the token generator: %w", err)
	}
	tc, err := serviceaccountcontroller.NewTokensController(klog.FromContext(ctx),
		cc.InformerFactory.Core().V1().ServiceAccounts(), cc.InformerFactory.Core().V1().Secrets(), client,
		serviceaccountcontroller.TokensControllerOptions{TokenGenerator: generator, RootCA: rootCA})
	if err != nil {
		return nil, fmt.Errorf("creating the tokens controller: %w", err)
	}
	workers := int(cc.ComponentConfig.SAController.ConcurrentSATokenSyncs)
	return controllerFunc{name: names.ServiceAccountTokenController, run: func(ctx context.Context) { tc.Run(ctx, workers) }}, nil
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
