package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	genericcontrollermanager "k8s.io/controller-manager/app"
	controllerhealthz "k8s.io/controller-manager/pkg/healthz"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"

	"github.com/fleet-controller-manager/fleet-controller-manager/controllers"
	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// membershipQPS keeps Lease renewals off the controllers' rate limiters: a
// replica whose controllers are busy must still renew on time.
const (
	membershipQPS   = 20
	membershipBurst = 40
)

// kcmLeaderLease is the kube-controller-manager leader Lease the fleet holds,
// from KCM's own leader election flags (nil with --leader-elect=false).
func kcmLeaderLease(ctx context.Context, le componentbaseconfig.LeaderElectionConfiguration) (*membership.LeaderLeaseConfig, error) {
	if !le.LeaderElect {
		klog.FromContext(ctx).Info("Not holding kube-controller-manager's leader lease (--leader-elect=false): nothing keeps a kube-controller-manager from running beside the fleet")
		return nil, nil
	}
	if le.ResourceLock != resourcelock.LeasesResourceLock {
		return nil, fmt.Errorf("--leader-elect-resource-lock=%s: kube-controller-manager's leader election must use %q for the fleet to hold it", le.ResourceLock, resourcelock.LeasesResourceLock)
	}
	cfg := &membership.LeaderLeaseConfig{
		Namespace: le.ResourceNamespace, Name: le.ResourceName,
		LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("--leader-elect-*: %w", err)
	}
	return cfg, nil
}

// run is KCM's Run with leader election replaced by fleet membership, in
// named phases: KCM's configuration and events pipeline, the membership,
// the runner of the pieces (the controllers' runtime), the manager that
// runs what the fleet gives this replica, secure serving, and then the
// membership and the manager until either ends.
func run(ctx context.Context, kcm *options.KubeControllerManagerOptions, fleet *FleetOptions, newRunner RunnerBuilder) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "version", versionString(), "identity", fleet.Identity, "fleet", fleet.Name, "namespace", fleet.Namespace)
	c, err := kcmConfig(kcm, fleet.Identity)
	if err != nil {
		return err
	}
	defer c.EventBroadcaster.Shutdown()
	member, leaderLease, err := newMember(ctx, c, fleet)
	if err != nil {
		return err
	}
	// Membership outlives the manager: leaving needs the Lease client, and
	// the runtime's informers outlive every piece.
	memberCtx, cancelMember := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelMember()
	pieces, err := newRunner(ctx, RunnerEnv{Lifetime: memberCtx, KCM: c, Fleet: fleet, Member: member})
	if err != nil {
		return err
	}
	ring := fleet.Ring
	ring.Colocated = pieces.Colocated
	manager, err := shard.NewManager(member, pieces.Runner, ring, pieces.Pieces)
	if err != nil {
		return err
	}
	manager.WeightHold, manager.NewNamespaces = fleet.WeightHold, pieces.NewNamespaces
	manager.ClientQPS = c.Kubeconfig.QPS
	if fleet.PlacementByWeight {
		manager.NamespacesAdded = pieces.NamespacesAdded
	}
	if err := serve(ctx, c, fleet, member, leaderLease, manager, pieces.Runner); err != nil {
		return err
	}
	return runFleet(ctx, memberCtx, member, manager)
}

