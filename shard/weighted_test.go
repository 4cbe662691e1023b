package shard

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// clusterWeights places namespaces of the given sizes in partitions and
// returns each partition's objects.
func clusterWeights(config RingConfig, sizes []uint64) map[int]uint64 {
	weights := map[int]uint64{}
	for p := range config.Partitions {
		weights[p] = 0
	}
	for i, size := range sizes {
		weights[config.NamespacePartition(fmt.Sprintf("ns-%d", i))] += size
	}
	return weights
}

// zipfSizes are n namespace sizes from a Zipf law: a few namespaces hold
// most of the objects.
func zipfSizes(rnd *rand.Rand, n int) []uint64 {
	z := rand.NewZipf(rnd, 1.2, 1, 5000)
	sizes := make([]uint64, n)
	for i := range sizes {
		sizes[i] = 1 + z.Uint64()
	}
	return sizes
}

func equalSizes(n int, size uint64) []uint64 {
	sizes := make([]uint64, n)
	for i := range sizes {
		sizes[i] = size
	}
	return sizes
}

// TestPlacementByWeight: with the view's weight table the busiest member
// holds at most 1.1x the mean weight (the colocated singletons' owner
// counted with its singletons), leaving out a member whose one partition
// alone is more than that, unless partitions of these weights allow no
// better (no move or exchange of one of its partitions with any member
// lowers it); the colocated singletons stay; an empty table places as
// PlacementColocatedShare does. -v prints each case's worst cluster and
// the partitions moved.
func TestPlacementByWeight(t *testing.T) {
	base := DefaultRingConfig
	base.Colocated = "garbage-collector-controller,resourcequota-controller"
	for _, tc := range []struct {
		name  string
		sizes func(*rand.Rand) []uint64
	}{
		{"20 namespaces of 50 objects", func(*rand.Rand) []uint64 { return equalSizes(20, 50) }},
		{"100 namespaces of 20 objects", func(*rand.Rand) []uint64 { return equalSizes(100, 20) }},
		{"900 namespaces of 11 objects", func(*rand.Rand) []uint64 { return equalSizes(900, 11) }},
		{"100 namespaces, sizes from a Zipf law", func(r *rand.Rand) []uint64 { return zipfSizes(r, 100) }},
		{"900 namespaces, sizes from a Zipf law", func(r *rand.Rand) []uint64 { return zipfSizes(r, 900) }},
	} {
		for _, n := range []int{2, 3, 5, 8} {
			t.Run(fmt.Sprintf("%s, %d members", tc.name, n), func(t *testing.T) {
				var members []string
				for i := range n {
					members = append(members, fmt.Sprintf("fcm-%d", i))
				}
				var worstBefore, worstAfter float64
				var moved, seeds int
				for seed := range int64(20) {
					weights := clusterWeights(base, tc.sizes(rand.New(rand.NewSource(seed))))
					config := base
					config.Placement = PlacementWeightedMoves
					config.WeightTable = tableFor(t, config, members, weights)
					table, err := TableWeights(config.WeightTable, config.Placement, config.Partitions)
					if err != nil {
						t.Fatal(err)
					}
					plain := base
					plain.Placement = PlacementColocatedShare
					before, after := NewRing(plain, members), NewRing(config, members)
					busiestBefore, _ := busiest(before, table)
					busiestAfter, top := busiest(after, table)
					if busiestAfter > weightBound+0.001 {
						if p, q := improvement(after, table, top); p >= 0 {
							t.Errorf("seed %d: the busiest member holds %.3fx the mean, and giving away partition %d (for %d) would lower it", seed, busiestAfter, p, q)
						}
					}
					worstBefore, worstAfter = max(worstBefore, busiestBefore), max(worstAfter, busiestAfter)
					seeds++
					for p := range config.Partitions {
						if before.PartitionOwner(p) != after.PartitionOwner(p) {
							moved++
						}
					}
					if after.SingletonOwner("garbage-collector-controller") != before.SingletonOwner("garbage-collector-controller") {
						t.Errorf("seed %d: the colocated singletons moved", seed)
					}
				}
				t.Logf("busiest member against the mean: %.2fx before balancing, %.2fx after (worst of %d clusters); %.1f partitions moved on average", worstBefore, worstAfter, seeds, float64(moved)/float64(seeds))
			})
		}
	}
	t.Run("an empty table places as the ring does", func(t *testing.T) {
		members := []string{"a", "b", "c"}
		config := base
		config.Placement = PlacementWeightedMoves
		plain := base
		plain.Placement = PlacementColocatedShare
		weighted, ring := NewRing(config, members), NewRing(plain, members)
		if !slices.Equal(weighted.owners, ring.owners) {
			t.Errorf("owners differ without a table:\n%v\n%v", weighted.owners, ring.owners)
		}
	})
}

