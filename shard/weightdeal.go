package shard

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// Dealing new namespaces.
//
// A namespace created with its work (a tenant's first Deployments, a
// bench's workload) brings that work at once, long before the weights
// have stayed uneven for the keeper's hold, and the hash alone decides
// where it lands: at default client limits, where each replica's own
// client budgets are what a fleet multiplies, the fleet finishes when the
// replica with the most new namespaces does, and the hash can put well
// over its share of them on one replica. A new namespace has no weight to
// measure yet, so under the placements whose tables carry moves
// (byMoves) the keeper deals new namespaces (created within YoungWindow)
// by count as they appear (a replica's NewNamespaces holds each once it
// has settled, 100 ms after its cache added it), without the hold. A
// deal starts from where the partitions run and moves a partition
// holding new namespaces off the member the most above its
// fair count of them (its capacity's share, rounded up; the colocated
// singletons' owner has ColocatedShare of one) while that lowers the
// pair's larger count. The partitions with namespaces not dealt yet win
// ties; those dealt earlier in the window may move again, as they
// hold little yet (a namespace landing beside an earlier one can leave a
// member above its count with nothing else to move).
//
// A young namespace counts as one, unless its members have published
// its work to come (the Pods its workloads want and do not have
// available yet: package controllers' youngWork) and either that work
// has been done for doneQuiet (it published some, and since then none):
// then it counts as nothing, so namespaces created a minute ago and
// finished do not make a busy tenant's replica look fair with
// neighbours; or both the most it published and its work to come now
// are over heavyYoung times the median's of those with work to come: then
// it counts as that many namespaces' worth, rounded, never fewer while
// its work lasts, and a change in what the heavy ones count deals again.
// So a busy new tenant's replica sheds its young neighbours within
// seconds of the tenant's work arriving, while namespaces of alike work
// count alike however far each got (bench (h), a fleet of three: the
// deal counted 20 finished namespaces of (a) beside the busy tenant's
// and left four of its neighbours on its replica, which finished with
// it). A namespace finishing deals nothing by itself: work stealing at
// the end of a burst would cost a handover per namespace. Where a heavy
// namespace's member is dealt more than it (its count short of the fair
// count), the namespaces that share it are those whose work is done,
// swapped for ones of the same count with work to come (seat).
//
// So a deal moves only while a member is above its fair count: a
// cluster that creates no namespace deals nothing, and namespaces created
// one at a time, further apart than YoungWindow, move nothing. A
// partition a deal placed, moved or left where it ran, stays where it is
// for YoungWindow when the keeper balances by the hold: the hold balances
// what partitions hold, and a namespace in its first minute holds little
// of the work it brings, so moving one the deal left in place undoes the
// deal's count (bench (i) with five replicas: in two of three runs the
// hold, adopted half a minute after the deals, moved the partition of one
// of the 20 new namespaces, which the deal had left in place, to a
// replica holding four, and the scale-up found five there).

// FreshNamespaces are what a keeper deals from (Manager.NewNamespaces).
type FreshNamespaces struct {
	// Fresh: the namespaces created within the window and settled, each
	// with its partition.
	Fresh map[string]int
	// Settling: the partitions holding a namespace created too recently
	// to deal (its first owner is still writing its first objects). No
	// deal moves them until it settles, nor counts it.
	Settling map[int]bool
}

// YoungWindow is how long a namespace counts as new: as long as the
// keeper's default hold, so that a deal spreads the namespaces a tenant
// or a rollout creates over a minute, and the hold balances what they
// hold after that.
const YoungWindow = weightHold

