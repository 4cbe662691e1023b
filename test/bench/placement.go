package main

// Workload (j): how a fleet places a skewed cluster, whether a steady
// cluster keeps its placement, and how it follows a load that shifts.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

const (
	// skewNamespaces hold (j)'s objects, ServiceAccounts by a Zipf law:
	// the namespace of rank k holds skewLargest / k^skewExponent of them
	// (at least one), about 7,400 in all. ServiceAccounts are held in full
	// by the owned cache (ConfigMaps and Secrets are selected down to what
	// the controllers read: controllers/ownedselection.go), so they weigh
	// as any object in a placement by weight, and they cost the scheduler
	// and kwok nothing.
	skewNamespaces = 100
	skewLargest    = 2000
	skewExponent   = 1.2
	// placementEvery is how often (j) reads the fleet's Leases.
	placementEvery = 5 * time.Second
	// placementQuiet: a placement counts as settled once every partition
	// runs, every member places by the same weight table and no table or
	// owner has changed for this long. It spans a weight hold of a minute
	// (the default) after the 10 s measurements have reached the Leases.
	placementQuiet = 2 * time.Minute
	// placementBound is the bound on the busiest replica: 1.1x
	// the mean, as the keeper's (shard.weightBound).
	placementBound = 1.1
)

// placementSample is one read of the fleet's Leases.
type placementSample struct {
	At    time.Duration `json:"at"` // since (j)'s objects were created
	Phase string        `json:"phase"`
	// Shares: each member's share of the objects. Busiest: the busiest
	// member's load over the mean as the weight keeper counts it, the
	// colocated singletons' owner carrying half a mean share besides its
	// partitions (shard.MemberLoads); ObjectsBusiest: its objects alone, as
	// status prints them.
	Shares  map[string]float64 `json:"shares"`
	Busiest float64            `json:"busiest"`
	// Heaviest: the heaviest partition's weight over the mean, the
	// busiest member's floor where no placement can go lower.
	Heaviest       float64 `json:"heaviest"`
	ObjectsBusiest float64 `json:"objectsBusiest"`
	Colocated      string  `json:"colocated"`
	// Owners: each running partition's member; Weights: each partition's
	// published weight; Tables: the distinct tables the members publish;
	// Table: the keeper's (the first member's by name).
	Owners  map[int]string `json:"owners"`
	Weights map[int]uint64 `json:"weights"`
	Tables  int            `json:"tables"`
	Table   string         `json:"table"`
}

// placementPhase is what (j) saw in one phase.
type placementPhase struct {
	samples []placementSample
	// moves: partitions whose owner changed; tables: table changes;
	// lastChange: when the last of either happened (since (j) began).
	moves, tables int
	lastChange    time.Duration
	// ownersBefore: the owners before the phase's first move.
	ownersBefore map[int]string
}

