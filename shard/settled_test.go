package shard

import (
	"strings"
	"testing"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

func TestUnsettled(t *testing.T) {
	cfg := RingConfig{Partitions: 8, ReplicationFactor: 16, Load: 1.25, Placement: PlacementColocatedShare}
	pieces := AllPieces(cfg.Partitions, []string{"gc"})
	members := []string{"a", "b", "c"}
	view := ViewID(cfg, members, members)
	ring := NewRing(cfg, members)
	owned := func(m string) []Piece { return ring.Owned(m, pieces) }
	var bPiece Piece = owned("b")[0]
	// all: the fleet settled; each case changes one thing.
	type fleet struct {
		local Local
		peers []membership.Peer
		plan  Plan
	}
	all := func() fleet {
		l := Local{Self: "a", Ring: cfg, Pieces: pieces, View: view, Status: map[Piece]PieceStatus{}}
		for _, p := range owned("a") {
			l.Status[p] = Running
		}
		var peers []membership.Peer
		for _, m := range []string{"b", "c"} {
			st := membership.State{View: view}
			for _, p := range owned(m) {
				st.Running = append(st.Running, string(p))
			}
			peers = append(peers, membership.Peer{Name: m, State: st, Participant: true})
		}
		return fleet{l, peers, Plan{View: view, Members: members, Participants: members, Ring: cfg}}
	}
	for _, tc := range []struct {
		name   string
		change func(f *fleet)
		want   string // "" settled, else a part of the reason
	}{
		{"every piece runs on its owner", func(*fleet) {}, ""},
		{"a ghost's view does not count", func(f *fleet) {
			f.peers = append(f.peers, membership.Peer{Name: "old", State: membership.State{View: "older"}})
		}, ""},
		{"a participant on an older view", func(f *fleet) { f.peers[1].State.View = "older" }, "c has not applied the view"},
		{"a joiner on an older view", func(f *fleet) {
			f.peers = append(f.peers, membership.Peer{Name: "d", State: membership.State{View: "older", Joining: true}, Participant: true})
		}, "d has not applied the view"},
		{"a peer does not list a piece it owns", func(f *fleet) {
			f.peers[0].State.Running = f.peers[0].State.Running[1:]
		}, "b does not run " + string(bPiece)},
		{"this member only intends a piece", func(f *fleet) { f.local.Status[owned("a")[0]] = Intended }, "this member does not run"},
		{"no members", func(f *fleet) { f.plan.Members = nil }, "no members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := all()
			tc.change(&f)
			got := unsettled(f.plan, f.local, f.peers, &RingCache{})
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("unsettled = %q, want %q", got, tc.want)
			}
		})
	}
}