// tableFor is the table the keeper of members would adopt for weights on
// a ring with no table yet.
func tableFor(t *testing.T, config RingConfig, members []string, weights map[int]uint64) string {
	t.Helper()
	if config.Placement != PlacementWeightedMoves {
		return EncodeWeightTable(weights, config.Partitions)
	}
	table, err := movesTable(Plan{View: "v", Ring: config, Members: members}, "", weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// improvement is a partition p of member top whose move (q < 0) or
// exchange with partition q of another member lowers the larger of the
// two members' loads, or -1. Under the keeper's placements, a move or
// exchange of less than minMoveGain of the mean is none.
func improvement(r *Ring, weights []uint64, top string) (p, q int) {
	load := loads(r, weights)
	home := r.colocatedHome()
	var minGain uint64
	if byMoves(r.config.Placement) {
		var total uint64
		for _, l := range load {
			total += l
		}
		minGain = uint64(minMoveGain * float64(total) / float64(len(r.members)))
	}
	for a, ma := range r.owners {
		if ma != top || a == home || weights[a] == 0 || weights[a] < minGain {
			continue
		}
		for _, m := range r.members {
			if m != top && max(load[top]-weights[a], load[m]+weights[a]) < load[top] {
				return a, -1
			}
		}
		for b, mb := range r.owners {
			if mb == top || b == home || weights[b] >= weights[a] {
				continue
			}
			d := weights[a] - weights[b]
			if d >= minGain && max(load[top]-d, load[mb]+d) < load[top] {
				return a, b
			}
		}
	}
	return -1, -1
}

func loads(r *Ring, weights []uint64) map[string]uint64 {
	heavy, _ := r.heavyOf()
	load, _ := memberLoads(r.owners, len(r.members), weights, heavy, r.config.ColocatedShare)
	return load
}

// busiest is the largest member's weight over the mean (the colocated
// singletons' owner carrying 1-ColocatedShare of a mean share) and that
// member, leaving out, as the keeper does (busiestLoad), a member whose
// heaviest partition alone is more than the mean and that holds within
// weightBound of it.
func busiest(r *Ring, weights []uint64) (float64, string) {
	heavy, home := r.heavyOf()
	load, total := memberLoads(r.owners, len(r.members), weights, heavy, r.config.ColocatedShare)
	mean := float64(total) / float64(len(r.members))
	var top string
	for _, m := range r.members {
		floor := float64(floorLoad(r.owners, weights, load[m], m, home))
		if floor > mean && float64(load[m]) <= weightBound*floor {
			continue
		}
		if top == "" || load[m] > load[top] {
			top = m
		}
	}
	if top == "" {
		return 0, ""
	}
	return float64(load[top]) / mean, top
}

// TestWeightTable: a table reads back as the codes' weights, a partition
// not measured weighs the mean of the others, and a table of another
// partition count is refused.
func TestWeightTable(t *testing.T) {
	table := EncodeWeightTable(map[int]uint64{0: 100, 2: 300}, 4)
	got, err := DecodeWeightTable(table, 4)
	if err != nil {
		t.Fatal(err)
	}
	a, c := membership.Quantized(100), membership.Quantized(300)
	if want := []uint64{a, (a + c) / 2, c, (a + c) / 2}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := DecodeWeightTable(table, 8); err == nil {
		t.Error("a table of 4 partitions read for a ring of 8")
	}
	if EncodeWeightTable(nil, 4) != "" {
		t.Error("an empty table encodes as something")
	}
}

func TestFewestMoves(t *testing.T) {
	for _, tc := range []struct {
		name      string
		owners    map[int]string
		weights   map[int]uint64
		colocated string
		want      int
	}{
		{"even", map[int]string{0: "a", 1: "b"}, map[int]uint64{0: 10, 1: 10}, "", 0},
		{"one heavy member sheds its heaviest first", map[int]string{0: "a", 1: "a", 2: "a", 3: "b"}, map[int]uint64{0: 50, 1: 5, 2: 5, 3: 0}, "", 1},
		{"many light partitions", map[int]string{0: "a", 1: "a", 2: "a", 3: "a", 4: "b"}, map[int]uint64{0: 10, 1: 10, 2: 10, 3: 10, 4: 0}, "", 2},
		{"the heaviest partition alone is the bound", map[int]string{0: "a", 1: "a", 2: "b"}, map[int]uint64{0: 100, 1: 10, 2: 1}, "", 1},
		{"nothing owned", map[int]string{}, map[int]uint64{}, "", 0},
		// a 60, b 40, the colocated b carries 25 more: mean 62.5, limit 68.75.
		{"the colocated owner's half share counts", map[int]string{0: "a", 1: "b", 2: "b"}, map[int]uint64{0: 60, 1: 20, 2: 20}, "b", 0},
		// b 80 + 50 = 130 against a limit of 68.75: two of its 20s go.
		{"the colocated owner sheds", map[int]string{0: "a", 1: "b", 2: "b", 3: "b", 4: "b"}, map[int]uint64{0: 20, 1: 20, 2: 20, 3: 20, 4: 20}, "b", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FewestMoves(tc.owners, tc.weights, tc.colocated, 0.5, 1.1); got != tc.want {
				t.Errorf("FewestMoves = %d, want %d", got, tc.want)
			}
		})
	}
}

// shifted moves half of sizes' objects: the heaviest namespaces that
// hold half are emptied and their sizes dealt to light namespaces chosen
// by rnd.
func shifted(rnd *rand.Rand, sizes []uint64) []uint64 {
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(sizes[b]) - int(sizes[a]) })
	var total, moved uint64
	for _, s := range sizes {
		total += s
	}
	out := slices.Clone(sizes)
	heavy := 0
	for ; heavy < len(order) && 2*moved < total; heavy++ {
		moved += sizes[order[heavy]]
	}
	light := slices.Clone(order[heavy:])
	rnd.Shuffle(len(light), func(i, j int) { light[i], light[j] = light[j], light[i] })
	for i, ns := range order[:heavy] {
		out[light[i]] += sizes[ns]
		out[ns] = 0
	}
	return out
}