// kcmConfig is KCM's completed configuration from its flags, with configz
// registered and events recorded, as KCM's Run starts. Its client, which
// creates the controllers' ServiceAccounts and requests their tokens, names
// the replica in its user agent ("controller-manager"), as every other
// client of the replica does.
func kcmConfig(kcm *options.KubeControllerManagerOptions, identity string) (*kcmconfig.CompletedConfig, error) {
	config, err := kcm.Config(context.Background(), kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return nil, err
	}
	clientConfig := restclient.CopyConfig(config.Kubeconfig)
	clientConfig.UserAgent = membership.UserAgent(identity, "controller-manager")
	if config.Client, err = kubernetes.NewForConfig(clientConfig); err != nil {
		return nil, fmt.Errorf("building the controller manager's client: %w", err)
	}
	c := config.Complete()
	if err := registerConfigz(c); err != nil {
		return nil, err
	}
	c.EventBroadcaster.StartStructuredLogging(0)
	c.EventBroadcaster.StartRecordingToSink(&corev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	return c, nil
}

// newMember is this replica's membership, with a client of its own (Lease
// renewals must not wait behind the controllers' rate limiters) and KCM's
// leader Lease when leader election is on.
func newMember(ctx context.Context, c *kcmconfig.CompletedConfig, fleet *FleetOptions) (*membership.Member, *membership.LeaderLeaseConfig, error) {
	membershipConfig := restclient.CopyConfig(c.Kubeconfig)
	membershipConfig.QPS, membershipConfig.Burst = membershipQPS, membershipBurst
	membershipConfig.UserAgent = membership.UserAgent(fleet.Identity, "membership")
	client, err := kubernetes.NewForConfig(membershipConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("building membership client: %w", err)
	}
	leaderLease, err := kcmLeaderLease(ctx, c.ComponentConfig.Generic.LeaderElection)
	if err != nil {
		return nil, nil, err
	}
	if err := fleetPartitions(ctx, membership.NewLeaseStore(client), fleet); err != nil {
		return nil, nil, err
	}
	member, err := membership.New(membership.Config{
		Client: client, Namespace: fleet.Namespace, Fleet: fleet.Name, Identity: fleet.Identity,
		LeaseDuration: fleet.LeaseDuration.D(), RenewDeadline: fleet.RenewDeadline.D(), RetryPeriod: fleet.RetryPeriod.D(),
		LeaderLease: leaderLease,
		Supports:    membership.Supports{Placements: fleet.Placements, StateVersions: fleet.StateVersions},
		Partitions:  fleet.Ring.Partitions,
	})
	return member, leaderLease, err
}

// fleetPartitions sets the partition count to the fleet's
// (shard.FleetPartitions) unless --partitions gave one, reading the
// fleet's Leases until the apiserver answers. Given one that differs from
// the fleet's, it says so: such a replica starts nothing until every
// replica runs one count.
func fleetPartitions(ctx context.Context, store membership.LeaseStore, fleet *FleetOptions) error {
	logger := klog.FromContext(ctx)
	var partitions int
	var from string
	var live bool
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		partitions, from, live, err = shard.ReadFleetPartitions(ctx, store, fleet.Namespace, fleet.Name)
		if err != nil {
			logger.Error(err, "Reading the fleet's partition count; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("reading the fleet's partition count: %w", err)
	}
	switch {
	case fleet.Ring.Partitions == 0:
		fleet.Ring.Partitions = partitions
		logger.Info("Running the fleet's partition count", "partitions", partitions, "from", from)
	case fleet.Ring.Partitions != partitions && live:
		logger.Error(nil, "--partitions differs from the fleet's: this replica starts nothing while a replica of the other count is live", "partitions", fleet.Ring.Partitions, "fleetPartitions", partitions, "from", from)
	default:
		logger.Info("Running the partition count of --partitions", "partitions", fleet.Ring.Partitions)
	}
	return nil
}

// RunnerBuilder builds what runs a replica's pieces, and names every
// piece of the fleet: the controllers' runtime in the product
// (ControllersRunner), recording pieces in the handover tests' own main.
type RunnerBuilder func(ctx context.Context, env RunnerEnv) (Pieces, error)

// RunnerEnv is what a RunnerBuilder builds from.
type RunnerEnv struct {
	// Lifetime is the replica's: it outlives every piece.
	Lifetime context.Context
	KCM      *kcmconfig.CompletedConfig
	Fleet    *FleetOptions
	Member   *membership.Member
}

// Pieces is what a RunnerBuilder built.
type Pieces struct {
	Runner shard.Runner
	// Pieces is every piece of the fleet.
	Pieces []shard.Piece
	// Colocated names the singleton pieces that run on one replica
	// together (shard.RingConfig.Colocated).
	Colocated string
	// NewNamespaces, when set, are the namespaces created within a
	// window, by partition (shard.Manager.NewNamespaces).
	NewNamespaces func(window time.Duration) shard.FreshNamespaces
	// NamespacesAdded, when set, signals new namespaces
	// (shard.Manager.NamespacesAdded).
	NamespacesAdded <-chan struct{}
}

// ControllersRunner runs the pieces with Kubernetes' own controllers.
func ControllersRunner(ctx context.Context, env RunnerEnv) (Pieces, error) {
	c, fleet, member := env.KCM, env.Fleet, env.Member
	probeCtx, cancel := context.WithTimeout(ctx, time.Minute)
	mode, err := informers.Resolve(probeCtx, fleet.InformerMode, c.Kubeconfig)
	cancel()
	if err != nil {
		return Pieces{}, fmt.Errorf("--informer-mode: %w", err)
	}
	klog.FromContext(ctx).Info("Informers of the partition controllers", "informerMode", mode)
	ring := fleet.Ring
	ring.Colocated = controllers.ColocatedSingletons()
	rt, err := controllers.NewRuntime(env.Lifetime, controllers.RuntimeConfig{
		KCM: c, Identity: fleet.Identity, Ring: ring, Mode: mode,
		SelectorTerms: fleet.SelectorTerms, NamespaceWatchMax: fleet.NamespaceWatchMax, SelectedWatches: fleet.SelectedWatches, Authority: member,
		Weights: env.Member.SetWeights, Young: env.Member.SetYoung,
		Loading: env.Member.SetLoading, LoadStuckAfter: fleet.LeaseDuration.D(),
		Replicas: replicasOf(fleet.ShareWorkers.Shares(c.ComponentConfig.Generic.ClientConnection.QPS, fleet.defaultQPS), member),
	})
	if err != nil {
		return Pieces{}, err
	}
	return Pieces{Runner: rt, Pieces: shard.AllPieces(ring.Partitions, rt.Singletons()), Colocated: ring.Colocated, NewNamespaces: rt.NewNamespaces, NamespacesAdded: rt.NamespacesAdded()}, nil
}

// serve starts KCM's secure serving (when configured) with the fleet's
// health, readiness and debug pages.
func serve(ctx context.Context, c *kcmconfig.CompletedConfig, fleet *FleetOptions, member *membership.Member, leaderLease *membership.LeaderLeaseConfig, manager *shard.Manager, runner shard.Runner) error {
	if c.SecureServing == nil {
		return nil
	}
	// Healthy while it renews its own Lease: waiting behind a
	// kube-controller-manager that leads is healthy (a restart would not
	// help), as a KCM standby is.
	healthzHandler := controllerhealthz.NewMutableHealthzHandler(healthz.NamedCheck("fleet-authority", func(*http.Request) error {
		if member.Joining() || member.Renewing() {
			return nil
		}
		return errors.New("lease not renewed within the renew deadline")
	}))
	serveMux := genericcontrollermanager.NewBaseHandler(&c.ComponentConfig.Generic.Debugging, healthzHandler)
	// Ready once joined with authority, running its share, and the whole
	// fleet running the pieces of the view that brought it in: a rolling
	// update then replaces the next replica only after that handover is
	// done (a replica leaving in the middle of it moves pieces back where
	// they came from: shard.Status.TookShare). Once ready it stays ready
	// while it has authority, whatever the others do, so a fleet busy
	// moving pieces does not look unavailable to a PDB.
	serveMux.Handle("/readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := manager.Status()
		switch {
		case member.Joining():
			http.Error(w, "joining the fleet", http.StatusServiceUnavailable)
		case !member.Valid():
			http.Error(w, "no authority: "+member.WhyNoAuthority(), http.StatusServiceUnavailable)
		case st.Settling != "":
			http.Error(w, "running its share; waiting for the fleet to settle on the view: "+st.Settling, http.StatusServiceUnavailable)
		case !st.TookShare:
			http.Error(w, fmt.Sprintf("taking its share of pieces: %d of %d running (%s)", len(st.Running), len(st.Owned), st.Waiting), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	}))
	if rt, ok := runner.(*controllers.Runtime); ok {
		serveMux.UnlistedHandlePrefix("/debug/controllers/", rt.DebugHandler())
		serveMux.UnlistedHandle(controllers.CachePath, rt.CacheHandler())
		serveMux.UnlistedHandle(controllers.InformersPath, rt.InformersHandler())
	}
	// Not the membership client: page views must not delay renewals.
	serveMux.Handle("/debug/fleet", shard.FleetPage(func(ctx context.Context) (shard.FleetStatus, error) {
		store := membership.NewLeaseStore(c.Client)
		st, err := shard.ReadFleet(ctx, store, fleet.Namespace, fleet.Name, fleet.Ring.Partitions)
		if err == nil && leaderLease != nil {
			st.LeaderLease, err = shard.ReadLeaderLease(ctx, store, leaderLease.Namespace, leaderLease.Name, fleet.Namespace, fleet.Name)
		}
		return st, err
	}, manager.Status, loadsOf(runner)))
	handler := genericcontrollermanager.BuildHandlerChain(serveMux, &c.Authorization, &c.Authentication)
	if _, _, err := c.SecureServing.Serve(handler, 0, ctx.Done()); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// loadsOf reads the partition loads in progress on runner, when it runs
// the controllers (the recording pieces of the handover tests load
// nothing).
func loadsOf(runner shard.Runner) func() []shard.LocalLoad {
	return func() []shard.LocalLoad {
		if rt, ok := runner.(*controllers.Runtime); ok {
			return rt.Loads()
		}
		return nil
	}
}

// runFleet runs the membership and the manager until the manager has left
// (ctx ended) or the membership ended on its own.
func runFleet(ctx, memberCtx context.Context, member *membership.Member, manager *shard.Manager) error {
	memberErr := make(chan error, 1)
	go func() { memberErr <- member.Run(memberCtx) }()
	managerCtx, cancelManager := context.WithCancel(ctx)
	defer cancelManager()
	managerErr := make(chan error, 1)
	go func() { managerErr <- manager.Run(managerCtx) }()
	select {
	case err := <-managerErr:
		return err
	case err := <-memberErr:
		// Membership ended on its own: stop every piece before exiting.
		klog.FromContext(ctx).Error(err, "Membership ended; stopping every piece")
		cancelManager()
		<-managerErr
		return fmt.Errorf("membership: %w", err)
	}
}

// replicasOf counts the fleet's live participants, this replica included,
// for sharing the partition controllers' workers (nil when they are not
// shared). A replica builds its partition controllers only after its
// join, by when it has seen every member that may act.
func replicasOf(share bool, member *membership.Member) func() int {
	if !share {
		return nil
	}
	return func() int {
		n := 1
		for _, p := range member.Peers() {
			if p.Participant {
				n++
			}
		}
		return n
	}
}
