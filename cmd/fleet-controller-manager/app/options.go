package app

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleet-controller-manager/fleet-controller-manager/controllers"
	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// FleetOptions replace kube-controller-manager's leader election flags: which
// fleet a replica joins, under which identity, with which Lease timings and
// ring.
type FleetOptions struct {
	Name                                      string
	Namespace                                 string
	Identity                                  string
	LeaseDuration, RenewDeadline, RetryPeriod pflagDuration
	Ring                                      shard.RingConfig
	// InformerMode is how the replica caches its partitions' namespaces.
	InformerMode informers.Mode
	// SelectorTerms: the most namespaces one shard selector names.
	SelectorTerms int
	// NamespaceWatchMax: in namespace-watch, past this many owned
	// namespaces watch every namespace and keep the owned ones.
	NamespaceWatchMax int
	// SelectedWatches: resources whose owned cache watch names the
	// loaded namespaces in a shard selector (sharded-watch).
	SelectedWatches []string
	// ShareWorkers: whether the partition controllers' worker counts are
	// divided among the fleet's replicas.
	ShareWorkers controllers.WorkerSharing
	// defaultQPS is KCM's default --kube-api-qps, for ShareWorkers auto.
	defaultQPS float32
	// Placements are the placements this replica computes and says it
	// supports; the fleet uses the newest every replica supports.
	Placements []string
	// PlacementByWeight keeps shard.PlacementsByWeight in Placements: a
	// fleet whose every replica supports them balances the partitions by
	// what they hold; false drops them (placement by count).
	PlacementByWeight bool
	// WeightHold: how long the load stays uneven before the replica that
	// keeps the weight table moves partitions.
	WeightHold time.Duration
	// StateVersions are the Lease state versions this replica reads and
	// says it reads: all of this release's.
	StateVersions []int
}

// NewFleetOptions returns the defaults.
func NewFleetOptions() *FleetOptions {
	return &FleetOptions{
		Name:          "fleet-controller-manager",
		Namespace:     "kube-system",
		LeaseDuration: pflagDuration(membership.DefaultLeaseDuration),
		RenewDeadline: pflagDuration(membership.DefaultRenewDeadline),
		RetryPeriod:   pflagDuration(membership.DefaultRetryPeriod),
		Ring:          fleetRing(),
		InformerMode:  informers.ModeAuto,
		SelectorTerms: informers.DefaultSelectorTerms,

		NamespaceWatchMax: informers.DefaultNamespaceWatchMax,
		SelectedWatches:   informers.DefaultSelectedWatches,
		ShareWorkers:      controllers.ShareWorkersAuto,
		Placements:        shard.DefaultPlacements,
		PlacementByWeight: true,
		StateVersions:     membership.StateVersions,
	}
}

// fleetRing is the default ring with the partition count left to the
// fleet (0: read from its Leases when the replica starts).
func fleetRing() shard.RingConfig {
	ring := shard.DefaultRingConfig
	ring.Partitions = 0
	return ring
}

