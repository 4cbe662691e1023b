package membership

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of a member's Lease, served on KCM's /metrics registry.
var (
	renewDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "fleet", Name: "lease_renew_duration_seconds",
		Help:           "Time from sending a Lease renewal to its answer, successful or not.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: metrics.ALPHA,
	})
	renewals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "lease_renewals_total",
		Help:           "Lease renewals by result: success, or failure (an error, or an answer later than the renew timeout).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	authorityGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "authority",
		Help:           "1 while this replica's last renewal is recent enough for it to act (pieces may run), else 0.",
		StabilityLevel: metrics.ALPHA,
	})
	joiningGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "joining",
		Help:           "1 while this replica is in its joining quiet period (it owns nothing yet).",
		StabilityLevel: metrics.ALPHA,
	})
	leaderLeaseRenewals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "leader_lease_renewals_total",
		Help:           "Renewals of kube-controller-manager's leader Lease by this replica, by result: success, or failure (an error or a conflicting writer).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	leaderLeaseGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "leader_lease_held",
		Help:           "1 while this replica's last renewal of kube-controller-manager's leader Lease lets it act, else 0 (a KCM holds it, or renewals fail). Always 1 with --leader-elect=false.",
		StabilityLevel: metrics.ALPHA,
	})
	watchLagLists = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "fleet", Name: "lease_watch_lag_lists_total",
		Help:           "Lists of the fleet's Leases made because the Lease watch had not delivered one of this replica's own renewals within the retry period (a stalled watch).",
		StabilityLevel: metrics.ALPHA,
	})
	peersGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "peers",
		Help:           "Other live members this replica sees in the fleet's Leases, joining ones included.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// RegisterMetrics registers the membership metrics (once per process).
func RegisterMetrics() {
	registerOnce.Do(func() {
		for _, c := range []metrics.Registerable{renewDuration, renewals, authorityGauge, joiningGauge, peersGauge, leaderLeaseRenewals, leaderLeaseGauge, watchLagLists} {
			legacyregistry.MustRegister(c)
		}
		renewals.WithLabelValues("success")
		renewals.WithLabelValues("failure")
		leaderLeaseRenewals.WithLabelValues("success")
		leaderLeaseRenewals.WithLabelValues("failure")
	})
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
