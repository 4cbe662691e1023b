package shard

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// Metrics of the Manager, registered with the registry KCM's /metrics
// serves (legacyregistry), so upstream controller and workqueue metrics
// appear beside them. Each replica is scraped on its own: the pod (or
// instance) label says which replica a series is from.
var (
	membersGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "members",
		Help:           "Members in the view this replica has applied (joined, live replicas on the ring).",
		StabilityLevel: metrics.ALPHA,
	})
	piecesGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "pieces",
		Help:           "Pieces of this replica by kind (partition or singleton) and state: owned by the ring of its view, or running here.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "state"})
	memberPiecesGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "member_pieces",
		Help:           "Pieces the ring of this replica's view gives each member (the same on every replica once views agree).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"member"})
	pieceRunningGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "piece_running",
		Help:           "1 for each piece running on this replica.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"piece"})
	viewChanges = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "fleet", Name: "view_changes_total",
		Help:           "Views (member sets) this replica applied: each is a rebalance.",
		StabilityLevel: metrics.ALPHA,
	})
	pieceStarts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "piece_starts_total",
		Help:           "Pieces started on this replica, by kind.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	pieceStops = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "piece_stops_total",
		Help:           "Pieces stopped on this replica, by kind and reason: moved (the ring gave it away or the replica left), authority (lease not renewed in time), failed (it ended on its own and is restarted).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "reason"})
	handoverWait = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "fleet", Name: "handover_wait_seconds",
		Help:           "From the ring giving this replica a piece to the piece starting here (waiting for the previous owner to stop and every member to acknowledge).",
		Buckets:        []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60},
		StabilityLevel: metrics.ALPHA,
	})
	unownedSeconds = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "fleet", Name: "piece_unowned_seconds",
		Help:           "For each piece started here that another member ran before: from when this replica last saw it listed as running by that member to its start here.",
		Buckets:        []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60},
		StabilityLevel: metrics.ALPHA,
	})
	unownedPieces = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "pieces_unowned",
		Help:           "Pieces no live member lists as running, as this replica sees the Leases (a dead member's pieces count once its lease has expired).",
		StabilityLevel: metrics.ALPHA,
	})
	weightTables = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "weight_tables_adopted_total",
		Help:           "Partition weight tables this replica adopted as the view's keeper (placement by weight), by reason: deal (new namespaces dealt as they appear) or hold (the busiest replica stayed above 1.1x the mean for the hold).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	piecesWaiting = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "pieces_waiting",
		Help:           "Pieces the ring gives this replica that do not run here yet.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// RegisterMetrics registers the Manager's metrics (once per process).
func RegisterMetrics() {
	registerOnce.Do(func() {
		for _, c := range []metrics.Registerable{membersGauge, piecesGauge, memberPiecesGauge, pieceRunningGauge,
			viewChanges, pieceStarts, pieceStops, handoverWait, unownedSeconds, piecesWaiting, unownedPieces, weightTables} {
			legacyregistry.MustRegister(c)
		}
		// Every series a dashboard or alert reads exists from the start,
		// at zero, rather than appearing with its first event.
		for _, reason := range []string{"deal", "hold"} {
			weightTables.WithLabelValues(reason)
		}
		for _, kind := range []string{"partition", "singleton"} {
			pieceStarts.WithLabelValues(kind)
			for _, reason := range []string{"moved", "authority", "failed"} {
				pieceStops.WithLabelValues(kind, reason)
			}
			for _, state := range []string{"owned", "running"} {
				piecesGauge.WithLabelValues(kind, state)
			}
		}
		unownedPieces.Set(0)
	})
}

func pieceKind(p Piece) string {
	if p.IsPartition() {
		return "partition"
	}
	return "singleton"
}

// pieceClock remembers, per piece, when the Manager last saw another member
// list it as running and when the ring gave it to this replica: the
// handover figures are measured from these.
type pieceClock struct {
	seenElsewhere map[Piece]time.Time
	intended      map[Piece]time.Time
}

func (c *pieceClock) observe(now time.Time, peers []membership.Peer) {
	if c.seenElsewhere == nil {
		c.seenElsewhere, c.intended = map[Piece]time.Time{}, map[Piece]time.Time{}
	}
	for _, p := range peers {
		for _, name := range p.State.Running {
			c.seenElsewhere[Piece(name)] = now
		}
	}
}

func (c *pieceClock) intend(now time.Time, p Piece) { c.intended[p] = now }

func (c *pieceClock) started(now time.Time, p Piece) {
	if t, ok := c.intended[p]; ok {
		handoverWait.Observe(now.Sub(t).Seconds())
		delete(c.intended, p)
	}
	if t, ok := c.seenElsewhere[p]; ok {
		unownedSeconds.Observe(now.Sub(t).Seconds())
		delete(c.seenElsewhere, p)
	}
}

func (c *pieceClock) dropped(p Piece) { delete(c.intended, p) }

// record publishes the gauges of one step.
func (g *stepGauges) record(plan Plan, running map[Piece]PieceStatus, peers []membership.Peer, rings *RingCache, ring RingConfig, pieces []Piece) {
	listed := map[Piece]bool{}
	for p := range running {
		listed[p] = true
	}
	for _, peer := range peers {
		for _, name := range peer.State.Running {
			listed[Piece(name)] = true
		}
	}
	unowned := 0
	for _, p := range pieces {
		if !listed[p] {
			unowned++
		}
	}
	unownedPieces.Set(float64(unowned))
	membersGauge.Set(float64(len(plan.Members)))
	counts := map[[2]string]int{}
	for _, kind := range []string{"partition", "singleton"} {
		counts[[2]string{kind, "owned"}] = 0
		counts[[2]string{kind, "running"}] = 0
	}
	for _, p := range plan.Owned {
		counts[[2]string{pieceKind(p), "owned"}]++
	}
	waiting := len(plan.Owned)
	runningHere := map[string]float64{}
	for p, s := range running {
		if s == Running {
			counts[[2]string{pieceKind(p), "running"}]++
			runningHere[string(p)] = 1
		}
	}
	g.running.set(runningHere)
	for _, p := range plan.Owned {
		if running[p] == Running {
			waiting--
		}
	}
	piecesWaiting.Set(float64(waiting))
	for k, n := range counts {
		piecesGauge.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	perMember := map[string]float64{}
	if len(plan.Members) > 0 {
		r := rings.Get(ring, plan.Members, plan.View)
		for _, m := range plan.Members {
			perMember[m] = 0
		}
		for _, p := range pieces {
			perMember[r.Owner(p)]++
		}
	}
	g.members.set(perMember)
}

// labelledGauges keeps a gauge vector equal to a map, deleting only the
// series that went away (a Reset would leave scrapes between it and the
// next Set without them).
type labelledGauges struct {
	vec  *metrics.GaugeVec
	last map[string]float64
}

func (l *labelledGauges) set(values map[string]float64) {
	for k := range l.last {
		if _, ok := values[k]; !ok {
			l.vec.DeleteLabelValues(k)
		}
	}
	for k, v := range values {
		l.vec.WithLabelValues(k).Set(v)
	}
	l.last = values
}

// stepGauges are the per-label gauges one Manager keeps up to date.
type stepGauges struct {
	running labelledGauges
	members labelledGauges
}

func newStepGauges() *stepGauges {
	return &stepGauges{running: labelledGauges{vec: pieceRunningGauge}, members: labelledGauges{vec: memberPiecesGauge}}
}
