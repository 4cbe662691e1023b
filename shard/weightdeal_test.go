package shard

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// dealView is the view of members fcm-0..n-1 placing by weight with the
// colocated singletons' owner keeping share, as fcm-0 sees it with table.
func dealView(n int, share float64, table string) Plan {
	config := DefaultRingConfig
	config.Colocated = "garbagecollector,podgc"
	config.ColocatedShare = share
	local := Local{Self: "fcm-0", Ring: config, Placements: Placements, WeightTable: table}
	var peers []membership.Peer
	for i := 1; i < n; i++ {
		peers = append(peers, membership.Peer{Name: fmt.Sprintf("fcm-%d", i), Participant: true, Supports: membership.Supports{Placements: Placements}})
	}
	view, _ := viewOf(local, peers)
	return view
}

// TestWeightKeeperDeals: partitions that gain their first objects are
// dealt at once, in batches as they are measured, so that the members'
// new namespaces follow their capacities (the colocated singletons'
// owner having ColocatedShare of one) within one partition's worth; only
// those partitions move and the colocated singletons' stays; and the same weights again, a
// partition that empties and fills again, or weights measured before
// every partition has been, deal nothing.
func TestWeightKeeperDeals(t *testing.T) {
	const namespaces, perNamespace = 20, 3
	for _, tc := range []struct {
		members int
		share   float64
	}{{3, 1}, {5, 1}, {3, 0.5}, {5, 0.5}} {
		t.Run(fmt.Sprintf("%d members, share %v", tc.members, tc.share), func(t *testing.T) {
			view := dealView(tc.members, tc.share, "")
			config := view.Ring
			// Before: the system namespaces, every partition measured.
			before := map[int]uint64{}
			for p := range config.Partitions {
				before[p] = 0
			}
			for _, ns := range []string{"kube-system", "default", "kube-public", "kube-node-lease"} {
				before[config.NamespacePartition(ns)] += 40
			}
			var k weightKeeper
			start := time.Unix(1000, 0)
			partial := map[int]uint64{}
			for p := range config.Partitions / 2 {
				partial[p] = 5
			}
			if got := k.next(start, "", view, partial); got != "" {
				t.Fatalf("a table before every partition was measured: %.20s", got)
			}
			if got := k.next(start.Add(time.Second), "", view, before); got != "" {
				t.Fatalf("a table from the baseline: %.20s", got)
			}
			// The namespaces appear in two batches.
			table := ""
			measured := clone(before)
			perPartition := map[int]int{}
			for i := range namespaces {
				p := config.NamespacePartition(fmt.Sprintf("load-%d", i))
				perPartition[p]++
				measured[p] += perNamespace
				if i == namespaces/2-1 || i == namespaces-1 {
					view = dealView(tc.members, tc.share, table)
					next := k.next(start.Add(time.Duration(2+i)*time.Second), table, view, clone(measured))
					if next == table {
						t.Logf("batch ending at %d: nothing to move", i)
					}
					table = next
				}
			}
			view = dealView(tc.members, tc.share, table)
			r := NewRing(view.Ring, view.Members)
			unmoved := NewRing(dealView(tc.members, tc.share, "").Ring, view.Members)
			heavy, pinned := r.heavyOf()
			if r.PartitionOwner(pinned) != unmoved.PartitionOwner(pinned) {
				t.Errorf("the colocated singletons' partition moved")
			}
			got, ring := map[string]int{}, map[string]int{}
			for p, n := range perPartition {
				got[r.PartitionOwner(p)] += n
				ring[unmoved.PartitionOwner(p)] += n
			}
			largest := 0
			for _, n := range perPartition {
				largest = max(largest, n)
			}
			capacity := float64(tc.members-1) + tc.share
			for _, m := range view.Members {
				c := 1.0
				if m == heavy {
					c = tc.share
				}
				fair := float64(namespaces) * c / capacity
				if float64(got[m]) > math.Ceil(fair)+float64(largest-1) {
					t.Errorf("%s runs %d new namespaces, its fair share %.1f (largest partition %d)", m, got[m], fair, largest)
				}
			}
			t.Logf("new namespaces per member: dealt %v, by the ring %v", got, ring)
			for p := range config.Partitions {
				if r.PartitionOwner(p) != unmoved.PartitionOwner(p) && perPartition[p] == 0 {
					t.Errorf("partition %d moved, and it gained nothing", p)
				}
			}

			for _, again := range []map[int]uint64{measured, before, measured} {
				if next := k.next(start.Add(time.Minute), table, view, clone(again)); next != table {
					t.Errorf("a new table from weights already dealt")
				}
			}
		})
	}
}

func clone(m map[int]uint64) map[int]uint64 {
	out := make(map[int]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestWeightKeeperHoldWaitsForYoung: a load uneven for the hold moves
// nothing while a dealt partition is young, and is balanced once none
// is.
func TestWeightKeeperHoldWaitsForYoung(t *testing.T) {
	view := dealView(3, 1, "")
	config := view.Ring
	ring := NewRing(config, view.Members)
	measured := map[int]uint64{}
	var fresh []int
	for p := range config.Partitions {
		measured[p] = 0
		switch ring.PartitionOwner(p) {
		case "fcm-1":
			measured[p] = 10
		case "fcm-0":
			fresh = append(fresh, p)
		}
	}
	var k weightKeeper
	start := time.Unix(1000, 0)
	if got := k.next(start, "", view, clone(measured)); got != "" {
		t.Fatalf("a table from the baseline")
	}
	// fcm-1's partitions grow heavy, and two of fcm-0's gain their
	// first objects: one is dealt to another member.
	for p := range config.Partitions {
		if ring.PartitionOwner(p) == "fcm-1" {
			measured[p] = 500
		}
	}
	measured[fresh[0]], measured[fresh[1]] = 5, 5
	table := k.next(start.Add(time.Second), "", view, clone(measured))
	if table == "" || !k.dealt {
		t.Fatalf("nothing dealt")
	}
	view = dealView(3, 1, table)
	for _, at := range []time.Duration{2 * time.Second, weightHold / 2, weightHold} {
		if got := k.next(start.Add(at), table, view, clone(measured)); got != table {
			t.Fatalf("a table by the hold %v after a deal", at)
		}
	}
	if got := k.next(start.Add(2*time.Second+youngWindow), table, view, clone(measured)); got == table || k.dealt {
		t.Fatalf("no table by the hold once the dealt partitions are no longer young")
	}
}
