package shard

import (
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
// them by count as they appear, without the hold: a partition that holds
// a namespace created within youngWindow that the keeper has not dealt
// yet is dealt with every new namespace it holds: from where the
// partitions run, one moves off the member the most above its fair count
// of new namespaces (its capacity's share, the colocated singletons'
// owner having ColocatedShare of one) while that lowers the pair's
// larger count, so that a deal moves only what it must: namespaces
// created one at a time, further apart than youngWindow, move nothing.
//
// While a dealt partition is young the keeper adopts no table by the
// hold: the hold balances what partitions hold, and a namespace in its
// first minute holds little of the work it brings.
//
// A deal comes only with a new namespace and moves only while a member
// is above its fair count, so moves are bounded by the namespaces
// created, and a cluster that creates none deals nothing. Partitions
// dealt within the window may move again (a namespace landing beside an
// earlier one can leave its member above its count with nothing new to
// move): they hold little yet.

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
	if d.young == nil {
		d.young = map[int]time.Time{}
	}
	load := map[string]uint64{}
	owner := map[int]string{}
	for p, n := range count {
		load[running.owners[p]] += n
	}
	// Movable: the partitions being dealt first, then those dealt within
	// the window, which hold little yet (a namespace landing beside an
	// earlier one can leave its member above its count with nothing new
	// to move but that partition).
	slices.Sort(dealing)
	movable := slices.Clone(dealing)
	for p := range count {
		owner[p] = running.owners[p]
		if !slices.Contains(dealing, p) {
			movable = append(movable, p)
		}
	}
	slices.Sort(movable[len(dealing):])
	for _, p := range dealing {
		d.young[p] = now
	}
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