// dealer is the keeper's memory for dealing.
type dealer struct {
	// dealt: the new namespaces dealt, by when they were.
	dealt map[string]time.Time
	// before: the new namespaces there already at the keeper's first
	// step, neither dealt nor counted: where they run was decided before
	// (by the keeper before it, or by the ring).
	before map[string]bool
	// young: when each partition a deal placed (moved, or left where it
	// ran) within YoungWindow was placed; the hold's balancing leaves them
	// where they are (fixed).
	young map[int]time.Time
	// moved: how many partitions the last deal moved; loads: the new
	// namespaces each member counts after it (a heavy one as its units),
	// for the keeper's log line.
	moved int
	loads map[string]uint64
	// weights: the last work to come each new namespace's member
	// published of it (kept while it moves, when nobody publishes it);
	// peaks: the most it published; heavy: what each heavy one counts,
	// never lowered while its work lasts; weighed: the heavy ones'
	// most counts the last deal dealt by (heavyKey).
	weights map[string]uint64
	peaks   map[string]uint64
	heavy   map[string]uint64
	weighed string
	// doneSince: when each new namespace's work was first published done
	// (its peak above 0, its work to come 0), while it stays so.
	doneSince map[string]time.Time
	// done: the new namespaces the last deal counted as nothing, their
	// work done, for the keeper's log line; small: those it counted as
	// nothing because their work does not outlast a handover (payPods).
	done, small []string
	// payPods: the Pods a replica's controllers create in a handover's
	// time at their client budget (payPods of --kube-api-qps; 0: not
	// known, dealt as at KCM's default budget).
	payPods uint64
}

// handover is what a deal's move costs the namespace it moves: the old
// owner's report tail (250 ms once it has written into it), two rounds
// of Leases and the new owner's lists (bench (a), five replicas, 2
// cores: 0.84 s from the deal to the new owner's first write, for a
// namespace whose first owner had created its ReplicaSets).
const handover = time.Second

// assumedNewPods is the work a new namespace is assumed to bring before
// its members publish it: a tenant's first Deployments (bench (a): five
// of 10 Pods). Where a handover's worth of client budget creates no more
// Pods than that (payPods, up to 50 QPS; KCM's default is 20), the deal
// counts a namespace one from the moment it settles, as moving it early
// pays; beyond that it waits for the namespace's work and deals only one
// whose Pods to come outlast a handover (bench (a) at 1000 QPS: a deal
// made each of seven moved namespaces wait for a handover, and (a) took
// 1.18x KCM's time where placement by count took 0.96x).
const assumedNewPods = 50

// payPods is how many Pods a client budget of qps creates in a
// handover's time; 0 for a budget not set.
func payPods(qps float32) uint64 {
	if qps <= 0 {
		return 0
	}
	return uint64(math.Ceil(float64(qps) * handover.Seconds()))
}

// loose says whether the budget creates more Pods in a handover's time
// than a new namespace is assumed to bring: the deal then waits for each
// namespace's work.
func (d *dealer) loose() bool { return d.payPods > assumedNewPods }

// doneQuiet is how long a new namespace's work stays done before the
// deal counts it as nothing: its replica still sends the Events and
// status updates that report the work for seconds after its Pods are
// available (bench (a) with five replicas: the first of 20 namespaces
// created over 5 s read done about 5 s after its creation, the last
// deal counted it as nothing and put a fifth namespace on its replica,
// in 8 of 13 runs, which took 15.4-17.4 s against 13.3-14.1 s with four).
const doneQuiet = 10 * time.Second

// heavyYoung: a young namespace holding over this many times the median
// young namespace counts as more than one.
const heavyYoung = 2

// deal is the moves table that deals the partitions of fresh, the
// namespaces created within YoungWindow (by their partitions), and
// whether there is one to adopt: false when no new namespace is left to
// deal or dealing moves nothing. weights are what the table's codes
// carry.
func (d *dealer) deal(now time.Time, current string, view Plan, namespaces FreshNamespaces, weights map[int]uint64, young map[string]uint64) (string, bool) {
	fresh := namespaces.Fresh
	for p, at := range d.young {
		if now.Sub(at) >= YoungWindow {
			delete(d.young, p)
		}
	}
	if d.before == nil {
		// The first step: what is there already is not this keeper's to
		// deal.
		d.before = map[string]bool{}
		for ns := range fresh {
			d.before[ns] = true
		}
		return "", false
	}
	d.forgetGone(now, fresh)
	units := d.units(now, fresh, young)
	d.done, d.small = d.done[:0], d.small[:0]
	for ns, n := range units {
		switch {
		case n > 0:
		case d.tooSmall(ns):
			d.small = append(d.small, ns)
		default:
			d.done = append(d.done, ns)
		}
	}
	slices.Sort(d.done)
	slices.Sort(d.small)
	settling := d.waiting(fresh, namespaces.Settling)
	count, dealing := d.countFresh(now, view.Ring.Partitions, fresh, settling, units)
	weighed := heavyKey(d.heavy)
	if (len(dealing) == 0 && weighed == d.weighed) || len(view.Members) == 0 {
		return "", false
	}
	d.weighed = weighed
	running, base, inRing := runningAndBase(view, current)
	if d.young == nil {
		d.young = map[int]time.Time{}
	}
	round := newDealRound(view, running.owners, base, inRing, count)
	movable := slices.DeleteFunc(round.movable(dealing), func(p int) bool { return settling[p] })
	round.spread(movable, len(movable)*len(inRing))
	heavy, idle := d.seating(fresh, units)
	round.seat(movable, heavy, idle)
	d.loads = round.load
	return d.movesTable(now, current, view.Ring.Partitions, running.owners, base.owners, round.owner, movable, weights)
}

