package shard

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// Placement by weight: the ring's placement, then the fewest moves that
// bring every member within weightBound of the mean weight.
//
// The ring balances partitions by count, but the work (and the memory)
// follows what the namespaces in a partition hold, and namespaces fall
// into partitions unevenly: with 20 namespaces one of five replicas often
// holds six or seven of them, and the fleet finishes when that replica
// does. A weight table (membership's one-byte codes, one per partition,
// kept by the view's first member: weightkeeper.go) says what each
// partition holds; every member places by the same table, which is part
// of the ViewID, so that members agree on owners exactly as they agree
// on members.

// weightBound: after balancing, no member holds more than this times the
// mean weight, unless one partition alone outweighs that.
const weightBound = 1.1

// EncodeWeightTable writes a partition weight table: one code per
// partition, 0 for a partition not measured.
func EncodeWeightTable(weights map[int]uint64, partitions int) string {
	if len(weights) == 0 {
		return ""
	}
	codes := make([]byte, partitions)
	for p, w := range weights {
		if p >= 0 && p < partitions {
			codes[p] = membership.WeightCode(w)
		}
	}
	return base64.RawURLEncoding.EncodeToString(codes)
}

// DecodeWeightTable reads a table written by EncodeWeightTable for
// partitions; a partition not measured weighs as the mean of the
// measured ones, so that it neither attracts nor repels the others.
func DecodeWeightTable(table string, partitions int) ([]uint64, error) {
	codes, err := weightCodes(table, partitions)
	if err != nil {
		return nil, err
	}
	return weightsOfCodes(codes), nil
}

// TableWeights are the weights a table of placement says, as
// DecodeWeightTable reads them.
func TableWeights(table, placement string, partitions int) ([]uint64, error) {
	codes, err := tableCodes(table, placement, partitions)
	if err != nil {
		return nil, err
	}
	return weightsOfCodes(codes), nil
}

// weightsOfCodes are the weights of codes, a code 0 weighing the mean of
// the others; nil when none is measured.
func weightsOfCodes(codes []byte) []uint64 {
	weights := make([]uint64, len(codes))
	var sum uint64
	measured := 0
	for p, c := range codes {
		if c != 0 {
			weights[p] = membership.WeightOfCode(c)
			sum += weights[p]
			measured++
		}
	}
	if measured == 0 {
		return nil
	}
	for p, c := range codes {
		if c == 0 {
			weights[p] = sum / uint64(measured)
		}
	}
	return weights
}

// tableCodes are the weight codes of a table of placement.
func tableCodes(table, placement string, partitions int) ([]byte, error) {
	if byMoves(placement) {
		codes, _, err := DecodeMovesTable(table, partitions)
		return codes, err
	}
	return weightCodes(table, partitions)
}

// weightCodes are the codes of a table for partitions.
func weightCodes(table string, partitions int) ([]byte, error) {
	codes, err := base64.RawURLEncoding.DecodeString(table)
	if err != nil {
		return nil, fmt.Errorf("decoding weight table: %w", err)
	}
	if len(codes) != partitions {
		return nil, fmt.Errorf("weight table of %d partitions, the ring has %d", len(codes), partitions)
	}
	return codes, nil
}

