package membership

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Defaults, as client-go's leader election uses for kube-controller-manager.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Config says which fleet a replica joins and how it keeps its Lease.
type Config struct {
	// Client reaches the cluster; its Leases are the store unless Store
	// is set.
	Client kubernetes.Interface
	// Store, when set, is where the Leases are read and written instead
	// (tests put faults in between).
	Store     LeaseStore
	Namespace string
	// Fleet is the fleet name, the value of FleetLabel on every member Lease.
	Fleet string
	// Identity names this replica's Lease: a pod name, or hostname + uuid.
	Identity string
	// LeaseDuration is how long observers wait, from when they last saw a
	// Lease change, before they treat it as expired.
	LeaseDuration time.Duration
	// RenewDeadline is how long, from a successful renewal was sent, this
	// replica may act; it must be shorter than LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between renewals.
	RetryPeriod time.Duration
	// LeaderLease, if set, is kube-controller-manager's leader Lease: the
	// replica holds it for the fleet and acts only while it does (see
	// leaderlease.go).
	LeaderLease *LeaderLeaseConfig
	// Supports is published in the Lease (SupportsAnnotation) for the
	// others to agree on what all of them can run.
	Supports Supports
	// Partitions, when set, is published in the Lease
	// (PartitionsAnnotation): the partition count this replica runs, which
	// a replica joining without --partitions adopts.
	Partitions int
	// Clock is for tests; nil means the real clock.
	Clock clock.WithTicker
}

// WithDefaults fills in unset timings.
func (c Config) WithDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Store == nil && c.Client != nil {
		c.Store = NewLeaseStore(c.Client)
	}
	return c
}

// ErrNoStore is Validate's error for a Config with neither a client nor a
// store (a caller checking flags before it has a client ignores it).
var ErrNoStore = errors.New("no Kubernetes client or lease store")

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, ErrNoStore)
	}
	for _, f := range []struct{ name, value string }{{"namespace", c.Namespace}, {"identity", c.Identity}} {
		for _, msg := range validation.IsDNS1123Subdomain(f.value) {
			errs = append(errs, fmt.Errorf("%s %q: %s", f.name, f.value, msg))
		}
	}
	for _, msg := range validation.IsValidLabelValue(c.Fleet) {
		errs = append(errs, fmt.Errorf("fleet name %q: %s", c.Fleet, msg))
	}
	if c.Fleet == "" {
		errs = append(errs, errors.New("fleet name must not be empty"))
	}
	errs = append(errs, timingErrors("", c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)...)
	if c.LeaderLease != nil {
		if err := c.LeaderLease.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Partitions < 0 || c.Partitions > maxPartitions {
		errs = append(errs, fmt.Errorf("partitions %d: not between 0 and %d", c.Partitions, maxPartitions))
	}
	if c.LeaseDuration > time.Hour {
		errs = append(errs, fmt.Errorf("lease duration %v is over an hour", c.LeaseDuration))
	}
	return errors.Join(errs...)
}

// renewTimeout bounds one renewal request. A renewal answered later than
// LeaseDuration-RenewDeadline after it was sent might have landed after an
// observer declared the Lease expired, so it must not extend authority; half
// of that margin leaves the other half for clock rate differences.
func (c Config) renewTimeout() time.Duration {
	return (c.LeaseDuration - c.RenewDeadline) / 2
}

// LeaderLeaseConfig names kube-controller-manager's leader election Lease
// and the timings KCM uses for it (its --leader-elect-* flags). The fleet
// must be given KCM's own values: it stops acting RenewDeadline after each
// renewal it sent, which is safe only while that is shorter than the lease
// duration a KCM waits before it takes over.
type LeaderLeaseConfig struct {
	Namespace     string
	Name          string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Validate reports every problem of c at once.
func (c LeaderLeaseConfig) Validate() error {
	var errs []error
	for _, f := range []struct{ name, value string }{{"leader lease namespace", c.Namespace}, {"leader lease name", c.Name}} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty", f.name))
		}
	}
	errs = append(errs, timingErrors("leader ", c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)...)
	return errors.Join(errs...)
}

// takeoverWait is how long a record of someone else must stay unchanged
// before this replica takes the Lease: the lease duration, as client-go
// waits, but at least as long as a KCM leader may still act after its last
// renewal was written. client-go's leader acts until a renewal window (one
// retry period, then RenewDeadline of retries) passes without success, and
// its last success may be answered up to its request timeout
// (RenewDeadline/2) after it was written: with KCM's defaults, 17 s rather
// than 15. (KCM standbys wait only the lease duration: two KCMs can overlap
// by those 2 s after a slow answer; the fleet does not.)
func (c LeaderLeaseConfig) takeoverWait() time.Duration {
	return max(c.LeaseDuration, c.RenewDeadline+c.RetryPeriod+c.RenewDeadline/2)
}

// timingErrors checks a Lease's timings as client-go's leader election
// does: 0 < retry period < renew deadline < lease duration. prefix starts
// each message ("" for the member Lease, "leader " for KCM's).
func timingErrors(prefix string, lease, renew, retry time.Duration) []error {
	var errs []error
	if retry <= 0 {
		errs = append(errs, fmt.Errorf("%slease retry period %v must be positive", prefix, retry))
	}
	if renew <= retry {
		errs = append(errs, fmt.Errorf("%slease renew deadline %v must be longer than its retry period %v", prefix, renew, retry))
	}
	if lease <= renew {
		errs = append(errs, fmt.Errorf("%slease duration %v must be longer than its renew deadline %v", prefix, lease, renew))
	}
	return errs
}
