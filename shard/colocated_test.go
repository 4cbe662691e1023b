package shard

import (
	"math"
	"testing"
)

// TestColocatedShare: the owner of the colocated singletons keeps
// ColocatedShare of an even share of the partitions (at least the one
// their key hashes to), the partitions it gives up go to the other
// members, nothing else moves, and the colocated singletons stay with it.
func TestColocatedShare(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
		share   float64
	}{
		{"one member keeps everything", 1, 0.5},
		{"two members, half", 2, 0.5},
		{"three members, half", 3, 0.5},
		{"three members, none", 3, 0},
		{"three members, even", 3, 1},
		{"five members, half", 5, 0.5},
		{"ten members, a quarter", 10, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			even := DefaultRingConfig
			even.Colocated = "podgc,resourcequota"
			even.ColocatedShare = 1
			config := even
			config.ColocatedShare = tc.share
			ms := members(tc.members)
			before, after := NewRing(even, ms), NewRing(config, ms)
			heavy := before.SingletonOwner("podgc")
			if got := after.SingletonOwner("resourcequota"); got != heavy {
				t.Fatalf("the colocated singletons moved from %s to %s", heavy, got)
			}
			owned := map[string]int{}
			for p := range config.Partitions {
				was, is := before.PartitionOwner(p), after.PartitionOwner(p)
				owned[is]++
				if is == "" {
					t.Fatalf("partition %d has no owner", p)
				}
				if was != heavy && is != was {
					t.Fatalf("partition %d moved from %s to %s, neither the colocated owner", p, was, is)
				}
			}
			want := owned[heavy]
			if tc.members > 1 && tc.share < 1 {
				want = max(1, int(math.Round(tc.share*float64(config.Partitions)/float64(tc.members))))
			}
			if owned[heavy] != want {
				t.Fatalf("the colocated owner %s has %d partitions, want %d (all: %v)", heavy, owned[heavy], want, owned)
			}
			if tc.members == 1 && owned[heavy] != config.Partitions {
				t.Fatalf("a fleet of one owns %d of %d partitions", owned[heavy], config.Partitions)
			}
		})
	}
}

// TestColocatedShareFewMoves: with the colocated owner shrunk, a member
// joining moves about as few partitions as on the plain ring (its 1/N),
// since what the colocated owner gives up follows a ring of the others.
func TestColocatedShareFewMoves(t *testing.T) {
	config := DefaultRingConfig
	config.Colocated = "podgc,resourcequota"
	for n := 3; n <= 9; n++ {
		before, after := NewRing(config, members(n)), NewRing(config, members(n+1))
		moved := 0
		for p := range config.Partitions {
			if before.PartitionOwner(p) != after.PartitionOwner(p) {
				moved++
			}
		}
		ideal := float64(config.Partitions) / float64(n+1)
		t.Logf("%d -> %d members: %d partitions moved, ideal %.1f", n, n+1, moved, ideal)
		if before.SingletonOwner("podgc") == after.SingletonOwner("podgc") && float64(moved) > 2.5*ideal {
			t.Errorf("%d -> %d members, colocated owner unchanged: %d partitions moved, more than 2.5x the ideal %.1f", n, n+1, moved, ideal)
		}
	}
}