// balanceByWeight moves partitions of owners (partition -> member, over
// the sorted members) from the heaviest member to the lightest until the
// heaviest holds at most weightBound times the mean, or no move makes
// the heavier of the two lighter. The owner of the colocated singletons
// (heavy, "" if none) carries 1-heavyShare of a mean share besides its
// partitions, as the ring's placement gives it heavyShare of an even
// share of them; their partition, pinned, stays where it is, for the
// singletons follow it; so do the partitions fixed says (nil: none).
// Each step moves the heaviest partition that fits
// under the bound at the receiver, else the one that evens the pair
// best, else exchanges the pair of partitions that evens it best: few
// moves, and a result that depends only on its inputs. When neither
// lightens the heaviest member, each (the keeper of
// PlacementWeightedMoves) tries the other members as receivers, lightest
// first, and then sets it aside until another member has shed, going on
// with the next heaviest, which may still be above the bound; a member
// within weightBound of what its heaviest partition alone makes it hold
// (floorLoad) is set aside too. Without each, balancing ends where the
// heaviest cannot be lightened (PlacementWeighted).
func balanceByWeight(owners []string, members []string, weights []uint64, heavy string, heavyShare float64, pinned int, fixed func(int) bool, each bool) {
	if len(weights) != len(owners) || len(members) < 2 {
		return
	}
	load, total := memberLoads(owners, len(members), weights, heavy, heavyShare)
	bound := uint64(weightBound * float64(total) / float64(len(members)))
	var minGain uint64
	if each {
		minGain = uint64(minMoveGain * float64(total) / float64(len(members)))
	}
	candidates := slices.Clone(members)
	steps := len(owners)
	if each {
		// A member set aside comes back after any other member sheds,
		// for that may have made room: room for every member's try
		// after every move.
		steps *= len(members)
	}
	for range steps {
		if len(candidates) == 0 {
			return
		}
		from, _ := extremes(candidates, load)
		_, to := extremes(members, load)
		if load[from] <= bound {
			return
		}
		if each && load[from] <= uint64(weightBound*float64(floorLoad(owners, weights, load[from], from, pinned))) {
			// Its heaviest partition alone keeps it above the bound:
			// shedding the light ones would gain less than the bound's
			// slack and cost a handover each.
			candidates = slices.DeleteFunc(candidates, func(m string) bool { return m == from })
			continue
		}
		if shed(owners, weights, load, from, to, bound, minGain, pinned, fixed) {
			candidates = slices.Clone(members)
			continue
		}
		if !each {
			return
		}
		// Neither with the lightest: try the others, lightest first,
		// before setting the member aside.
		others := slices.Clone(members)
		slices.SortStableFunc(others, func(a, b string) int { return cmp.Compare(load[a], load[b]) })
		if slices.ContainsFunc(others, func(m string) bool {
			return m != from && m != to && shed(owners, weights, load, from, m, bound, minGain, pinned, fixed)
		}) {
			candidates = slices.Clone(members)
		} else {
			candidates = slices.DeleteFunc(candidates, func(m string) bool { return m == from })
		}
	}
}

// minMoveGain: the keeper (balanceByWeight's each) makes no move or
// exchange that lightens a member by less than this fraction of the mean
// load: it is not worth a handover. Without it, balancing a member that
// cannot reach the bound sheds every partition that still fits elsewhere,
// down to partitions of one object; at 256 partitions most are that
// small, and a table made 19 moves where one reached the bound
// (TestWeightKeeperFollowsAShift).
const minMoveGain = 0.02

// floorLoad is the load member (of load) would keep holding only its
// heaviest partition besides the pinned one: no placement takes it lower
// without moving that partition onto someone else.
func floorLoad(owners []string, weights []uint64, load uint64, member string, pinned int) uint64 {
	var held, heaviest uint64
	for p, m := range owners {
		if m == member && p != pinned {
			held += weights[p]
			heaviest = max(heaviest, weights[p])
		}
	}
	return load - held + heaviest
}

// shed moves a partition of from to to, or else exchanges one for a
// lighter one of to's, when that lowers the pair's peak, and says
// whether it did.
func shed(owners []string, weights []uint64, load map[string]uint64, from, to string, bound, minGain uint64, pinned int, fixed func(int) bool) bool {
	if p := pickMove(owners, weights, from, load[from], load[to], bound, minGain, pinned, fixed); p >= 0 {
		owners[p] = to
		load[from] -= weights[p]
		load[to] += weights[p]
		return true
	}
	a, b := pickSwap(owners, weights, from, to, load[from], load[to], minGain, pinned, fixed)
	if a < 0 {
		return false
	}
	owners[a], owners[b] = to, from
	load[from] = load[from] - weights[a] + weights[b]
	load[to] = load[to] + weights[a] - weights[b]
	return true
}

// pickSwap is the pair of partitions, a of heavy and b of light, whose
// exchange lowers the pair's peak the most, or -1, -1 when none does.
func pickSwap(owners []string, weights []uint64, heavy, light string, heavyLoad, lightLoad, minGain uint64, pinned int, fixed func(int) bool) (int, int) {
	bestA, bestB := -1, -1
	bestPeak := heavyLoad
	for a, ma := range owners {
		if ma != heavy || a == pinned || fixed != nil && fixed(a) {
			continue
		}
		for b, mb := range owners {
			if mb != light || b == pinned || fixed != nil && fixed(b) || weights[b] >= weights[a] {
				continue
			}
			d := weights[a] - weights[b]
			if peak := max(heavyLoad-d, lightLoad+d); d >= minGain && peak < bestPeak {
				bestA, bestB, bestPeak = a, b, peak
			}
		}
	}
	return bestA, bestB
}

