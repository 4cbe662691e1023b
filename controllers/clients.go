package controllers

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// sharedLimiterBuilder is the ControllerClientBuilder of a replica's
// controllers. Every client built from it gets the budget it would get in
// kube-controller-manager, including the raises a controller makes to the
// config it is handed (the namespace controller multiplies its QPS by 20
// and its burst by 100), and every client built for one controller name
// with the same limits shares one rate limiter, whichever piece builds it:
// a fleet of one spends what one KCM spends. It also tags requests with the
// replica identity (for audit) and refuses writes once the replica's
// authority has run out. The builder of partition pieces (partitions set)
// also refuses writes into namespaces of partitions this replica does not
// serve.
type sharedLimiterBuilder struct {
	*limiterPool
	partitions namespaceGates
	// perClient: every client built gets its own rate limiter, as in KCM
	// (client-go makes one per NewForConfig when a config carries none).
	// For singleton pieces, which run once in the fleet: nothing to share,
	// and sharing would merge budgets KCM keeps apart (node-ipam and
	// node-lifecycle both build "node-controller" clients).
	perClient bool
	// run, for a singleton piece's clients: writes end with the run (see
	// startSingleton).
	run *writeGate
	// piece: what its clients act for, named in their user agent
	// (membership.PieceComponent); "" for clients of no piece.
	piece string
}

// limiterPool is what the builders of one replica share.
type limiterPool struct {
	logger   klog.Logger
	inner    clientbuilder.ControllerClientBuilder
	identity string
	fence    shard.Authority

	mu       sync.Mutex
	configs  map[string]*restclient.Config
	limiters map[budgetKey]flowcontrol.RateLimiter
	// ownLimiters counts the clients built with a limiter of their own.
	ownLimiters map[budgetKey]int
	// clients: one clientset per controller name (and fencing) for every
	// piece. A clientset is ~50 REST clients; 64 partition pieces each
	// building their own for ~20 controllers held 13 MB of REST clients.
	clients map[string]kubernetes.Interface
	// writes: the transport each controller name's writes go out on, made
	// once per name; nil when the replica has no authority to check.
	writes      *writeTransports
	writeByName map[string]http.RoundTripper
}

// budgetKey names one client budget of a replica: the clients of one
// controller name built with the same limits.
type budgetKey struct {
	name  string
	qps   float32
	burst int
}

func newSharedLimiterBuilder(logger klog.Logger, inner clientbuilder.ControllerClientBuilder, identity string, fence shard.Authority) *sharedLimiterBuilder {
	pool := &limiterPool{logger: logger, inner: inner, identity: identity, fence: fence}
	if fence != nil {
		pool.writes = newWriteTransports(logger, fence)
	}
	return &sharedLimiterBuilder{limiterPool: pool}
}

// forPartitions is the same builder (same limiters) whose clients write
// into a namespace through the gate of its partition's run (the partition
// table).
func (b *sharedLimiterBuilder) forPartitions(gates namespaceGates) *sharedLimiterBuilder {
	return &sharedLimiterBuilder{limiterPool: b.limiterPool, partitions: gates, piece: membership.PartitionControllers}
}

// forSingletons is the same builder giving every client its own limiter.
func (b *sharedLimiterBuilder) forSingletons() *sharedLimiterBuilder {
	return &sharedLimiterBuilder{limiterPool: b.limiterPool, perClient: true}
}

// forSingletonRun is the singleton builder whose clients write for piece
// only while run is open.
func (b *sharedLimiterBuilder) forSingletonRun(run *writeGate, piece shard.Piece) *sharedLimiterBuilder {
	return &sharedLimiterBuilder{limiterPool: b.limiterPool, perClient: b.perClient, run: run, piece: string(piece)}
}

// Config returns a config whose rate limiter is chosen when a client is
// built from it, from the QPS and burst the config has then. client-go
// ignores QPS and Burst when a config carries a RateLimiter, so a limiter
// fixed here would silently drop what the controller did to the config.
func (b *sharedLimiterBuilder) Config(name string) (*restclient.Config, error) {
	// One inner config per name: with service account credentials each
	// inner call reads (or creates) a ServiceAccount, and every piece asks.
	b.mu.Lock()
	cached, ok := b.configs[name]
	b.mu.Unlock()
	if !ok {
		cfg, err := b.inner.Config(name)
		if err != nil {
			return nil, err
		}
		b.mu.Lock()
		if b.configs == nil {
			b.configs = map[string]*restclient.Config{}
		}
		b.configs[name] = cfg
		cached = cfg
		b.mu.Unlock()
	}
	write, err := b.writeTransport(name, cached)
	if err != nil {
		return nil, err
	}
	cfg := restclient.CopyConfig(cached)
	cfg.RateLimiter = nil
	var budget *clientBudget
	if !b.perClient {
		budget = &clientBudget{pool: b.limiterPool, name: name, config: cfg}
		cfg.RateLimiter = budget
	}
	component := name
	if b.piece != "" {
		component = membership.PieceComponent(b.piece, name)
	}
	cfg.UserAgent = membership.UserAgent(b.identity, component)
	fence, partitions, run := b.fence, b.partitions, b.run
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		// Called once per client built from cfg (or a copy of it), after
		// the controller has set the limits it wants.
		switch {
		case budget != nil && cfg.RateLimiter == budget:
			budget.bind()
		case cfg.RateLimiter == nil:
			b.recordOwnLimiter(name, cfg.QPS, cfg.Burst)
		}
		return fencedRoundTripper{next: rt, write: write, fence: fence, partitions: partitions, run: run}
	})
	return cfg, nil
}

