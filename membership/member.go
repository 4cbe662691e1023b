package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Member is one replica's membership of the fleet.
type Member struct {
	cfg         Config
	incarnation string

	changed chan struct{}
	publish chan struct{}

	mu        sync.Mutex
	desired   State
	confirmed State
	// weights: SetWeights's, written with the state (weights.go).
	weights map[int]uint64
	// young: SetYoung's, written with the state (young.go).
	young map[string]uint64
	// loading: the running partitions still loading, since when
	// (SetLoading).
	loading  map[int]time.Time
	seq      uint64
	lease    *coordinationv1.Lease // last written or read own Lease
	deadline time.Time             // authority holds until then
	joinedAt time.Time             // when the last (re)joining write was answered
	joinOver time.Time             // start of the last join that ended (Joining)
	// listWanted: a join began then and wants a list sent after it;
	// listSent: when the last successful list was sent (listLoop).
	listWanted, listSent time.Time
	// unseenRenewals: this member's renewals its Lease watch has not
	// delivered yet, oldest first; watchLagging: it is listing for them
	// (watchlag.go); deliveredOwn: the version of its Lease the watch
	// delivered last.
	unseenRenewals []unseenRenewal
	watchLagging   bool
	deliveredOwn   string
	listWake       chan struct{}
	// renewAsked: the start of the join that asked KCM's leader Lease for
	// a renewal now.
	renewAsked time.Time
	synced     bool
	obs        map[string]*observation
	renewFails int
	leaving    bool

	// logger is Run's context's (klog.Background until Run).
	logger klog.Logger
	// deadlineWake notifies when this member's authority runs out.
	deadlineWake *wakeTimer
	// writeMu serialises Lease writes of the renew loop and Leave.
	writeMu sync.Mutex

	// leader holds kube-controller-manager's leader Lease (nil when not
	// configured).
	leader *leaderLease
	// supports is cfg.Supports encoded ("" when empty: the annotation is
	// not written).
	supports string
}

// New checks cfg and prepares a member; Run joins the fleet.
func New(cfg Config) (*Member, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid membership configuration: %w", err)
	}
	var b [6]byte
	var err error
	if _, err = rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("choosing an incarnation: %w", err)
	}
	RegisterMetrics()
	m := &Member{
		cfg:         cfg,
		incarnation: hex.EncodeToString(b[:]),
		changed:     make(chan struct{}, 1),
		publish:     make(chan struct{}, 1),
		listWake:    make(chan struct{}, 1),
		obs:         map[string]*observation{},
	}
	if len(cfg.Supports.Placements) > 0 || len(cfg.Supports.StateVersions) > 0 {
		if m.supports, err = cfg.Supports.Encode(); err != nil {
			return nil, fmt.Errorf("invalid membership configuration: %w", err)
		}
	}
	m.desired = State{Version: StateVersion, Incarnation: m.incarnation, Joining: true}
	m.deadlineWake = newWakeTimer(cfg.Clock, m.notify)
	m.logger = klog.Background()
	if cfg.LeaderLease != nil {
		m.leader = newLeaderLease(*cfg.LeaderLease, m)
	}
	return m, nil
}

// Identity is this replica's name in the fleet.
func (m *Member) Identity() string { return m.cfg.Identity }

// Incarnation is random per process start.
func (m *Member) Incarnation() string { return m.incarnation }

// Config is the configuration in force, defaults filled in.
func (m *Member) Config() Config { return m.cfg }

// Changed receives a value whenever an observation, the authority or a
// confirmed write changed.
func (m *Member) Changed() <-chan struct{} { return m.changed }

func (m *Member) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Publish sets the state to write; it is written at once (coalesced) and
// with every renewal. Incarnation and Seq are filled in here.
func (m *Member) Publish(s State) {
	m.mu.Lock()
	s.Version, s.Incarnation, s.Seq = StateVersion, m.incarnation, 0
	same := reflect.DeepEqual(s, m.desired)
	m.desired = s
	m.mu.Unlock()
	if !same {
		select {
		case m.publish <- struct{}{}:
		default:
		}
	}
}

// Confirmed is the last state the apiserver accepted from this replica.
func (m *Member) Confirmed() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.confirmed
}

// Authority reports whether this replica may act now, and until when: while
// its own Lease is renewed and, if configured, while its renewal of
// kube-controller-manager's leader Lease holds.
func (m *Member) Authority() (bool, time.Time) {
	m.mu.Lock()
	until := m.deadline
	m.mu.Unlock()
	if m.leader != nil {
		if _, leaderUntil := m.leader.authority(); leaderUntil.Before(until) {
			until = leaderUntil
		}
	}
	now := m.cfg.Clock.Now()
	until = plantedDeadline(until, now)
	return now.Before(until), until
}

