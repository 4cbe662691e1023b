package shard

import (
	"maps"
	"math"
	"slices"
)

// dealRound is one deal's working state: the new namespaces in each
// partition, where each goes, and what that loads each member with.
type dealRound struct {
	inRing []string
	heavy  string
	pinned int
	// share is the colocated singletons' owner's capacity.
	share float64
	count map[int]uint64
	load  map[string]uint64
	owner map[int]string
}

func newDealRound(view Plan, running []string, base *Ring, inRing []string, count map[int]uint64) *dealRound {
	r := &dealRound{inRing: inRing, share: view.Ring.ColocatedShare, count: count, load: map[string]uint64{}, owner: map[int]string{}}
	r.heavy, r.pinned = base.heavyOf()
	for p, n := range count {
		r.load[running[p]] += n
		r.owner[p] = running[p]
	}
	return r
}

// capacity is m's share of new namespaces: the colocated singletons'
// owner has ColocatedShare of one.
func (r *dealRound) capacity(m string) float64 {
	if m == r.heavy {
		return r.share
	}
	return 1
}

// movable lists the partitions a deal may move: the partitions being
// dealt, which win ties, then those dealt within the window, which hold
// little yet (a namespace landing beside an earlier one can leave its
// member above its count with nothing new to move but that partition).
func (r *dealRound) movable(dealing []int) []int {
	movable := slices.Clone(dealing)
	for p := range r.count {
		if !slices.Contains(dealing, p) {
			movable = append(movable, p)
		}
	}
	slices.Sort(movable[len(dealing):])
	return movable
}

// fairs are the members' fair counts of the new namespaces: their
// capacities' shares of the count, rounded up, except that a partition
// counting more than its member's share (a busy tenant) is that member's
// fair count alone, and the others share what is left.
func (r *dealRound) fairs() map[string]uint64 {
	pool := slices.Clone(r.inRing)
	var total uint64
	for _, m := range pool {
		total += r.load[m]
	}
	out := map[string]uint64{}
	for {
		var capacities float64
		for _, m := range pool {
			capacities += r.capacity(m)
		}
		if capacities <= 0 {
			for _, m := range pool {
				out[m] = total
			}
			return out
		}
		m, n, ok := r.saturated(pool, float64(total)/capacities)
		if !ok {
			for _, m := range pool {
				out[m] = uint64(math.Ceil(float64(total) * r.capacity(m) / capacities))
			}
			return out
		}
		out[m], total = n, total-n
		pool = slices.DeleteFunc(pool, func(o string) bool { return o == m })
	}
}

// saturated is a member of pool holding a partition that counts more
// than its share at level (new namespaces per unit of capacity), with
// that count; the lowest partition first, so every keeper agrees.
func (r *dealRound) saturated(pool []string, level float64) (string, uint64, bool) {
	for _, p := range slices.Sorted(maps.Keys(r.count)) {
		m, n := r.owner[p], r.count[p]
		if c := r.capacity(m); c > 0 && slices.Contains(pool, m) && float64(n) > level*c {
			return m, n, true
		}
	}
	return "", 0, false
}

// spread moves, at most steps times, a partition off the member the most
// above its fair count while that lowers the pair's larger load; so a
// deal moves no more than it must.
func (r *dealRound) spread(movable []int, steps int) {
	for range steps {
		fair := r.fairs()
		from := ""
		for _, m := range r.inRing {
			if r.load[m] > fair[m] && (from == "" || r.load[m]-fair[m] > r.load[from]-fair[from]) {
				from = m
			}
		}
		if from == "" {
			return
		}
		moving, to := r.bestMove(from, movable)
		if moving < 0 {
			return
		}
		r.owner[moving] = to
		r.load[from] -= r.count[moving]
		r.load[to] += r.count[moving]
	}
}

// bestMove is the partition of from's to move, and where, that lowers the
// larger of the two members' loads the most, to the lightest receiver
// (-1: none lowers it).
func (r *dealRound) bestMove(from string, movable []int) (int, string) {
	after := dealtLoad(r.load[from], r.capacity(from))
	var received float64
	moving, to := -1, ""
	for _, p := range movable {
		if r.owner[p] != from || p == r.pinned {
			continue
		}
		for _, m := range r.inRing {
			if m == from {
				continue
			}
			// Of the moves that lower the pair's larger load the most,
			// the one to the lightest receiver: a receiver filled past
			// its fair count first would have to give a partition back.
			recv := dealtLoad(r.load[m]+r.count[p], r.capacity(m))
			if l := max(recv, dealtLoad(r.load[from]-r.count[p], r.capacity(from))); l < after || (moving >= 0 && l == after && recv < received) {
				moving, to, after, received = p, m, l, recv
			}
		}
	}
	return moving, to
}

// seat swaps partitions of the same count between a member holding a
// heavy namespace and another: one with work to come leaves the heavy
// namespace's member, one whose work is done takes its place. The loads
// stay what spread made them; what changes is who shares the heavy
// namespace's client budget and work queues, where a namespace with work
// to come waits behind it and one whose work is done waits for nothing
// (bench (h), a fleet of three: a deal counting the busy tenant as 17
// namespaces' worth, 18 each member's fair count, left one tenant beside
// it while other members held namespaces of (a) just done, and that
// tenant took 34 s where the others took 17).
func (r *dealRound) seat(movable []int, heavy, idle map[int]bool) {
	heavyAt := map[string]bool{}
	for p := range heavy {
		heavyAt[r.owner[p]] = true
	}
	for _, p := range movable {
		from := r.owner[p]
		if !heavyAt[from] || heavy[p] || idle[p] || p == r.pinned {
			continue
		}
		for _, q := range movable {
			to := r.owner[q]
			if heavyAt[to] || !idle[q] || r.count[q] != r.count[p] || q == r.pinned {
				continue
			}
			r.owner[p], r.owner[q] = to, from
			break
		}
	}
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