// (j) placement of a skewed cluster, fleets only. (a)'s namespaces (and
// (i)'s) go first. skewNamespaces namespaces get ServiceAccounts by a Zipf
// law; then (j) reads the Leases every placementEvery:
//
//   - settle: until the placement is quiet (placementQuiet): time to the
//     last change, tables adopted, partitions moved, the busiest replica
//     against the mean;
//   - steady: steady more minutes of the same objects: partitions moved
//     and tables adopted (the target: none);
//   - shift: the heaviest namespaces holding half the objects are emptied
//     and as many objects created in light ones, in the same sizes; until
//     quiet again: time to the last change, partitions moved, and the
//     fewest moves that would have brought the busiest within
//     placementBound of the mean (or to the heaviest partition alone).
//
// Each member's share over time is charted into out.
func (b *bench) placement() error {
	if !b.system.Fleet {
		return nil
	}
	if err := b.removeWorkNamespaces(); err != nil {
		return err
	}
	sizes := zipfSizes(skewNamespaces, skewLargest, skewExponent, rand.New(rand.NewSource(1)))
	names := make([]string, len(sizes))
	for i := range names {
		names[i] = fmt.Sprintf("skew-%03d", i)
	}
	if err := parallel(names, 8, func(ns string) error {
		if err := b.createNamespace(ns); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		return b.createServiceAccounts(ns, 0, sizes[ns])
	}); err != nil {
		return err
	}
	start := time.Now()
	settle, err := b.followPlacement(start, "settle", 0)
	if err != nil {
		return err
	}
	b.figures["j_settle_s"] = settle.lastChange.Seconds()
	b.figures["j_settle_tables"] = float64(settle.tables)
	b.figures["j_settle_moves"] = float64(settle.moves)
	b.figures["j_busiest_settled"] = last(settle.samples).Busiest
	b.figures["j_objects_busiest_settled"] = last(settle.samples).ObjectsBusiest
	b.figures["j_heaviest_settled"] = last(settle.samples).Heaviest

	steady, err := b.followPlacement(start, "steady", b.placementSteady)
	if err != nil {
		return err
	}
	b.figures["j_steady_min"] = b.placementSteady.Minutes()
	b.figures["j_steady_moves"] = float64(steady.moves)
	b.figures["j_steady_tables"] = float64(steady.tables)

	moved, err := b.shiftLoad(names, sizes)
	if err != nil {
		return err
	}
	shiftedAt := time.Since(start)
	shift, err := b.followPlacement(start, "shift", 0)
	if err != nil {
		return err
	}
	final := last(shift.samples)
	b.figures["j_shift_objects"] = float64(moved)
	b.figures["j_shift_rebalance_s"] = max(0, (shift.lastChange - shiftedAt).Seconds())
	b.figures["j_shift_tables"] = float64(shift.tables)
	b.figures["j_shift_moves"] = float64(shift.moves)
	b.figures["j_shift_moves_min"] = float64(shard.FewestMoves(shift.ownersBefore, final.Weights, final.Colocated, b.colocatedShare(), placementBound))
	b.figures["j_busiest_shift_peak"] = peakBusiest(shift.samples)
	b.figures["j_busiest_shift_after"] = final.Busiest
	b.figures["j_heaviest_shift_after"] = final.Heaviest

	all := slices.Concat(settle.samples, steady.samples, shift.samples)
	return b.writePlacementSeries(all)
}

// zipfSizes deals the Zipf sizes of n ranks to the namespaces
// skew-000... in an order rng shuffles.
func zipfSizes(n, largest int, exponent float64, rng *rand.Rand) map[string]int {
	out := map[string]int{}
	for i, rank := range rng.Perm(n) {
		out[fmt.Sprintf("skew-%03d", i)] = max(1, int(math.Round(float64(largest)/math.Pow(float64(rank+1), exponent))))
	}
	return out
}

// createServiceAccounts creates ServiceAccounts from..to-1 of namespace
// ns.
func (b *bench) createServiceAccounts(ns string, from, to int) error {
	for i := from; i < to; i++ {
		if _, err := b.client.CoreV1().ServiceAccounts(ns).Create(b.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sa-%05d", i)}},
			metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ServiceAccount %s/sa-%05d: %w", ns, i, err)
		}
	}
	return nil
}

// shiftLoad empties the heaviest namespaces that hold half of sizes'
// objects and deals their sizes to as many light namespaces, chosen by a
// seeded shuffle; it returns how many objects moved.
func (b *bench) shiftLoad(names []string, sizes map[string]int) (int, error) {
	byWeight := slices.Clone(names)
	sort.SliceStable(byWeight, func(i, j int) bool { return sizes[byWeight[i]] > sizes[byWeight[j]] })
	total := 0
	for _, n := range sizes {
		total += n
	}
	var heavy []string
	moved := 0
	for _, ns := range byWeight {
		if 2*moved >= total {
			break
		}
		heavy = append(heavy, ns)
		moved += sizes[ns]
	}
	light := slices.Clone(byWeight[len(heavy):])
	rand.New(rand.NewSource(2)).Shuffle(len(light), func(i, j int) { light[i], light[j] = light[j], light[i] })
	for _, ns := range heavy {
		if err := b.client.CoreV1().ServiceAccounts(ns).DeleteCollection(b.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return 0, fmt.Errorf("emptying namespace %s: %w", ns, err)
		}
	}
	targets := map[string][2]int{}
	for i, ns := range heavy {
		targets[light[i]] = [2]int{sizes[light[i]], sizes[light[i]] + sizes[ns]}
	}
	if err := parallel(light[:len(heavy)], 8, func(ns string) error {
		return b.createServiceAccounts(ns, targets[ns][0], targets[ns][1])
	}); err != nil {
		return 0, err
	}
	klog.InfoS("Shifted half the objects", "emptied", heavy, "filled", light[:len(heavy)], "objects", moved)
	return moved, nil
}