// Renewing reports whether this replica's own Lease is renewed within the
// renew deadline (whatever kube-controller-manager's leader Lease says).
func (m *Member) Renewing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Clock.Now().Before(m.deadline)
}

// WhyNoAuthority says why this replica may not act now ("" when it may).
func (m *Member) WhyNoAuthority() string {
	if plantedUnboundedAuthority && m.Valid() {
		return ""
	}
	m.mu.Lock()
	own := m.cfg.Clock.Now().Before(m.deadline)
	m.mu.Unlock()
	if m.leader != nil {
		if why := m.leader.whyNot(); why != "" {
			return why
		}
	}
	if !own {
		return "lease not renewed within the renew deadline"
	}
	return ""
}

// Valid reports whether this replica may act now. Pieces check it before
// every write (it is their fence).
func (m *Member) Valid() bool {
	ok, _ := m.Authority()
	return ok
}

// Supports is what this member publishes that it supports.
func (m *Member) Supports() Supports { return m.cfg.Supports }

// Run joins the fleet and keeps the Lease until ctx ends; then it returns
// without deleting the Lease (see Leave). It returns early only if the
// lease watch cannot start.
func (m *Member) Run(ctx context.Context) error {
	m.logger = klog.FromContext(ctx)
	leases, err := watchLeases(ctx, m.cfg.Store, m.cfg.Namespace,
		func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{FleetLabel: m.cfg.Fleet}).String()
		},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { m.watchedOwn(obj); m.observe(obj, false) },
			UpdateFunc: func(_, obj any) { m.watchedOwn(obj); m.observe(obj, false) },
			DeleteFunc: func(obj any) { m.observe(obj, true) },
		})
	if err != nil {
		return fmt.Errorf("watching fleet leases: %w", err)
	}
	defer leases.stop()
	if !leases.synced(ctx) {
		return fmt.Errorf("lease watch did not sync: %w", ctx.Err())
	}
	m.mu.Lock()
	m.synced = true
	m.mu.Unlock()
	if planted := plantedFaults(); len(planted) > 0 {
		m.logger.Error(nil, "THIS BUILD CARRIES PLANTED FAULTS that break never-two-owners, for tests only", "planted", planted)
	}
	m.logger.Info("Watching fleet", "fleet", m.cfg.Fleet, "namespace", m.cfg.Namespace, "identity", m.cfg.Identity, "incarnation", m.incarnation)

	if err := m.acquire(ctx); err != nil {
		return err
	}
	go m.expiryLoop(ctx)
	go m.gaugeLoop(ctx)
	go m.listLoop(ctx)
	leaderErr := make(chan error, 1)
	if m.leader != nil {
		m.leader.logger = m.logger
		go func() { leaderErr <- m.leader.run(ctx) }()
	}
	m.renewLoop(ctx)
	if m.leader != nil {
		return <-leaderErr
	}
	return nil
}

// gaugeLoop keeps the membership gauges current: authority and the joining
// period end with time alone, so they are sampled rather than pushed.
func (m *Member) gaugeLoop(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		authorityGauge.Set(boolGauge(m.Valid()))
		joiningGauge.Set(boolGauge(m.Joining()))
		peersGauge.Set(float64(len(m.Peers())))
		if m.leader != nil {
			ok, _ := m.leader.authority()
			leaderLeaseGauge.Set(boolGauge(ok))
		} else {
			leaderLeaseGauge.Set(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// acquire waits until this replica may write its Lease: it does not exist,
// it was left by a graceful leave, or it has not changed for a lease
// duration (its former holder is dead). A Lease that keeps changing belongs
// to a live process with the same identity, which must not be displaced.
func (m *Member) acquire(ctx context.Context) error {
	var lastRV string
	var since time.Time
	for {
		lease, err := m.cfg.Store.Get(ctx, m.cfg.Namespace, m.cfg.Identity)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			m.logger.Error(err, "Reading own lease before joining", "lease", m.cfg.Identity)
		default:
			st, perr := parseState(lease.Annotations[StateAnnotation], m.readVersions())
			if perr == nil && (st.Leaving || st.Incarnation == m.incarnation) {
				m.setLease(lease)
				return nil
			}
			if lease.ResourceVersion != lastRV {
				if lastRV != "" {
					m.logger.Error(nil, "Lease of this identity is being renewed by another process; waiting for it to stop", "lease", m.cfg.Identity, "holder", ptr.Deref(lease.Spec.HolderIdentity, ""))
				}
				lastRV, since = lease.ResourceVersion, m.cfg.Clock.Now()
			} else if m.cfg.Clock.Since(since) > m.cfg.LeaseDuration {
				m.logger.Info("Taking over the lease of a former incarnation", "lease", m.cfg.Identity)
				m.setLease(lease)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.cfg.Clock.After(m.cfg.RetryPeriod):
		}
	}
}

func (m *Member) setLease(l *coordinationv1.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lease = l
}
