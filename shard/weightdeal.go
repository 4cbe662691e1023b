package shard

import (
	"fmt"
	"maps"
	"math"
	"slices"
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
// replica with the most new namespaces does (8 of 20 on one of three
// replicas in the bench's workload (a): 2.50x KCM's speed where 3x is the
// ideal; docs/benchmarks/placement-by-weight). A new namespace has no
// weight to measure yet, so under PlacementWeightedMoves the keeper deals
// new namespaces (created within youngWindow) by count as they appear,
// without the hold. A deal starts from where the partitions run and moves
// a partition holding new namespaces off the member the most above its
// fair count of them (its capacity's share, rounded up; the colocated
// singletons' owner has ColocatedShare of one) while that lowers the
// pair's larger count. The partitions with namespaces not dealt yet win
// ties; those dealt earlier in the window may move again, as they
// hold little yet (a namespace landing beside an earlier one can leave a
// member above its count with nothing else to move).
//
// So a deal moves only while a member is above its fair count: a
// cluster that creates no namespace deals nothing, and namespaces created
// one at a time, further apart than youngWindow, move nothing. A
// partition a deal moved stays where it is for youngWindow when the
// keeper balances by the hold: the hold balances what partitions hold,
// and a namespace in its first minute holds little of the work it
// brings.

// youngWindow is how long a namespace counts as new: as long as the
// keeper's default hold, so that a deal spreads the namespaces a tenant
// or a rollout creates over a minute, and the hold balances what they
// hold after that.
const youngWindow = weightHold

// dealer is the keeper's memory for dealing.
type dealer struct {
	// dealt: the new namespaces dealt, by when they were.
	dealt map[string]time.Time
	// before: the new namespaces there already at the keeper's first
	// step, neither dealt nor counted: where they run was decided before
	// (by the keeper before it, or by the ring).
	before map[string]bool
	// young: when each partition a deal moved within youngWindow was
	// moved; the hold's balancing leaves them where they are (fixed).
	young map[int]time.Time
	// moved: how many partitions the last deal moved.
	moved int
}

// deal is the moves table that deals the partitions of fresh, the
// namespaces created within youngWindow (by their partitions), and
// whether there is one to adopt: false when no new namespace is left to
// deal or dealing moves nothing. weights are what the table's codes
// carry.
func (d *dealer) deal(now time.Time, current string, view Plan, fresh map[string]int, weights map[int]uint64) (string, bool) {
	for p, at := range d.young {
		if now.Sub(at) >= youngWindow {
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
	for ns := range d.before {
		if _, ok := fresh[ns]; !ok {
			delete(d.before, ns)
		}
	}
	for ns, at := range d.dealt {
		if _, ok := fresh[ns]; !ok || now.Sub(at) >= youngWindow {
			delete(d.dealt, ns)
		}
	}
	partitions := view.Ring.Partitions
	count := map[int]uint64{}
	var dealing []int
	for ns, p := range fresh {
		if p < 0 || p >= partitions || d.before[ns] {
			continue
		}
		count[p]++
		if _, ok := d.dealt[ns]; !ok {
			if d.dealt == nil {
				d.dealt = map[string]time.Time{}
			}
			d.dealt[ns] = now
			if !slices.Contains(dealing, p) {
				dealing = append(dealing, p)
			}
		}
	}
	if len(dealing) == 0 || len(view.Members) == 0 {
		return "", false
	}
	running, base, inRing := runningAndBase(view, current)
	heavy, pinned := base.heavyOf()
	capacity := func(m string) float64 {
		if m == heavy {
			return view.Ring.ColocatedShare
		}
		return 1
	}
	if d.young == nil {
		d.young = map[int]time.Time{}
	}
	load := map[string]uint64{}
	owner := map[int]string{}
	for p, n := range count {
		load[running.owners[p]] += n
	}
	// Movable: the partitions being dealt, which win ties, then those
	// dealt within the window, which hold little yet (a namespace landing
	// beside an earlier one can leave its member above its count with
	// nothing new to move but that partition).
	slices.Sort(dealing)
	movable := slices.Clone(dealing)
	for p := range count {
		owner[p] = running.owners[p]
		if !slices.Contains(dealing, p) {
			movable = append(movable, p)
		}
	}
	slices.Sort(movable[len(dealing):])
	// From where they run: move a partition off the member the most above
	// its fair count (its capacity's share, rounded up) while that lowers
	// the pair's larger load; so a deal moves no more than it must.
	var total uint64
	var capacities float64
	for _, m := range inRing {
		total += load[m]
		capacities += capacity(m)
	}
	fair := func(m string) uint64 {
		if capacities <= 0 {
			return total
		}
		return uint64(math.Ceil(float64(total) * capacity(m) / capacities))
	}
	for range len(dealing) * len(inRing) {
		from := ""
		for _, m := range inRing {
			if load[m] > fair(m) && (from == "" || load[m]-fair(m) > load[from]-fair(from)) {
				from = m
			}
		}
		if from == "" {
			break
		}
		was := dealtLoad(load[from], capacity(from))
		moving, to, after := -1, "", was
		for _, p := range movable {
			if owner[p] != from || p == pinned {
				continue
			}
			for _, m := range inRing {
				if m == from {
					continue
				}
				if l := max(dealtLoad(load[m]+count[p], capacity(m)), dealtLoad(load[from]-count[p], capacity(from))); l < after {
					moving, to, after = p, m, l
				}
			}
		}
		if moving < 0 {
			break
		}
		owner[moving] = to
		load[from] -= count[moving]
		load[to] += count[moving]
	}
	_, moves, err := DecodeMovesTable(current, partitions)
	if err != nil {
		moves = map[int]string{}
	}
	d.moved = 0
	for _, p := range movable {
		if owner[p] == running.owners[p] {
			continue
		}
		d.moved++
		d.young[p] = now
		if owner[p] == base.owners[p] {
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

// dealtLoad is a member's new namespaces for its capacity; a member of
// no capacity holding any is the most loaded.
func dealtLoad(n uint64, capacity float64) float64 {
	switch {
	case n == 0:
		return 0
	case capacity <= 0:
		return math.Inf(1)
	}
	return float64(n) / capacity
}

// fixed says whether a deal moved partition p within youngWindow.
func (d *dealer) fixed(p int) bool {
	_, ok := d.young[p]
	return ok
}

// fixedKey names the partitions fixed says, for the keeper's memo.
func (d *dealer) fixedKey() string {
	ps := slices.Sorted(maps.Keys(d.young))
	return fmt.Sprint(ps)
}
