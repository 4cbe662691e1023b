package shard

import (
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
// them by count as they appear, without the hold: a partition that holds
// a namespace created within youngWindow that the keeper has not dealt
// yet goes, with every new namespace it holds, to the member with the
// fewest new namespaces for its capacity, the colocated singletons'
// owner having ColocatedShare of one and the partition's current owner
// winning ties, so that a deal moves only what it must: namespaces
// created one at a time, further apart than youngWindow, move nothing.
//
// While a dealt partition is young the keeper adopts no table by the
// hold: the hold balances what partitions hold, and a namespace in its
// first minute holds little of the work it brings.
//
// Each new namespace deals its partition once, so moves are bounded by
// the namespaces created, and a cluster that creates none deals nothing.

// youngWindow is how long a namespace counts as new: as long as the
// keeper's default hold, so that a deal spreads the namespaces a tenant
// or a rollout creates over a minute, and the hold balances what they
// hold after that.
const youngWindow = weightHold

// dealer is the keeper's memory for dealing.
type dealer struct {
	// dealt: the new namespaces dealt, by when they were.
	dealt map[string]time.Time
	// young: when each partition dealt within youngWindow was dealt.
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
	for ns, at := range d.dealt {
		if _, ok := fresh[ns]; !ok || now.Sub(at) >= youngWindow {
			delete(d.dealt, ns)
		}
	}
	partitions := view.Ring.Partitions
	count := map[int]uint64{}
	var dealing []int
	for ns, p := range fresh {
		if p < 0 || p >= partitions {
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
	load := map[string]uint64{}
	for p, n := range count {
		if !slices.Contains(dealing, p) {
			load[running.owners[p]] += n
		}
	}
	// Most new namespaces first, as a greedy deal balances best.
	slices.SortFunc(dealing, func(a, b int) int {
		if count[a] != count[b] {
			if count[a] > count[b] {
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
	if d.young == nil {
		d.young = map[int]time.Time{}
	}
	d.moved = 0
	for _, p := range dealing {
		d.young[p] = now
		owner := running.owners[p]
		best := owner
		if p != pinned {
			bestLoad := dealtLoad(load[owner]+count[p], capacity(owner))
			for _, m := range inRing {
				if l := dealtLoad(load[m]+count[p], capacity(m)); l < bestLoad {
					best, bestLoad = m, l
				}
			}
		}
		load[best] += count[p]
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
// no capacity takes a partition only where every member has none.
func dealtLoad(n uint64, capacity float64) float64 {
	if capacity <= 0 {
		return float64(n+1) * 1e12
	}
	return float64(n) / capacity
}
