package shard

import (
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// settleWaitMax bounds how long readiness waits for the rest of the fleet
// once this replica runs its own share: a peer that never starts what the
// view gives it must not hold a rolling update forever.
const settleWaitMax = time.Minute

// unsettled says what of the fleet has not settled on the plan's view: a
// participant that has not applied it, or a piece that its owner under the
// view neither runs (this member) nor lists (a peer: listed is running or
// about to, rule 2). "" when the whole fleet runs the view's pieces.
//
// Readiness waits for it, not only for this replica's own share: a rolling
// update replaces the next replica once this one is ready, and a replica
// that leaves while the view that brought this one in is still being
// handed over moves the same pieces back to where they came from, which
// then wait out their quiet time there (minOutOfScope in package
// controllers), without an owner and then unserved for seconds.
func unsettled(plan Plan, local Local, peers []membership.Peer, rings *RingCache) string {
	if len(plan.Members) == 0 {
		return "no members"
	}
	byName := make(map[string]membership.Peer, len(peers))
	for _, p := range peers {
		if p.Name == local.Self || !p.Participant {
			continue
		}
		if p.State.View != plan.View {
			return p.Name + " has not applied the view"
		}
		byName[p.Name] = p
	}
	ring := rings.Get(plan.Ring, plan.Members, plan.View)
	for _, piece := range local.Pieces {
		owner := ring.Owner(piece)
		if owner == local.Self {
			if local.Status[piece] != Running {
				return "this member does not run " + string(piece)
			}
			continue
		}
		if !byName[owner].State.Runs(string(piece)) {
			return owner + " does not run " + string(piece)
		}
	}
	return ""
}
