package shard

import (
	"testing"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

func TestCommonPlacement(t *testing.T) {
	peer := func(name string, participant bool, placements ...string) membership.Peer {
		return membership.Peer{Name: name, Participant: participant, Supports: membership.Supports{Placements: placements}}
	}
	for _, tc := range []struct {
		name      string
		supported []string
		peers     []membership.Peer
		want      string
		ok        bool
	}{
		{"alone, the newest: by weight, the colocated owner's share even", DefaultPlacements, nil, PlacementWeightedEvenShare, true},
		{"alone, placing by count", PlacementsByCount, nil, PlacementColocatedShare, true},
		{"placement by weight only when every participant supports it", Placements, []membership.Peer{peer("b", true, PlacementsByCount...)}, PlacementColocatedShare, true},
		{"a release whose placement by weight is v5 at newest beside it", Placements, []membership.Peer{peer("b", true, PlacementColocated, PlacementColocatedShare, PlacementWeighted, PlacementWeightedMoves)}, PlacementWeightedMoves, true},
		{"a release that places by weight only as v4 beside it", Placements, []membership.Peer{peer("b", true, PlacementColocated, PlacementColocatedShare, PlacementWeighted)}, PlacementWeighted, true},
		{"an older release beside it", Placements, []membership.Peer{peer("b", true, PlacementColocated)}, PlacementColocated, true},
		{"the older release left: its ghost does not count", DefaultPlacements, []membership.Peer{peer("b", false, PlacementColocated)}, PlacementWeightedEvenShare, true},
		{"a release from before the annotation supports only v3", Placements, []membership.Peer{peer("b", true)}, PlacementColocatedShare, true},
		{"this member from before the annotation", nil, []membership.Peer{peer("b", true, Placements...)}, PlacementColocatedShare, true},
		{"a newer placement this build does not know is ignored", DefaultPlacements, []membership.Peer{peer("b", true, append([]string{"consistent-v0.10.0/xxhash/v9"}, Placements...)...)}, PlacementWeightedEvenShare, true},
		{"nothing in common", []string{PlacementColocated}, []membership.Peer{peer("b", true)}, "", false},
		{"its own entry among the peers is skipped", []string{PlacementColocated}, []membership.Peer{peer("a", true)}, PlacementColocated, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := CommonPlacement(tc.supported, "a", tc.peers)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestPlacementsPlaceDifferently: the older placement is still computed
// (the colocated owner keeps a full share), so a fleet that falls back to
// it really places as the older release did.
func TestPlacementsPlaceDifferently(t *testing.T) {
	members := []string{"a", "b", "c"}
	count := func(placement string) map[string]int {
		config := DefaultRingConfig
		config.Colocated = "garbagecollector,podgc"
		config.Placement = placement
		ring := NewRing(config, members)
		owned := map[string]int{}
		for p := range config.Partitions {
			owned[ring.PartitionOwner(p)]++
		}
		return owned
	}
	older, newer := count(PlacementColocated), count(PlacementColocatedShare)
	config := DefaultRingConfig
	config.Colocated = "garbagecollector,podgc"
	owner := NewRing(config, members).SingletonOwner("garbagecollector")
	if older[owner] <= newer[owner] {
		t.Errorf("the colocated owner %s holds %d partitions under %s and %d under %s; want fewer under the share", owner, older[owner], PlacementColocated, newer[owner], PlacementColocatedShare)
	}
	t.Logf("partitions per member: %s %v, %s %v", PlacementColocated, older, PlacementColocatedShare, newer)
}

// TestPlacedByShare: placed by weight with the colocated owner's share
// even (the default), the view uses ColocatedShareByWeight and every
// older placement the configured ColocatedShare, so that a fleet beside a
// release that placed by count or by weight at half a share agrees with
// it; the share is part of the view's fingerprint.
func TestPlacedByShare(t *testing.T) {
	config := DefaultRingConfig
	config.Colocated = "garbagecollector,podgc"
	for _, tc := range []struct {
		placement string
		want      float64
	}{
		{PlacementColocatedShare, DefaultColocatedShare},
		{PlacementWeighted, DefaultColocatedShare},
		{PlacementWeightedMoves, DefaultColocatedShare},
		{PlacementWeightedEvenShare, 1},
	} {
		t.Run(tc.placement, func(t *testing.T) {
			got := config.placedBy(tc.placement)
			if got.Placement != tc.placement || got.ColocatedShare != tc.want {
				t.Errorf("placed by %s: placement %q, share %g; want share %g", tc.placement, got.Placement, got.ColocatedShare, tc.want)
			}
		})
	}
	members := []string{"a", "b", "c"}
	even, half := config.placedBy(PlacementWeightedEvenShare), config.placedBy(PlacementWeightedEvenShare)
	half.ColocatedShare = DefaultColocatedShare
	if ViewID(even, members, members) == ViewID(half, members, members) {
		t.Error("views at an even and at half a share have one fingerprint")
	}
}
