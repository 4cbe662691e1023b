package shard

import (
	"sort"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// PieceStatus is where a piece is in its local lifecycle.
type PieceStatus int

const (
	// Intended: to be published as running before it starts.
	Intended PieceStatus = iota
	// Running: started, and not reported ended on its own (or ended on
	// its own and waiting out pieceRestartDelay).
	Running
	// Stopping: stopped; the runner has not reported it ended yet.
	Stopping
)

// Local is this member's side of the protocol.
type Local struct {
	Self        string
	Incarnation string
	// Ring is the ring's configuration; its Placement is the view's (see
	// CommonPlacement).
	Ring RingConfig
	// Placements is what this member can compute and publishes as
	// supported (empty: as a release from before the negotiation).
	Placements []string
	// Pieces is every piece of the fleet.
	Pieces []Piece
	// Authority is false once the member could not renew its Lease within
	// the renew deadline (or has not joined yet): it may run nothing.
	Authority bool
	// Leaving: shutting down; stop everything.
	Leaving bool
	// Joining: a new process still watching the fleet for one lease
	// duration (see doc.go). It takes part in views, but the ring gives it
	// nothing yet.
	Joining bool
	// View and Epoch are the last applied view and its number.
	View  string
	Epoch uint64
	// HoldStarts: own pieces, apply views, stop what is lost, but intend
	// nothing new yet (a fresh member waiting for members still joining,
	// so that a fleet started at once does not hand everything to the
	// first one to finish joining).
	HoldStarts bool
	// Status is every piece this member runs, stops or intends to run.
	Status map[Piece]PieceStatus
	// Confirmed is the last state the apiserver accepted from this member.
	Confirmed membership.State
	// WeightTable is the partition weight table this member publishes:
	// its own decision when it is the view's first member, else a copy of
	// the first member's (weightkeeper.go).
	WeightTable string
}

// Plan is the next step of one member.
type Plan struct {
	// View is the view this member sees now: Members are in the ring,
	// Participants also count joining members.
	View         string
	Members      []string
	Participants []string
	// Ring is the ring configuration of the view, with the placement every
	// participant supports.
	Ring RingConfig
	// Owned is what the ring of that view gives this member.
	Owned []Piece
	// Stop lists running pieces to cancel.
	Stop []Piece
	// Drop lists intended pieces to forget (never started).
	Drop []Piece
	// ApplyView: every piece lost under the new view has stopped; apply it
	// (bump the epoch) and publish.
	ApplyView bool
	// Intend lists pieces to publish as running, to start once confirmed.
	Intend []Piece
	// Start lists intended pieces that are confirmed published and clear.
	Start []Piece
	// Waiting says why owned pieces are not running yet ("" when all run).
	Waiting string
}

// Decide computes the next step of the handover protocol. It is a pure
// function: the runtime (Manager) and the simulation (protocol_sim_test.go)
// both drive members with it.
//
// The rules, and why they keep any piece from running on two members at
// once, are in doc.go.
func Decide(local Local, peers []membership.Peer, rings *RingCache) Plan {
	plan, common := viewOf(local, peers)
	ring := rings.Get(plan.Ring, plan.Members, plan.View)
	mine := make(map[Piece]bool)
	if local.Authority && !local.Leaving && !local.Joining { // rule 4
		plan.Owned = ring.Owned(local.Self, local.Pieces)
		for _, p := range plan.Owned {
			mine[p] = true
		}
	}
	lostRunning := plan.stopLost(local, mine)
	if !local.Authority || local.Leaving {
		return plan
	}
	if !common {
		// Rule 3 holds without this (no two members agree on a view
		// whose placement differs); it says why nothing moves.
		plan.Waiting = "no placement every participant supports"
	}
	if plan.View != local.View {
		// Rule 1: a view is applied only once everything it takes away
		// has stopped: publishing it tells the others they may take
		// those pieces.
		plan.ApplyView = !lostRunning
		plan.Waiting = "applying a new view"
		return plan
	}
	plan.startOwned(local, peers)
	return plan
}

// viewOf is the view this member sees: members (participants that are not
// joining) and participants, sorted, with the placement every participant
// supports; common is false when there is none.
func viewOf(local Local, peers []membership.Peer) (plan Plan, common bool) {
	participants := []string{local.Self}
	var members []string
	if !local.Joining {
		members = append(members, local.Self)
	}
	for _, p := range peers {
		if p.Participant && p.Name != local.Self {
			participants = append(participants, p.Name)
			if !p.State.Joining {
				members = append(members, p.Name)
			}
		}
	}
	sort.Strings(members)
	sort.Strings(participants)
	config := local.Ring
	placement, common := CommonPlacement(local.Placements, local.Self, peers)
	if common {
		config = config.placedBy(placement)
	}
	if ByWeight(config.Placement) && len(members) > 0 {
		config.WeightTable = tableOf(members[0], local, peers)
	}
	return Plan{Members: members, Participants: participants, Ring: config, View: ViewID(config, members, participants)}, common
}

// tableOf is the weight table member publishes: this member's own, or a
// participant peer's ("" when it publishes none).
func tableOf(member string, local Local, peers []membership.Peer) string {
	if member == local.Self {
		return local.WeightTable
	}
	for _, p := range peers {
		if p.Name == member && p.Participant {
			return p.State.Table
		}
	}
	return ""
}

// stopLost stops the running pieces this member does not own (rule 2: a
// piece stays listed until it stopped) and drops the intended ones; it
// reports whether any lost piece is still running or stopping.
func (plan *Plan) stopLost(local Local, mine map[Piece]bool) (lostRunning bool) {
	for _, p := range sortedPieces(local.Status) {
		if mine[p] {
			continue
		}
		switch local.Status[p] {
		case Intended:
			plan.Drop = append(plan.Drop, p)
		case Running:
			plan.Stop = append(plan.Stop, p)
			lostRunning = true
		case Stopping:
			lostRunning = true
		}
	}
	return lostRunning
}

// blockedBy says why this member may not start p under the plan's view
// (rule 3), "" when it may.
func (plan *Plan) blockedBy(local Local, peers []membership.Peer, p Piece) string {
	for _, peer := range peers {
		if peer.Name == local.Self {
			continue
		}
		if peer.State.Runs(string(p)) {
			return peer.Name + " still runs " + string(p)
		}
		if !peer.Participant {
			continue
		}
		if peer.State.View != plan.View {
			return peer.Name + " has not applied the view"
		}
		if ack := peer.State.Acks[local.Self]; ack.Incarnation != local.Incarnation || ack.Epoch != local.Epoch {
			return peer.Name + " has not acknowledged this member's view"
		}
	}
	return ""
}

// startOwned moves each owned piece on by one step: intend it (rule 2:
// published as running before it starts), start it once that intent is
// confirmed under this epoch and view, or drop the intent while another
// participant blocks it (rule 3).
func (plan *Plan) startOwned(local Local, peers []membership.Peer) {
	wait := func(why string) {
		if plan.Waiting == "" {
			plan.Waiting = why
		}
	}
	for _, p := range plan.Owned {
		status, ok := local.Status[p]
		if ok && status != Intended {
			continue
		}
		if why := plan.blockedBy(local, peers, p); why != "" {
			if ok {
				plan.Drop = append(plan.Drop, p)
			}
			wait(why)
			continue
		}
		if !ok {
			if local.HoldStarts {
				wait("waiting for joining members")
				continue
			}
			plan.Intend = append(plan.Intend, p)
			continue
		}
		c := local.Confirmed
		if c.Incarnation == local.Incarnation && c.Epoch == local.Epoch && c.View == plan.View && c.Runs(string(p)) {
			plan.Start = append(plan.Start, p)
		} else {
			wait("publishing intent")
		}
	}
	if len(plan.Intend) > 0 {
		wait("publishing intent")
	}
}

func sortedPieces(m map[Piece]PieceStatus) []Piece {
	out := make([]Piece, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// RingCache keeps the ring of the last few views: Decide runs on every
// event, and building a ring is far costlier than looking one up.
type RingCache struct {
	rings map[string]*Ring
	order []string
}

const ringCacheSize = 8

// Get returns the ring of members under config, whose view is view.
func (c *RingCache) Get(config RingConfig, members []string, view string) *Ring {
	if r, ok := c.rings[view]; ok {
		return r
	}
	if c.rings == nil {
		c.rings = make(map[string]*Ring)
	}
	r := NewRing(config, members)
	c.rings[view] = r
	c.order = append(c.order, view)
	if len(c.order) > ringCacheSize {
		delete(c.rings, c.order[0])
		c.order = c.order[1:]
	}
	return r
}