// forgetGone drops the namespaces no longer fresh, and those dealt a
// YoungWindow ago.
func (d *dealer) forgetGone(now time.Time, fresh map[string]int) {
	for ns := range d.before {
		if _, ok := fresh[ns]; !ok {
			delete(d.before, ns)
		}
	}
	for ns, at := range d.dealt {
		if _, ok := fresh[ns]; !ok || now.Sub(at) >= YoungWindow {
			delete(d.dealt, ns)
		}
	}
	for _, m := range []map[string]uint64{d.weights, d.peaks, d.heavy} {
		for ns := range m {
			if _, ok := fresh[ns]; !ok {
				delete(m, ns)
			}
		}
	}
	for ns := range d.doneSince {
		if _, ok := fresh[ns]; !ok {
			delete(d.doneSince, ns)
		}
	}
}

// units is what each new namespace counts that does not count one: 0
// for one whose work has been done for doneQuiet or, under a loose
// budget, does not outlast a handover (tooSmall), and its units for a
// heavy one (heavyYoung).
// young: what the members publish now.
func (d *dealer) units(now time.Time, fresh map[string]int, young map[string]uint64) map[string]uint64 {
	if d.weights == nil {
		d.weights, d.peaks, d.heavy = map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
		d.doneSince = map[string]time.Time{}
	}
	var working []uint64
	units := map[string]uint64{}
	for ns := range fresh {
		if w, ok := young[ns]; ok {
			d.weights[ns] = w
			d.peaks[ns] = max(d.peaks[ns], w)
		}
		if d.before[ns] || d.peaks[ns] == 0 {
			continue
		}
		if d.weights[ns] > 0 {
			delete(d.doneSince, ns)
			working = append(working, d.peaks[ns])
			continue
		}
		if _, ok := d.doneSince[ns]; !ok {
			d.doneSince[ns] = now
		}
		if now.Sub(d.doneSince[ns]) >= doneQuiet {
			units[ns] = 0
		}
	}
	if len(working) > 0 {
		slices.Sort(working)
		median := max(1, working[len(working)/2])
		for ns := range fresh {
			// Its work to come now must be heavy too: a namespace of an
			// earlier burst, finishing (its last report a few Pods
			// short), would be weighed by that burst's peak (bench (h)
			// right after (a): three of (a)'s namespaces counted 5
			// each, and the deal moved 26 partitions in half a second).
			if !d.before[ns] && min(d.weights[ns], d.peaks[ns]) > heavyYoung*median {
				d.heavy[ns] = max(d.heavy[ns], uint64(math.Round(float64(d.peaks[ns])/float64(median))))
			}
		}
	}
	for ns, n := range d.heavy {
		if _, done := units[ns]; !done {
			units[ns] = n
		}
	}
	for ns := range fresh {
		if d.tooSmall(ns) {
			units[ns] = 0
		}
	}
	return units
}

// tooSmall says whether new namespace ns, under a loose budget, has not
// published work that outlasts a handover (none yet, or less): moving it
// would cost it more than it saves, so it counts as nothing.
func (d *dealer) tooSmall(ns string) bool {
	return d.loose() && !d.before[ns] && d.peaks[ns] < d.payPods
}

// waiting is settling with, under a loose budget, the partitions of the
// new namespaces whose work is not published yet: as a settling one, such
// a namespace is neither counted nor dealt, nor its partition moved,
// until its work is known.
func (d *dealer) waiting(fresh map[string]int, settling map[int]bool) map[int]bool {
	if !d.loose() {
		return settling
	}
	out := maps.Clone(settling)
	if out == nil {
		out = map[int]bool{}
	}
	for ns, p := range fresh {
		if !d.before[ns] && d.peaks[ns] == 0 {
			out[p] = true
		}
	}
	return out
}