// followPlacement reads the Leases every placementEvery for span, or,
// with span 0, until the placement is quiet (placementQuiet).
func (b *bench) followPlacement(start time.Time, phase string, span time.Duration) (placementPhase, error) {
	var out placementPhase
	begun := time.Now()
	var prev *placementSample
	err := wait.PollUntilContextTimeout(b.ctx, placementEvery, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		s, err := b.readPlacement(ctx)
		if err != nil {
			klog.InfoS("Reading the fleet's placement", "err", err)
			return false, nil
		}
		s.At, s.Phase = time.Since(start), phase
		out.samples = append(out.samples, s)
		if prev == nil {
			// A phase's first sample starts its quiet time.
			out.lastChange = s.At
		} else {
			moves := 0
			for p, owner := range s.Owners {
				if was, ok := prev.Owners[p]; ok && was != owner {
					moves++
				}
			}
			if moves > 0 && out.ownersBefore == nil {
				out.ownersBefore = prev.Owners
			}
			out.moves += moves
			if s.Table != prev.Table {
				out.tables++
			}
			if moves > 0 || s.Table != prev.Table || len(s.Owners) != len(prev.Owners) {
				out.lastChange = s.At
			}
		}
		prev = &out.samples[len(out.samples)-1]
		if span > 0 {
			return time.Since(begun) >= span, nil
		}
		return len(s.Owners) == b.ring.Partitions && s.Tables == 1 && s.At-out.lastChange >= placementQuiet, nil
	})
	if err != nil {
		return out, fmt.Errorf("following the placement (%s): %w", phase, err)
	}
	if out.ownersBefore == nil {
		out.ownersBefore = last(out.samples).Owners
	}
	klog.InfoS("Placement phase", "system", b.system.Name, "phase", phase, "moves", out.moves, "tables", out.tables, "lastChange", out.lastChange, "busiest", last(out.samples).Busiest)
	return out, nil
}

// readPlacement reads the fleet's Leases: shares, owners, weights, tables.
func (b *bench) readPlacement(ctx context.Context) (placementSample, error) {
	st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
	if err != nil {
		return placementSample{}, err
	}
	leases, err := b.client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: membership.FleetLabel})
	if err != nil {
		return placementSample{}, fmt.Errorf("listing the fleet's Leases: %w", err)
	}
	s := placementSample{Shares: map[string]float64{}, Owners: map[int]string{}, Weights: map[int]uint64{}, ObjectsBusiest: st.Busiest}
	for _, m := range st.Members {
		if m.Health != shard.MemberReady {
			continue
		}
		s.Shares[m.Name] = m.Share
		for _, p := range m.Partitions {
			s.Owners[p] = m.Name
		}
		if slices.Contains(m.Singletons, "garbage-collector-controller") {
			s.Colocated = m.Name
		}
	}
	// The table is the keeper's: the first member's by name.
	sort.Slice(leases.Items, func(i, j int) bool { return leases.Items[i].Name < leases.Items[j].Name })
	tables := map[string]bool{}
	for i, l := range leases.Items {
		state, err := membership.ParseState(l.Annotations[membership.StateAnnotation])
		if err != nil {
			return placementSample{}, fmt.Errorf("lease %s: %w", l.Name, err)
		}
		tables[state.Table] = true
		if i == 0 {
			s.Table = state.Table
		}
		for p, w := range state.Weights {
			s.Weights[p] = w
		}
	}
	s.Tables = len(tables)
	load, mean := shard.MemberLoads(s.Owners, s.Weights, s.Colocated, b.colocatedShare())
	for _, l := range load {
		s.Busiest = max(s.Busiest, l/mean)
	}
	for _, w := range s.Weights {
		s.Heaviest = max(s.Heaviest, float64(w)/mean)
	}
	return s, nil
}

// colocatedShare is the colocated owner's share the fleet's flags give it:
// as set, else an even share placed by weight and half of one by count.
func (b *bench) colocatedShare() float64 {
	share := 1.0
	for _, arg := range b.fleetArgs {
		if arg == "--placement-by-weight=false" {
			share = shard.DefaultColocatedShare
		}
	}
	for _, arg := range b.fleetArgs {
		if v, ok := strings.CutPrefix(arg, "--colocated-partition-share="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				share = f
			}
		}
	}
	return share
}