// AddFlags registers the fleet flags.
func (o *FleetOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "fleet-name", o.Name, "Name of the fleet: the value of the "+membership.FleetLabel+" label on every member's Lease.")
	fs.StringVar(&o.Namespace, "fleet-namespace", o.Namespace, "Namespace of the members' Leases.")
	fs.StringVar(&o.Identity, "identity", o.Identity, "This replica's name in the fleet and of its Lease (default: $POD_NAME, else hostname plus a random suffix).")
	fs.Var(&o.LeaseDuration, "lease-duration", "How long other replicas wait, from when they last saw this replica's Lease change, before taking over its pieces.")
	fs.Var(&o.RenewDeadline, "renew-deadline", "How long this replica keeps acting after its last successful Lease renewal; it stops every piece when it runs out. Shorter than --lease-duration.")
	fs.Var(&o.RetryPeriod, "retry-period", "Interval between Lease renewals.")
	fs.IntVar(&o.Ring.Partitions, "partitions", o.Ring.Partitions, fmt.Sprintf("Number of namespace partitions: how finely namespaces spread over the replicas. Every replica of a fleet runs the same count. 0: the fleet's, as its members' Leases say (the oldest live member's; %d for a release that does not say), or %d for a new fleet. Set it when creating a fleet; a replica given another count than the fleet's starts nothing.", shard.LegacyPartitions, shard.DefaultRingConfig.Partitions))
	fs.IntVar(&o.Ring.ReplicationFactor, "ring-replication-factor", o.Ring.ReplicationFactor, "Virtual nodes per replica on the consistent-hash ring. Same on every replica.")
	fs.StringVar(&o.Ring.NamespaceHash, "namespace-hash", o.Ring.NamespaceHash, "Hash that places namespaces in partitions: xxhash (even spread) or fnv (the apiserver's shard hash; it puts names that differ only in their last characters in one partition). Same on every replica.")
	fs.Float64Var(&o.Ring.Load, "ring-load", o.Ring.Load, "Bounded-load factor of the ring: no replica owns more than this times the average. Same on every replica.")
	fs.Var(&colocatedShareValue{&o.Ring}, "colocated-partition-share", "Fraction (0 to 1) of an even share of the namespace partitions kept by the replica running the singletons that cache every Pod and every resource's metadata (garbage collector, resourcequota, podgc, ...); the rest go to the other replicas. Default: 1 placing by weight (an even share: a replica's speed at default client limits is how many namespaces its controllers serve), 0.5 placing by count (the replicas' memory closer to equal). Same on every replica.")
	fs.Var(&informerModeValue{&o.InformerMode}, "informer-mode", fmt.Sprintf("How the replica caches the namespaced objects its partition controllers read: %s. sharded-watch: only the owned partitions' namespaces, from one cluster-wide watch per kind filtered on the client, each namespace listed when loaded with a shard selector naming it (feature gate ShardedListAndWatch). namespace-watch: the same, each namespace listed on its own, or past --namespace-watch-max-namespaces at once in one cluster-wide list (any apiserver). filtered-watch: every namespace, as kube-controller-manager. auto = sharded-watch when the apiserver filters by shard selector, else namespace-watch.", informers.Modes))
	fs.IntVar(&o.SelectorTerms, "shard-selector-max-terms", o.SelectorTerms, fmt.Sprintf("Most namespaces one shard selector names (sharded-watch): a replica loading more lists them in several requests. At most %d, the apiserver's limit; the default keeps request URLs near 7 KB.", informers.MaxSelectorTerms))
	fs.StringSliceVar(&o.SelectedWatches, "selected-watch-resources", o.SelectedWatches, "sharded-watch: resources whose one cluster-wide watch names the replica's namespaces in a shard selector, so that kube-apiserver sends the replica only their events; the watch is opened again, from where it stopped, when namespaces join the replica (at most every 500 ms). The others are filtered on the replica. Its URL grows by about 100 bytes per namespace (at most 1,176, past which it names none): leave it empty behind a proxy that limits URLs.")
	fs.IntVar(&o.NamespaceWatchMax, "namespace-watch-max-namespaces", o.NamespaceWatchMax, "namespace-watch: a replica loading more namespaces than this at once (the partitions it gains together) lists each kind in every namespace, once, and keeps only theirs, rather than one list per namespace. 0: always one list per namespace.")
	fs.StringVar((*string)(&o.ShareWorkers), "share-workers", string(o.ShareWorkers), "true: divide the worker counts of the controllers that run on every replica (--concurrent-deployment-syncs, --concurrent-replicaset-syncs, ...) among the fleet's live replicas when they start, rounded up, so the fleet runs about as many workers as one kube-controller-manager with the same flags (fewer status writes for a busy apiserver). false: every replica runs the full counts (faster while each replica's client rate limiter holds its workers back). auto: true when --kube-api-qps is raised above kube-controller-manager's default. See docs/operations.md.")
	fs.BoolVar(&o.PlacementByWeight, "placement-by-weight", o.PlacementByWeight, "Balance the namespace partitions across the replicas by what they hold (objects in each replica's cache, published in its Lease) rather than by count: the first replica by name keeps a table of the partitions' weights, deals new namespaces among the replicas as they appear, and once the busiest replica has held more than 1.1x the mean for --placement-weight-hold, moves the fewest partitions that even it out. Takes effect when every replica of the fleet places by weight. false: an even share of the partitions each, whatever they hold.")
	fs.DurationVar(&o.WeightHold, "placement-weight-hold", time.Minute, "Placing by weight: how long the busiest replica must stay above 1.1x the mean before partitions move. Shorter reacts sooner to a shifting load and moves more often.")
}

