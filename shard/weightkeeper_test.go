package shard

import (
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// weightedView is the view of members a, b and c placing by weight, as
// a sees it with table as its own.
func weightedView(table string) (Local, []membership.Peer, Plan) {
	config := DefaultRingConfig
	config.Partitions = 8
	local := Local{Self: "a", Ring: config, Placements: Placements, WeightTable: table}
	var peers []membership.Peer
	for _, name := range []string{"b", "c"} {
		peers = append(peers, membership.Peer{Name: name, Participant: true, Supports: membership.Supports{Placements: Placements}})
	}
	view, _ := viewOf(local, peers)
	return local, peers, view
}

// skewed puts most of the weight in the partitions the ring gives a.
func skewed(view Plan) map[int]uint64 {
	ring := NewRing(view.Ring, view.Members)
	weights := map[int]uint64{}
	for p := range view.Ring.Partitions {
		weights[p] = 10
		if ring.PartitionOwner(p) == "a" {
			weights[p] = 1000
		}
	}
	return weights
}

// TestWeightKeeper: the keeper adopts a table of the measured weights
// only once the load has stayed uneven for weightHold, never for a load
// that is even or that swings back within it, and keeps the last weight
// of a partition nobody publishes.
func TestWeightKeeper(t *testing.T) {
	_, _, view := weightedView("")
	uneven := skewed(view)
	even := map[int]uint64{}
	for p := range view.Ring.Partitions {
		even[p] = 100
	}
	start := time.Unix(1000, 0)
	type step struct {
		after    time.Duration
		measured map[int]uint64
		changes  bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"an even load never moves anything", []step{{0, even, false}, {weightHold, even, false}, {3 * weightHold, even, false}}},
		{"an uneven load moves after the hold", []step{{0, uneven, false}, {weightHold / 2, uneven, false}, {weightHold, uneven, true}}},
		{"a load that swings back within the hold moves nothing", []step{
			{0, uneven, false}, {weightHold / 2, even, false}, {weightHold, uneven, false}, {weightHold + weightHold/2, even, false}, {2 * weightHold, uneven, false},
		}},
		{"nothing measured keeps the table", []step{{0, nil, false}, {2 * weightHold, nil, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k weightKeeper
			table := ""
			for _, s := range tc.steps {
				next := k.next(start.Add(s.after), table, view, s.measured)
				if changed := next != table; changed != s.changes {
					t.Fatalf("after %v: table changed %v, want %v", s.after, changed, s.changes)
				}
				table = next
			}
		})
	}
	t.Run("the adopted table evens the load and keeps what nobody publishes", func(t *testing.T) {
		var k weightKeeper
		k.next(start, "", view, uneven)
		table := k.next(start.Add(weightHold), "", view, uneven)
		weights, err := TableWeights(table, view.Ring.Placement, view.Ring.Partitions)
		if err != nil || weights == nil {
			t.Fatalf("table %q: %v", table, err)
		}
		config := view.Ring
		config.WeightTable = table
		loads := make([]uint64, len(weights))
		for p := range weights {
			loads[p] = uneven[p]
		}
		before, mean := busiestLoad(NewRing(view.Ring, view.Members), loads)
		after, _ := busiestLoad(NewRing(config, view.Members), loads)
		if after >= before || after > 1.5*mean {
			t.Errorf("busiest member %.0f before, %.0f after (mean %.0f)", before, after, mean)
		}
		// Partition 0's owner leaves: nobody publishes its weight now.
		partial := map[int]uint64{}
		for p, w := range uneven {
			if p != 0 {
				partial[p] = w
			}
		}
		var k2 weightKeeper
		k2.next(start, table, view, partial)
		if got := k2.next(start.Add(weightHold), table, view, partial); got != table {
			if w, _ := TableWeights(got, view.Ring.Placement, view.Ring.Partitions); w[0] != weights[0] {
				t.Errorf("partition 0 weighs %d after its owner left, was %d", w[0], weights[0])
			}
		}
	})
}

// TestFollowWeightTable: the view's first member decides the table; the
// others copy it (and keep their copy while the first publishes none);
// without placement by weight there is none.
func TestFollowWeightTable(t *testing.T) {
	decided := func(string, Plan) string { return "decided" }
	local, peers, _ := weightedView("old")
	followWeightTable(&local, peers, decided)
	if local.WeightTable != "decided" {
		t.Errorf("the first member's table is %q, want its decision", local.WeightTable)
	}
	local.Self = "b"
	peers[0].Name = "a"
	peers[0].State.Table = "keepers"
	local.WeightTable = "old"
	followWeightTable(&local, peers, decided)
	if local.WeightTable != "keepers" {
		t.Errorf("a follower's table is %q, want the first member's", local.WeightTable)
	}
	peers[0].State.Table = ""
	followWeightTable(&local, peers, decided)
	if local.WeightTable != "keepers" {
		t.Errorf("a follower dropped its copy when the first member published none: %q", local.WeightTable)
	}
	local.Placements = PlacementsByCount
	followWeightTable(&local, peers, decided)
	if local.WeightTable != "" {
		t.Errorf("a table without placement by weight: %q", local.WeightTable)
	}
}

func TestWaitsForSettle(t *testing.T) {
	start := time.Unix(1000, 0)
	type step struct {
		after     time.Duration
		table     string
		unsettled string
		want      bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{name: "settled: a new table may come at once", steps: []step{
			{after: 0, table: "t1", want: false},
			{after: 10 * time.Millisecond, table: "t1", want: false},
		}},
		{name: "unsettled: held while the current table is young", steps: []step{
			{after: 0, table: "t1", unsettled: "b does not run partition/3", want: true},
			{after: tableSettleMax - time.Millisecond, table: "t1", unsettled: "b does not run partition/3", want: true},
		}},
		{name: "unsettled past the bound: no longer held", steps: []step{
			{after: 0, table: "t1", unsettled: "b has not applied the view", want: true},
			{after: tableSettleMax, table: "t1", unsettled: "b has not applied the view", want: false},
		}},
		{name: "a new table starts the bound again", steps: []step{
			{after: 0, table: "t1", unsettled: "c does not run partition/0", want: true},
			{after: tableSettleMax, table: "t2", unsettled: "c does not run partition/0", want: true},
			{after: 2*tableSettleMax - time.Millisecond, table: "t2", unsettled: "c does not run partition/0", want: true},
			{after: 2 * tableSettleMax, table: "t2", unsettled: "c does not run partition/0", want: false},
		}},
		{name: "settling ends the hold before the bound", steps: []step{
			{after: 0, table: "t1", unsettled: "a does not run partition/1", want: true},
			{after: 300 * time.Millisecond, table: "t1", want: false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var k weightKeeper
			for i, s := range tc.steps {
				if got := k.waitsForSettle(start.Add(s.after), s.table, s.unsettled); got != s.want {
					t.Errorf("step %d (+%v, table %q, unsettled %q): waitsForSettle = %v, want %v", i, s.after, s.table, s.unsettled, got, s.want)
				}
			}
		})
	}
}