// memberLoads is each member's weight under owners (partition ->
// member, over members members) and their sum, the colocated singletons'
// owner (heavy, "" if none) carrying 1-heavyShare of a mean share besides
// its partitions.
func memberLoads(owners []string, members int, weights []uint64, heavy string, heavyShare float64) (map[string]uint64, uint64) {
	load := map[string]uint64{}
	var total uint64
	for p, m := range owners {
		load[m] += weights[p]
		total += weights[p]
	}
	if heavy != "" {
		extra := uint64((1 - heavyShare) * float64(total) / float64(members))
		load[heavy] += extra
		total += extra
	}
	return load, total
}

// heavyOf is the colocated singletons' owner and their pinned partition
// in r ("", -1 without colocated singletons).
func (r *Ring) heavyOf() (string, int) {
	if r.config.Colocated == "" || len(r.members) == 0 {
		return "", -1
	}
	home := r.colocatedHome()
	return r.owners[home], home
}

// extremes are the heaviest and lightest members (ties: first by name).
func extremes(members []string, load map[string]uint64) (heavy, light string) {
	heavy, light = members[0], members[0]
	for _, m := range members[1:] {
		if load[m] > load[heavy] {
			heavy = m
		}
		if load[m] < load[light] {
			light = m
		}
	}
	return heavy, light
}

// pickMove is the partition of heavy to move to the member of load
// lightLoad, or -1 when no move makes the heavier of the two lighter.
func pickMove(owners []string, weights []uint64, heavy string, heavyLoad, lightLoad, bound, minGain uint64, pinned int, fixed func(int) bool) int {
	var candidates []int
	for p, m := range owners {
		if m == heavy && p != pinned && (fixed == nil || !fixed(p)) && weights[p] > 0 && weights[p] >= minGain && lightLoad+weights[p] < heavyLoad {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		return -1
	}
	// Heaviest first, then by number: the first that fits under the bound
	// at the receiver moves the most weight in one move.
	sort.SliceStable(candidates, func(i, j int) bool { return weights[candidates[i]] > weights[candidates[j]] })
	for _, p := range candidates {
		if lightLoad+weights[p] <= bound {
			return p
		}
	}
	best := -1
	var bestPeak uint64
	for _, p := range candidates {
		peak := max(heavyLoad-weights[p], lightLoad+weights[p])
		if best < 0 || peak < bestPeak {
			best, bestPeak = p, peak
		}
	}
	return best
}

// MemberLoads is each owner's load under weights (owners: partition ->
// member) and the mean load, as balancing counts them: the colocated
// singletons' owner carries 1-colocatedShare of a mean share besides its
// partitions. It reads placements from outside the ring (the Leases).
func MemberLoads(owners map[int]string, weights map[int]uint64, colocated string, colocatedShare float64) (map[string]float64, float64) {
	load := map[string]float64{}
	total := 0.0
	for p, m := range owners {
		load[m] += float64(weights[p])
		total += float64(weights[p])
	}
	if len(load) == 0 || total == 0 {
		return load, 1
	}
	if _, ok := load[colocated]; ok {
		extra := (1 - colocatedShare) * total / float64(len(load))
		load[colocated] += extra
		total += extra
	}
	return load, total / float64(len(load))
}

// FewestMoves is a lower bound on the partitions to move from owners
// (partition -> member) for no member's load (MemberLoads) to exceed
// bound times the mean, or the heaviest partition where that alone is
// more. Each member above sheds its heaviest partitions first, which
// needs the fewest. It judges how many partitions a placement moved
// against how few it could.
func FewestMoves(owners map[int]string, weights map[int]uint64, colocated string, colocatedShare, bound float64) int {
	load, mean := MemberLoads(owners, weights, colocated, colocatedShare)
	held := map[string][]uint64{}
	var heaviest uint64
	for p, m := range owners {
		held[m] = append(held[m], weights[p])
		heaviest = max(heaviest, weights[p])
	}
	limit := max(bound*mean, float64(heaviest))
	moves := 0
	for m, l := range load {
		ws := held[m]
		sort.Slice(ws, func(i, j int) bool { return ws[i] > ws[j] })
		for _, w := range ws {
			if l <= limit {
				break
			}
			l -= float64(w)
			moves++
		}
	}
	return moves
}
