package shard

import (
	"slices"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// Dealing the partitions that gain their first objects.
//
// A namespace created with its work (a tenant's first Deployments, a
// bench's workload) brings that work at once, long before the weights
// have stayed uneven for the keeper's hold, and the hash alone decides
// where it lands: at default client limits, where each replica's own
// client budgets are what a fleet multiplies, the fleet finishes when the
// replica with the most new namespaces does (8 of 20 on one of three
// replicas in the bench's workload (a): 2.50x KCM's speed where 3x is the
// ideal; docs/benchmarks/placement-by-weight). So under
// PlacementWeightedMoves the keeper deals such partitions as they appear,
// without the hold: each goes to the member with the least young weight
// (what its partitions gained since the first of the partitions dealt
// within youngWindow was: the new namespaces, wherever they landed) for
// its capacity,
// the colocated singletons' owner having ColocatedShare of one, its
// current owner winning ties so that a deal moves only what it must.
//
// While a dealt partition is young the keeper adopts no table by the
// hold: the hold balances what partitions hold, and a namespace in its
// first minute holds little of the work it brings. As a partition is
// dealt at most once, this defers the hold by at most youngWindow per
// partition.
//
// A partition is dealt at most once in a keeper's life: the first time
// it is measured with objects after the keeper has seen every partition
// measured (its baseline). A partition that empties and fills again, or
// flaps, is left to the hold; so no schedule of weights makes the deal
// move a partition twice, and a steady cluster deals nothing.

// youngWindow is how long a dealt partition counts as young: as long
// as the keeper's default hold, so that a deal spreads the namespaces a
// tenant or a rollout creates over a minute, and the hold balances
// what they hold after that.
const youngWindow = weightHold

// dealer is the keeper's memory for dealing.
type dealer struct {
	// seen: the partitions measured with objects since the baseline;
	// nil until every partition has been measured.
	seen map[int]bool
	// young: when each partition dealt within youngWindow was dealt.
	young map[int]time.Time
	// from: every partition's weight when the first of the young ones
	// was dealt (0 for the young themselves); nil when none is young.
	from map[int]uint64
	// before: the weights of the step before, from which a window opens.
	before map[int]uint64
	// moved: how many partitions the last deal moved.
	moved int
}

// deal is the moves table that deals the partitions measured with their
// first objects, and whether there is one to adopt: false when none
// appeared or dealing them moves nothing. merged are the weights the
// table's codes carry (measured, else the table's).
func (d *dealer) deal(now time.Time, current string, view Plan, measured, merged map[int]uint64) (string, bool) {
	before := d.before
	d.before = merged
	partitions := view.Ring.Partitions
	if d.seen == nil {
		if len(measured) < partitions {
			return "", false
		}
		d.seen, d.young = map[int]bool{}, map[int]time.Time{}
		for p, w := range measured {
			if w > 0 {
				d.seen[p] = true
			}
		}
		return "", false
	}
	for p, at := range d.young {
		if now.Sub(at) >= youngWindow {
			delete(d.young, p)
		}
	}
	if len(d.young) == 0 {
		d.from = nil
	}
	var fresh []int
	for p, w := range measured {
		if w > 0 && !d.seen[p] && p >= 0 && p < partitions {
			d.seen[p] = true
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 || len(view.Members) == 0 {
		return "", false
	}
	config := view.Ring
	config.WeightTable = current
	running := NewRing(config, view.Members)
	config.WeightTable = ""
	base := NewRing(config, view.Members)
	inRing := base.members
	if len(inRing) > partitions {
		inRing = inRing[:partitions]
	}
	heavy, pinned := base.heavyOf()
	capacity := func(m string) float64 {
		if m == heavy {
			return config.ColocatedShare
		}
		return 1
	}
	if d.from == nil {
		// From the step before: a namespace that landed in a partition
		// already seen, measured with the fresh ones, counts as theirs.
		d.from = map[int]uint64{}
		if before == nil {
			before = merged
		}
		for p, w := range before {
			d.from[p] = w
		}
		for _, p := range fresh {
			d.from[p] = 0
		}
	}
	// A member's young weight: what its partitions gained since the
	// window opened, the fresh ones' gain set aside to be dealt.
	load := map[string]uint64{}
	for p, w := range merged {
		if w > d.from[p] && !slices.Contains(fresh, p) {
			load[running.owners[p]] += w - d.from[p]
		}
	}
	// Heaviest first, as a greedy deal balances best; ties by partition.
	slices.SortFunc(fresh, func(a, b int) int {
		if merged[a] != merged[b] {
			if merged[a] > merged[b] {
				return -1
			}
			return 1
		}
		return a - b
	})
	_, moves, err := DecodeMovesTable(current, partitions)
	if err != nil {
		moves = map[int]string{}
	}
	d.moved = 0
	for _, p := range fresh {
		d.young[p] = now
		owner := running.owners[p]
		if p == pinned {
			load[owner] += merged[p]
			continue
		}
		best, bestLoad := owner, dealtLoad(load[owner]+merged[p], capacity(owner))
		for _, m := range inRing {
			if l := dealtLoad(load[m]+merged[p], capacity(m)); l < bestLoad {
				best, bestLoad = m, l
			}
		}
		load[best] += merged[p]
		if best == owner {
			continue
		}
		d.moved++
		if best == base.owners[p] {
			delete(moves, p)
		} else {
			moves[p] = best
		}
	}
	if d.moved == 0 {
		return "", false
	}
	codes := make([]byte, partitions)
	for p, w := range merged {
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

// dealtLoad is a member's young weight for its capacity; a member of no
// capacity takes a partition only where every member has none.
func dealtLoad(w uint64, capacity float64) float64 {
	if capacity <= 0 {
		return float64(w+1) * 1e12
	}
	return float64(w) / capacity
}