// Complete fills in the identity and the placements.
func (o *FleetOptions) Complete() error {
	if !o.PlacementByWeight {
		o.Placements = slices.DeleteFunc(slices.Clone(o.Placements), shard.ByWeight)
	}
	if o.Identity != "" {
		return nil
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		o.Identity = pod
		return nil
	}
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("choosing an identity: %w", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("choosing an identity: %w", err)
	}
	o.Identity = strings.ToLower(host) + "-" + hex.EncodeToString(b[:])
	return nil
}

// Validate reports every invalid fleet flag.
func (o *FleetOptions) Validate() error {
	var errs []error
	ring := o.Ring
	if ring.Partitions == 0 {
		// The fleet's count, read at start (run.go): Validate checks the rest.
		ring.Partitions = shard.DefaultRingConfig.Partitions
	}
	if err := ring.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.WeightHold < time.Second {
		errs = append(errs, fmt.Errorf("--placement-weight-hold must be at least 1s, got %v", o.WeightHold))
	}
	if err := o.ShareWorkers.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--share-workers: %w", err))
	}
	cfg := membership.Config{
		Namespace: o.Namespace, Fleet: o.Name, Identity: o.Identity,
		LeaseDuration: o.LeaseDuration.D(), RenewDeadline: o.RenewDeadline.D(), RetryPeriod: o.RetryPeriod.D(),
	}
	if err := cfg.Validate(); err != nil {
		// The client is wired later; everything else is checked here.
		for _, e := range unwrapJoined(err) {
			if !errors.Is(e, membership.ErrNoStore) {
				errs = append(errs, e)
			}
		}
	}
	if o.SelectorTerms < 1 || o.SelectorTerms > informers.MaxSelectorTerms {
		errs = append(errs, fmt.Errorf("--shard-selector-max-terms must be between 1 and %d (the apiserver's limit), got %d", informers.MaxSelectorTerms, o.SelectorTerms))
	}
	if o.NamespaceWatchMax < 0 {
		errs = append(errs, fmt.Errorf("--namespace-watch-max-namespaces must be at least 0, got %d", o.NamespaceWatchMax))
	}
	return errors.Join(errs...)
}

// informerModeValue makes --informer-mode refuse unknown modes at parse
// time.
type informerModeValue struct{ mode *informers.Mode }

func (v *informerModeValue) String() string { return string(*v.mode) }
func (v *informerModeValue) Type() string   { return "string" }
func (v *informerModeValue) Set(s string) error {
	m, err := informers.ParseMode(s)
	if err != nil {
		return err
	}
	*v.mode = m
	return nil
}

// colocatedShareValue sets the colocated share under every placement:
// unset, placement by count keeps DefaultColocatedShare and placement by
// weight an even share.
type colocatedShareValue struct{ ring *shard.RingConfig }

func (v *colocatedShareValue) String() string { return "" }
func (v *colocatedShareValue) Type() string   { return "float" }
func (v *colocatedShareValue) Set(s string) error {
	share, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want a fraction from 0 to 1: %w", err)
	}
	v.ring.ColocatedShare, v.ring.ColocatedShareByWeight = share, share
	return nil
}

func unwrapJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
