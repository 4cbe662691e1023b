package shard

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

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
// counted with its singletons), unless one partition alone is more than
// that or partitions of these weights allow no better (no move or
// exchange of one of its partitions with any member lowers it); the
// colocated singletons stay; an empty table places as
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
					config.Placement = PlacementWeighted
					config.WeightTable = EncodeWeightTable(weights, config.Partitions)
					table, err := DecodeWeightTable(config.WeightTable, config.Partitions)
					if err != nil {
						t.Fatal(err)
					}
					plain := base
					plain.Placement = PlacementColocatedShare
					before, after := NewRing(plain, members), NewRing(config, members)
					busiestBefore, _ := busiest(before, table)
					busiestAfter, alone := busiest(after, table)
					if busiestAfter > weightBound+0.001 && !alone {
						if p, q := improvement(after, table); p >= 0 {
							t.Errorf("seed %d: the busiest member holds %.3fx the mean, and giving away partition %d (for %d) would lower it", seed, busiestAfter, p, q)
						}
						alone = true // as even as partitions of these weights allow
					}
					worstBefore, worstAfter = max(worstBefore, busiestBefore), max(worstAfter, busiestAfter)
					seeds++
					for p := range config.Partitions {
						if before.PartitionOwner(p) != after.PartitionOwner(p) {
							moved++
						}
					}
					if busiestAfter > weightBound+0.001 && !alone {
						t.Errorf("seed %d: the busiest member holds %.3fx the mean (%.3fx before balancing)", seed, busiestAfter, busiestBefore)
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
		config.Placement = PlacementWeighted
		plain := base
		plain.Placement = PlacementColocatedShare
		weighted, ring := NewRing(config, members), NewRing(plain, members)
		if !slices.Equal(weighted.owners, ring.owners) {
			t.Errorf("owners differ without a table:\n%v\n%v", weighted.owners, ring.owners)
		}
	})
}

// improvement is a partition p of the busiest member whose move (q < 0)
// or exchange with partition q of another member lowers the larger of the
// two members' loads, or -1.
func improvement(r *Ring, weights []uint64) (p, q int) {
	load := loads(r, weights)
	top := r.members[0]
	for _, m := range r.members {
		if load[m] > load[top] {
			top = m
		}
	}
	home := r.colocatedHome()
	for a, ma := range r.owners {
		if ma != top || a == home || weights[a] == 0 {
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
			if max(load[top]-d, load[mb]+d) < load[top] {
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
// singletons' owner carrying 1-ColocatedShare of a mean share), and
// whether that member holds one partition besides the pinned one, which
// alone outweighs the bound.
func busiest(r *Ring, weights []uint64) (float64, bool) {
	heavy, home := r.heavyOf()
	load, total := memberLoads(r.owners, len(r.members), weights, heavy, r.config.ColocatedShare)
	count := map[string]int{}
	for p, m := range r.owners {
		if p != home && weights[p] > 0 {
			count[m]++
		}
	}
	var top string
	for _, m := range r.members {
		if top == "" || load[m] > load[top] {
			top = m
		}
	}
	return float64(load[top]) * float64(len(r.members)) / float64(total), count[top] <= 1
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
