package shard

import (
	"slices"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// A placement names how the ring places pieces for the same members and
// configuration (library version, hasher, rules). It is part of the ViewID,
// so two members agree on a view only if they place pieces the same way.
// A release that changes placement adds a name here and keeps computing
// the older ones, so that old and new replicas can run side by side during
// a rolling upgrade (the skew policy in docs/operations.md).
const (
	// PlacementColocated: the owner of the colocated singletons keeps an
	// even share of the partitions.
	PlacementColocated = "consistent-v0.10.0/xxhash/v2-colocated"
	// PlacementColocatedShare: it keeps RingConfig.ColocatedShare of one.
	PlacementColocatedShare = "consistent-v0.10.0/xxhash/v3-colocated-share"
	// PlacementWeighted: PlacementColocatedShare's, then balanced by the
	// view's weight table (weighted.go), until the busiest member cannot
	// be lightened.
	PlacementWeighted = "consistent-v0.10.0/xxhash/v4-weighted"
	// PlacementWeightedMoves: PlacementColocatedShare's, then the moves
	// the view's table carries (weightmoves.go): the keeper balances from the
	// current placement, so a new table moves only what it must.
	PlacementWeightedMoves = "consistent-v0.10.0/xxhash/v5-weighted-moves"
	// PlacementWeightedEvenShare: PlacementWeightedMoves', with the
	// colocated singletons' owner keeping RingConfig.ColocatedShareByWeight
	// of an even share (one unless set): placed by weight, the keeper
	// evens out what the partitions hold, and a replica's speed at default
	// client limits is how many namespaces its controllers serve.
	PlacementWeightedEvenShare = "consistent-v0.10.0/xxhash/v6-weighted-even-share"
)

// Placements is every placement this build computes, oldest first.
var Placements = []string{PlacementColocated, PlacementColocatedShare, PlacementWeighted, PlacementWeightedMoves, PlacementWeightedEvenShare}

// PlacementsByWeight are the placements by weight, oldest first: a
// replica asked to place by weight supports them all, so that a fleet
// mid-upgrade keeps placing by the newest its every replica computes.
var PlacementsByWeight = []string{PlacementWeighted, PlacementWeightedMoves, PlacementWeightedEvenShare}

// ByWeight says whether placement balances by the view's weight table.
func ByWeight(placement string) bool { return slices.Contains(PlacementsByWeight, placement) }

// byMoves says whether the view's weight table carries the moves
// themselves (weightmoves.go), and the keeper deals new namespaces.
func byMoves(placement string) bool {
	return placement == PlacementWeightedMoves || placement == PlacementWeightedEvenShare
}

// DefaultPlacements are the placements a replica supports unless told
// otherwise: every one, so that a fleet places by weight once its every
// replica supports it.
var DefaultPlacements = Placements

// PlacementsByCount are the placements a replica told to place by count
// (--placement-by-weight=false) supports: an even share of the partitions
// each, whatever they hold.
var PlacementsByCount = []string{PlacementColocated, PlacementColocatedShare}

// legacyPlacements is what a member that does not say what it supports
// (a release from before the negotiation) supports.
var legacyPlacements = []string{PlacementColocatedShare}

// CommonPlacement is the placement a view uses: the newest of Placements
// that this member (supported) and every participant peer support. A
// member that says nothing (an empty list: a release from before the
// negotiation) supports only PlacementColocatedShare. Every member that sees the same participants
// computes the same placement; when none is common it returns "" and
// false, and the members cannot agree on a view until one leaves.
func CommonPlacement(supported []string, self string, peers []membership.Peer) (string, bool) {
	if len(supported) == 0 {
		supported = legacyPlacements
	}
	common := slices.Clone(supported)
	for _, p := range peers {
		if !p.Participant || p.Name == self {
			continue
		}
		theirs := p.Supports.Placements
		if len(theirs) == 0 {
			theirs = legacyPlacements
		}
		common = slices.DeleteFunc(common, func(s string) bool { return !slices.Contains(theirs, s) })
	}
	for i := len(Placements) - 1; i >= 0; i-- {
		if slices.Contains(common, Placements[i]) {
			return Placements[i], true
		}
	}
	return "", false
}