// writeTransport is the transport the writes of controller name go out
// on, built from the name's inner config the first time it is asked for.
func (p *limiterPool) writeTransport(name string, cfg *restclient.Config) (http.RoundTripper, error) {
	if p.writes == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rt, ok := p.writeByName[name]; ok {
		return rt, nil
	}
	rt, err := p.writes.forConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller client %q: %w", name, err)
	}
	if p.writeByName == nil {
		p.writeByName = map[string]http.RoundTripper{}
	}
	p.writeByName[name] = rt
	return rt, nil
}

// recordOwnLimiter counts a client built with a limiter of its own (made
// by client-go from the config's limits), for tests and diagnosis.
func (p *limiterPool) recordOwnLimiter(name string, qps float32, burst int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ownLimiters == nil {
		p.ownLimiters = map[budgetKey]int{}
	}
	p.ownLimiters[budgetKey{name: name, qps: qps, burst: burst}]++
}

// limiter is the replica's rate limiter for one client budget, made on
// first use. Limits are read as client-go reads them when a config has no
// RateLimiter: QPS 0 means client-go's defaults, a negative QPS no limit.
func (p *limiterPool) limiter(name string, qps float32, burst int) flowcontrol.RateLimiter {
	if qps == 0 {
		qps = restclient.DefaultQPS
		if burst == 0 {
			burst = restclient.DefaultBurst
		}
	}
	key := budgetKey{name: name, qps: qps, burst: burst}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.limiters[key]; ok {
		return l
	}
	if p.limiters == nil {
		p.limiters = map[budgetKey]flowcontrol.RateLimiter{}
	}
	var l flowcontrol.RateLimiter
	if qps < 0 {
		l = flowcontrol.NewFakeAlwaysRateLimiter()
	} else {
		l = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	p.limiters[key] = l
	return l
}

// budgets lists the client budgets made so far: name -> limits.
func (p *limiterPool) budgets() []budgetKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]budgetKey, 0, len(p.limiters))
	for k := range p.limiters {
		out = append(out, k)
	}
	return out
}

// clientBudget is the RateLimiter of one config handed out by Config. It
// binds to the replica's limiter for the config's name and limits when the
// first client is built from the config (or, failing that, on first use),
// so QPS and Burst set by the controller after Config returned take effect.
// Clients built from one config share its binding: a controller that
// changes the limits between two clients of one config gets the first.
type clientBudget struct {
	pool   *limiterPool
	name   string
	config *restclient.Config

	once  sync.Once
	bound flowcontrol.RateLimiter
}

func (c *clientBudget) bind() flowcontrol.RateLimiter {
	c.once.Do(func() { c.bound = c.pool.limiter(c.name, c.config.QPS, c.config.Burst) })
	return c.bound
}

func (c *clientBudget) TryAccept() bool                { return c.bind().TryAccept() }
func (c *clientBudget) Accept()                        { c.bind().Accept() }
func (c *clientBudget) QPS() float32                   { return c.bind().QPS() }
func (c *clientBudget) Wait(ctx context.Context) error { return c.bind().Wait(ctx) }

// Stop does nothing: the limiter is shared by every client of the budget.
func (c *clientBudget) Stop() {}

func (b *sharedLimiterBuilder) ConfigOrDie(name string) *restclient.Config {
	cfg, err := b.Config(name)
	if err != nil {
		b.logger.Error(err, "Building a client config", "controller", name)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	return cfg
}

func (b *sharedLimiterBuilder) Client(name string) (kubernetes.Interface, error) {
	if b.perClient {
		// As KCM: a new client, with its own limiter, per call.
		cfg, err := b.Config(name)
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(cfg)
	}
	key := name
	if b.partitions != nil {
		key = "partitions/" + name
	}
	b.mu.Lock()
	c, ok := b.clients[key]
	b.mu.Unlock()
	if ok {
		return c, nil
	}
	cfg, err := b.Config(name)
	if err != nil {
		return nil, err
	}
	c, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if existing, ok := b.clients[key]; ok {
		return existing, nil
	}
	if b.clients == nil {
		b.clients = map[string]kubernetes.Interface{}
	}
	b.clients[key] = c
	return c, nil
}

func (b *sharedLimiterBuilder) ClientOrDie(name string) kubernetes.Interface {
	c, err := b.Client(name)
	if err != nil {
		b.logger.Error(err, "Building a client", "controller", name)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	return c
}

func (b *sharedLimiterBuilder) DiscoveryClient(name string) (discovery.DiscoveryInterface, error) {
	cfg, err := b.Config(name)
	if err != nil {
		return nil, err
	}
	// As KCM's client builders: discovery makes many requests rarely, with
	// its own limiter.
	cfg.RateLimiter, cfg.QPS, cfg.Burst = nil, 20, 200
	return discovery.NewDiscoveryClientForConfig(cfg)
}

func (b *sharedLimiterBuilder) DiscoveryClientOrDie(name string) discovery.DiscoveryInterface {
	c, err := b.DiscoveryClient(name)
	if err != nil {
		b.logger.Error(err, "Building a discovery client", "controller", name)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	return c
}
