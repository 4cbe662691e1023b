package shard

import (
	"maps"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// Who keeps the view's weight table, and when it changes it.
//
// Members agree on owners only if they place by the same table, and the
// weights they publish change all the time. So one member keeps the
// table: the view's first member by name. It publishes the table in its
// state, every member places by the table it reads there (viewOf), and
// the table is part of the ViewID, so a member that has not read the new
// table yet does not agree on the view, and the protocol's rules keep
// every move safe as they keep any other. The others copy the table into
// their own state, so that a member that becomes first starts from it
// rather than from nothing.
//
// Besides dealing new namespaces (weightdeal.go), the keeper changes the
// table only when the measured weights have put the busiest member above
// weightBound of the mean for weightHold on end,
// and a table of the measured weights would lower the busiest member's
// load by more than weightGain: a steady cluster never moves a partition,
// and a load that swings back and forth faster than weightHold moves
// none.

// weightHold is how long the load must stay uneven before the keeper
// adopts a new table. Weights reach the Leases every renewal (and are
// measured every 10 s), so this spans several measurements.
const weightHold = 60 * time.Second

// weightGain: a new table must lower the busiest member's load by more
// than this fraction, or moving partitions is not worth its handovers.
const weightGain = 0.05

// tableSettleMax bounds how long the keeper holds a new table back while
// the fleet has not settled on the current one (waitsForSettle): a
// handover takes the write gate's report tail (250 ms) and the protocol's
// rounds and gain (tens of ms); held for longer, a table only holds back
// the deal of namespaces that come with their work, and a member that
// never starts its share holds back every deal. Workload (a) at five
// replicas runs as fast with this hold as without it.
const tableSettleMax = 500 * time.Millisecond

// weightKeeper is the keeper's memory between steps.
type weightKeeper struct {
	// hold: weightHold unless set (Manager.WeightHold).
	hold        time.Duration
	unevenSince time.Time
	// adopted: the busiest member's load and the mean under the table
	// replaced, and the busiest's under the table adopted, by the weights
	// measured when the last table was adopted.
	adopted struct{ busiest, mean, then float64 }
	// judged: the last worthMoving answer, by view and tables. The keeper
	// runs on every step, and weights change far less often than that:
	// it builds no ring for a question it has answered.
	judged struct {
		view, current, candidate string
		worth                    bool
	}
	// moves: the last moves table computed, by view, table and weights
	// (PlacementWeightedMoves): balancing runs only when one changed, or
	// the partitions a deal fixed did.
	moves struct{ view, current, weights, table string }
	// newNamespaces, when set, are the namespaces created within a
	// window, by partition (Manager.NewNamespaces); dealer deals them
	// (weightdeal.go); dealt: the last table adopted was its deal.
	newNamespaces func(window time.Duration) FreshNamespaces
	dealer        dealer
	dealt         bool
	// young: what the participants publish of their young namespaces
	// (youngWeights), set each step.
	young map[string]uint64
	// table is the current table as the keeper last saw it, since when.
	table      string
	tableSince time.Time
}

// waitsForSettle says whether the keeper keeps the current table this
// step because the fleet has not settled on it (unsettled is why, "" when
// it has), for at most tableSettleMax after it was adopted.
//
// A table adopted while the last one is still being handed over chains
// the handovers: rule 3 starts a piece only once every participant has
// applied the newest view, so a partition the first table moved waits for
// the stops of the second as well (each up to the write gate's report
// tail). Namespaces created one after another are dealt a table each, and
// the first moments of a dealt namespace waited out two tails.
func (k *weightKeeper) waitsForSettle(now time.Time, current, unsettled string) bool {
	if current != k.table || k.tableSince.IsZero() {
		k.table, k.tableSince = current, now
	}
	return unsettled != "" && now.Sub(k.tableSince) < tableSettleMax
}

// movesTable is movesTable's answer for the weights, kept while the
// view, the table and the weights stay; current when there is none.
func (k *weightKeeper) movesTable(view Plan, current string, weights map[int]uint64) string {
	key := EncodeWeightTable(weights, view.Ring.Partitions) + k.dealer.fixedKey()
	if m := k.moves; m.view == view.View && m.current == current && m.weights == key {
		return m.table
	}
	table, err := movesTable(view, current, weights, k.dealer.fixed)
	if err != nil {
		table = current
	}
	k.moves.view, k.moves.current, k.moves.weights, k.moves.table = view.View, current, key, table
	return table
}

// followWeightTable sets local.WeightTable for this step: the view's
// first member's decision (decide) when this member is first, else a
// copy of the first member's table. Without placement by weight there is
// no table.
func followWeightTable(local *Local, peers []membership.Peer, decide func(current string, view Plan) string) {
	view, _ := viewOf(*local, peers)
	switch {
	case !ByWeight(view.Ring.Placement) || len(view.Members) == 0:
		local.WeightTable = ""
	case view.Members[0] == local.Self:
		local.WeightTable = decide(local.WeightTable, view)
	case view.Ring.WeightTable != "":
		local.WeightTable = view.Ring.WeightTable
	}
}

// next is the table the keeper publishes at now, given the current one,
// the view and the weights its members publish.
func (k *weightKeeper) next(now time.Time, current string, view Plan, measured map[int]uint64) string {
	partitions := view.Ring.Partitions
	merged := map[int]uint64{}
	if codes, err := tableCodes(current, view.Ring.Placement, partitions); err == nil {
		// A partition nobody publishes now (its owner left, or it is
		// loading) keeps its last weight.
		for p, c := range codes {
			if c != 0 {
				merged[p] = membership.WeightOfCode(c)
			}
		}
	}
	for p, w := range measured {
		merged[p] = w
	}
	// New namespaces are dealt by count, weights measured or not: a
	// fleet's first weights come 10 s after it starts.
	if byMoves(view.Ring.Placement) && k.newNamespaces != nil {
		if table, ok := k.dealer.deal(now, current, view, k.newNamespaces(YoungWindow), merged, k.young); ok {
			// The hold's clock runs on: namespaces created more often
			// than the hold must not keep it from balancing.
			k.dealt = true
			return table
		}
	}
	if len(measured) == 0 {
		k.unevenSince = time.Time{}
		return current
	}
	candidate := EncodeWeightTable(merged, partitions)
	if byMoves(view.Ring.Placement) {
		candidate = k.movesTable(view, current, merged)
	}
	if candidate == current || !k.worthMoving(view, current, candidate, measured) {
		k.unevenSince = time.Time{}
		return current
	}
	if k.unevenSince.IsZero() {
		k.unevenSince = now
	}
	hold := k.hold
	if hold <= 0 {
		hold = weightHold
	}
	if now.Sub(k.unevenSince) < hold {
		return current
	}
	k.unevenSince, k.dealt = time.Time{}, false
	return candidate
}

// worthMoving says whether, by the measured weights, the busiest member
// under the current table is above the bound and a ring of the candidate
// table would lower it by more than weightGain.
func (k *weightKeeper) worthMoving(view Plan, current, candidate string, measured map[int]uint64) bool {
	if j := k.judged; j.view == view.View && j.current == current && j.candidate == candidate {
		return j.worth
	}
	weights := make([]uint64, view.Ring.Partitions)
	for p, w := range measured {
		if p >= 0 && p < len(weights) {
			weights[p] = w
		}
	}
	config := view.Ring
	config.WeightTable = current
	now, mean := busiestLoad(NewRing(config, view.Members), weights)
	config.WeightTable = candidate
	then, _ := busiestLoad(NewRing(config, view.Members), weights)
	k.adopted.busiest, k.adopted.mean, k.adopted.then = now, mean, then
	worth := now > weightBound*mean && then < (1-weightGain)*now
	k.judged.view, k.judged.current, k.judged.candidate, k.judged.worth = view.View, current, candidate, worth
	return worth
}

// busiestLoad is the largest load of a member of r under weights, and
// the mean, the colocated singletons' owner carrying 1-ColocatedShare of
// a mean share besides its partitions. A member whose heaviest partition
// (besides the colocated singletons') alone is more than the mean, and
// that holds within weightBound of it, is left out: no placement
// lightens it by more than the bound's slack, and judging by it would
// hide how evenly the others are placed.
func busiestLoad(r *Ring, weights []uint64) (busiest, mean float64) {
	if len(r.members) == 0 {
		return 0, 0
	}
	heavy, home := r.heavyOf()
	load, total := memberLoads(r.owners, len(r.members), weights, heavy, r.config.ColocatedShare)
	mean = float64(total) / float64(len(r.members))
	for m, l := range load {
		floor := float64(floorLoad(r.owners, weights, l, m, home))
		if floor > mean && float64(l) <= weightBound*floor {
			continue
		}
		busiest = max(busiest, float64(l))
	}
	return busiest, mean
}

// youngWeights are what the participants publish of their young
// namespaces, own included.
func youngWeights(own membership.State, peers []membership.Peer) map[string]uint64 {
	out := maps.Clone(own.Young)
	if out == nil {
		out = map[string]uint64{}
	}
	for _, peer := range peers {
		if peer.Participant {
			maps.Copy(out, peer.State.Young)
		}
	}
	return out
}

// measuredWeights are the weights the participants publish of the
// partitions they run, own included.
func measuredWeights(own membership.State, peers []membership.Peer) map[int]uint64 {
	out := map[int]uint64{}
	for p, w := range own.Weights {
		out[p] = w
	}
	for _, peer := range peers {
		if !peer.Participant {
			continue
		}
		for p, w := range peer.State.Weights {
			out[p] = w
		}
	}
	return out
}