// TestWeightKeeperFollowsAShift: on a cluster balanced by a table, half
// the objects move to other namespaces; the table the keeper adopts
// brings the busiest member within the bound, unless one partition alone
// outweighs it or no move or exchange of the busiest member's partitions
// lowers it. -v prints the partitions it moved against the fewest that
// reach the bound from where they were (FewestMoves): the placement
// balances from the ring's own, so a new table undoes the earlier moves
// it no longer needs besides making its own.
func TestWeightKeeperFollowsAShift(t *testing.T) {
	base := DefaultRingConfig
	base.Colocated = "garbage-collector-controller,resourcequota-controller"
	base.Placement = PlacementWeightedMoves
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		sizes func(*rand.Rand) []uint64
	}{
		{"100 namespaces, sizes from a Zipf law", func(r *rand.Rand) []uint64 { return zipfSizes(r, 100) }},
		{"900 namespaces, sizes from a Zipf law", func(r *rand.Rand) []uint64 { return zipfSizes(r, 900) }},
		{"100 namespaces of 20 objects", func(*rand.Rand) []uint64 { return equalSizes(100, 20) }},
	} {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("%s, %d members", tc.name, n), func(t *testing.T) {
				var members []string
				for i := range n {
					members = append(members, fmt.Sprintf("fcm-%d", i))
				}
				var moved, fewest, adopted int
				for seed := range int64(20) {
					rnd := rand.New(rand.NewSource(seed))
					sizes := tc.sizes(rnd)
					first := clusterWeights(base, sizes)
					config := base
					config.WeightTable = tableFor(t, config, members, first)
					view := Plan{View: "v", Ring: config, Members: members}
					after := clusterWeights(base, shifted(rnd, sizes))
					var k weightKeeper
					k.next(start, config.WeightTable, view, after)
					table := k.next(start.Add(weightHold), config.WeightTable, view, after)
					before := NewRing(config, members)
					owners := map[int]string{}
					for p := range config.Partitions {
						owners[p] = before.PartitionOwner(p)
					}
					colocated := before.SingletonOwner("garbage-collector-controller")
					fewest += FewestMoves(owners, after, colocated, config.ColocatedShare, weightBound)
					if table == config.WeightTable {
						continue
					}
					adopted++
					next := config
					next.WeightTable = table
					ring := NewRing(next, members)
					for p := range config.Partitions {
						if ring.PartitionOwner(p) != owners[p] {
							moved++
						}
					}
					exact, err := TableWeights(table, config.Placement, config.Partitions)
					if err != nil {
						t.Fatal(err)
					}
					if b, top := busiest(ring, exact); b > weightBound+0.001 {
						if p, q := improvement(ring, exact, top); p >= 0 {
							t.Errorf("seed %d: after the shift the busiest member holds %.3fx the mean, and giving away partition %d (for %d) would lower it", seed, b, p, q)
						}
					}
				}
				t.Logf("%d of 20 clusters adopted a new table; %d partitions moved, at least %d needed", adopted, moved, fewest)
				if adopted == 0 {
					t.Errorf("no cluster adopted a table after half its objects moved")
				}
				if moved > 2*max(fewest, 1) {
					t.Errorf("the keeper moved %d partitions over 20 clusters; %d would have reached the bound", moved, fewest)
				}
			})
		}
	}
}