// heavyKey names the heavy namespaces and what each has counted at most,
// to tell a change that deals again: one turning heavy, or counting more.
// A heavy namespace's work ending changes nothing here (the deal counts it
// as nothing only when something else deals): moving its neighbours back
// onto its replica then would be work stealing at the end of a burst
// (bench (h) with five replicas: three heavy namespaces' ends dealt three
// times more, 13 moves).
func heavyKey(heavy map[string]uint64) string {
	var b strings.Builder
	for _, ns := range slices.Sorted(maps.Keys(heavy)) {
		fmt.Fprintf(&b, "%s=%d,", ns, heavy[ns])
	}
	return b.String()
}

// countFresh counts the new namespaces of each partition (those there at
// the first step left out; a heavy one as its units, a finished one as
// nothing) and lists the
// partitions holding one not dealt yet, recording those as dealt now and
// their partitions as fixed for the hold, whether the deal moves them or
// leaves them where they run; one in a settling partition is dealt once
// that partition settles.
func (d *dealer) countFresh(now time.Time, partitions int, fresh map[string]int, settling map[int]bool, units map[string]uint64) (map[int]uint64, []int) {
	count := map[int]uint64{}
	var dealing []int
	for ns, p := range fresh {
		if p < 0 || p >= partitions || d.before[ns] {
			continue
		}
		n, ok := units[ns]
		if !ok {
			n = 1
		}
		count[p] += n
		if _, ok := d.dealt[ns]; !ok && !settling[p] {
			if d.dealt == nil {
				d.dealt = map[string]time.Time{}
			}
			if d.young == nil {
				d.young = map[int]time.Time{}
			}
			d.dealt[ns] = now
			d.young[p] = now
			if !slices.Contains(dealing, p) {
				dealing = append(dealing, p)
			}
		}
	}
	slices.Sort(dealing)
	return count, dealing
}

// movesTable is the moves table that places the movable partitions by
// owner, over current's, with weights' codes; false if the deal moved
// nothing. The partitions it moved are fixed for YoungWindow, as are
// those it dealt and left (countFresh).
func (d *dealer) movesTable(now time.Time, current string, partitions int, running, base []string, owner map[int]string, movable []int, weights map[int]uint64) (string, bool) {
	_, moves, err := DecodeMovesTable(current, partitions)
	if err != nil {
		moves = map[int]string{}
	}
	d.moved = 0
	for _, p := range movable {
		if owner[p] == running[p] {
			continue
		}
		d.moved++
		d.young[p] = now
		if owner[p] == base[p] {
			delete(moves, p)
		} else {
			moves[p] = owner[p]
		}
	}
	if d.moved == 0 {
		return "", false
	}
	codes := make([]byte, partitions)
	for p, w := range weights {
		if p >= 0 && p < partitions {
			codes[p] = membership.WeightCode(w)
		}
	}
	table, err := EncodeMovesTable(codes, moves)
	if err != nil {
		return "", false
	}
	return table, true
}

// seating sorts the partitions holding new namespaces for seat: heavy,
// those holding a heavy namespace with work to come; idle, those whose
// every new namespace has published its work done (quiet or not).
func (d *dealer) seating(fresh map[string]int, units map[string]uint64) (heavy, idle map[int]bool) {
	heavy, idle = map[int]bool{}, map[int]bool{}
	working := map[int]bool{}
	for ns, p := range fresh {
		if d.before[ns] {
			continue
		}
		if _, done := d.doneSince[ns]; done {
			idle[p] = true
			continue
		}
		working[p] = true
		if d.heavy[ns] > 0 && units[ns] > 1 {
			heavy[p] = true
		}
	}
	for p := range working {
		delete(idle, p)
	}
	return heavy, idle
}

// fixed says whether a deal placed partition p within YoungWindow.
func (d *dealer) fixed(p int) bool {
	_, ok := d.young[p]
	return ok
}

// fixedKey names the partitions fixed says, for the keeper's memo.
func (d *dealer) fixedKey() string {
	ps := slices.Sorted(maps.Keys(d.young))
	return fmt.Sprint(ps)
}