// ringOf is the ring the fleet's replicas place by: the default, with
// --partitions and --namespace-hash as the fleet's flags (fleetArgs) set
// them, so that the figures that place namespaces follow an experiment's
// ring.
func ringOf(fleetArgs []string) shard.RingConfig {
	ring := shard.DefaultRingConfig
	for _, arg := range fleetArgs {
		if v, ok := strings.CutPrefix(arg, "--partitions="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				ring.Partitions = n
			}
		}
		if v, ok := strings.CutPrefix(arg, "--namespace-hash="); ok {
			ring.NamespaceHash = v
		}
	}
	return ring
}

func peakBusiest(samples []placementSample) float64 {
	peak := 0.0
	for _, s := range samples {
		peak = max(peak, s.Busiest)
	}
	return peak
}

func last(samples []placementSample) placementSample {
	if len(samples) == 0 {
		return placementSample{}
	}
	return samples[len(samples)-1]
}

// removeWorkNamespaces deletes every namespace earlier workloads left
// (all but the system's), so that idle objects do not weigh in (j).
func (b *bench) removeWorkNamespaces() error {
	list, err := b.client.CoreV1().Namespaces().List(b.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	var work []string
	for _, ns := range list.Items {
		if ns.Name != "default" && !strings.HasPrefix(ns.Name, "kube-") && ns.Status.Phase != corev1.NamespaceTerminating {
			work = append(work, ns.Name)
		}
	}
	return b.removeNamespaces(work)
}

// writePlacementSeries writes (j)'s samples as JSON and a chart of each
// member's share of the objects over time into out.
func (b *bench) writePlacementSeries(samples []placementSample) error {
	if b.out == "" {
		return nil
	}
	name := "j-share-" + strings.ReplaceAll(b.system.Name, " ", "")
	data, err := json.MarshalIndent(samples, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, name+".json"), data, 0o644); err != nil {
		return fmt.Errorf("writing (j)'s samples: %w", err)
	}
	svg, width, height := shareChart(samples, fmt.Sprintf("(j) %s: each replica's share of the objects (Leases' weights)", b.system.Name))
	return renderPNG(b.ctx, svg, width, height, b.out, name)
}

// shareChart draws each member's share over time, the phases shaded and
// the even share dashed.
func shareChart(samples []placementSample, title string) (string, int, int) {
	const width, height, left, top, plotW, plotH = 900, 420, 60, 40, 800, 320
	var end float64
	members := map[string]bool{}
	for _, s := range samples {
		end = max(end, s.At.Seconds())
		for m := range s.Shares {
			members[m] = true
		}
	}
	if end == 0 {
		end = 1
	}
	names := make([]string, 0, len(members))
	for m := range members {
		names = append(names, m)
	}
	sort.Strings(names)
	x := func(at time.Duration) float64 { return left + plotW*at.Seconds()/end }
	y := func(share float64) float64 { return top + plotH*(1-share) }
	var svg strings.Builder
	fmt.Fprintf(&svg, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`, width, height)
	fmt.Fprintf(&svg, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="22" font-size="15" font-weight="bold">%s</text>`, title)
	phaseStart := map[string]time.Duration{}
	var phases []string
	for _, s := range samples {
		if _, ok := phaseStart[s.Phase]; !ok {
			phaseStart[s.Phase] = s.At
			phases = append(phases, s.Phase)
		}
	}
	for i, p := range phases {
		fmt.Fprintf(&svg, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb"/><text x="%.1f" y="%d" fill="#666">%s</text>`,
			x(phaseStart[p]), top, x(phaseStart[p]), top+plotH, x(phaseStart[p])+4, top+14+16*(i%2), p)
	}
	for _, share := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(&svg, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="10" y="%.1f">%.0f%%</text>`, left, y(share), left+plotW, y(share), y(share)+4, 100*share)
	}
	if len(names) > 0 {
		even := 1 / float64(len(names))
		fmt.Fprintf(&svg, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888" stroke-dasharray="6,4"/>`, left, y(even), left+plotW, y(even))
	}
	colors := []string{"#1a73e8", "#d93025", "#188038", "#f29900", "#a142f4", "#12b5cb", "#e8710a", "#5f6368"}
	for i, m := range names {
		var pts []string
		for _, s := range samples {
			if share, ok := s.Shares[m]; ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At), y(share)))
			}
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&svg, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/><text x="%d" y="%d" fill="%s">%s</text>`,
			c, strings.Join(pts, " "), left+10+110*i, height-20, c, m)
	}
	fmt.Fprintf(&svg, `<text x="%d" y="%d" fill="#666">%.0f s</text>`, left+plotW-40, top+plotH+16, end)
	svg.WriteString(`</svg>`)
	return svg.String(), width, height
}
