package shard

import (
	"testing"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

func TestDecide(t *testing.T) {
	cfg := RingConfig{Partitions: 4, ReplicationFactor: 16, Load: 1.25, Placement: PlacementColocatedShare}
	pieces := AllPieces(cfg.Partitions, []string{"gc"})
	view2 := ViewID(cfg, []string{"a", "b"}, []string{"a", "b"})
	ring2 := NewRing(cfg, []string{"a", "b"})
	var aPiece, bPiece Piece
	for _, p := range pieces {
		if ring2.Owner(p) == "a" && aPiece == "" {
			aPiece = p
		}
		if ring2.Owner(p) == "b" && bPiece == "" {
			bPiece = p
		}
	}
	ackA := map[string]membership.Ack{"a": {Incarnation: "ia", Epoch: 3}}
	peerB := func(view string, acks map[string]membership.Ack, running ...Piece) membership.Peer {
		st := membership.State{Incarnation: "ib", Epoch: 5, View: view, Acks: acks}
		for _, p := range running {
			st.Running = append(st.Running, string(p))
		}
		return membership.Peer{Name: "b", State: st, Participant: true}
	}
	local := func(mut func(*Local)) Local {
		l := Local{Self: "a", Incarnation: "ia", Ring: cfg, Pieces: pieces, Authority: true, View: view2, Epoch: 3, Status: map[Piece]PieceStatus{}}
		if mut != nil {
			mut(&l)
		}
		return l
	}
	has := func(list []Piece, p Piece) bool {
		for _, x := range list {
			if x == p {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name  string
		local Local
		peers []membership.Peer
		check func(t *testing.T, plan Plan)
	}{
		{"joining owns nothing", local(func(l *Local) { l.Joining = true }), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if len(plan.Owned) != 0 || len(plan.Intend) != 0 {
				t.Fatalf("joining member owns %v, intends %v", plan.Owned, plan.Intend)
			}
		}},
		{"no authority stops everything", local(func(l *Local) { l.Authority = false; l.Status[aPiece] = Running }), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if !has(plan.Stop, aPiece) {
				t.Fatalf("want %s stopped, plan %+v", aPiece, plan)
			}
		}},
		{"new view waits for lost pieces to stop", local(func(l *Local) { l.View = "old"; l.Status[bPiece] = Stopping }), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if plan.ApplyView {
				t.Fatal("applied a view while a lost piece is still stopping")
			}
		}},
		{"new view applied once nothing lost runs", local(func(l *Local) { l.View = "old" }), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if !plan.ApplyView || len(plan.Intend) != 0 {
				t.Fatalf("want the view applied and nothing intended yet: %+v", plan)
			}
		}},
		{"intends when the peer acknowledged", local(nil), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if !has(plan.Intend, aPiece) || has(plan.Intend, bPiece) {
				t.Fatalf("want %s intended and not %s: %+v", aPiece, bPiece, plan.Intend)
			}
		}},
		{"waits for the peer's acknowledgement", local(nil), []membership.Peer{peerB(view2, map[string]membership.Ack{"a": {Incarnation: "ia", Epoch: 2}})}, func(t *testing.T, plan Plan) {
			if len(plan.Intend) != 0 {
				t.Fatalf("intended %v before the peer acknowledged epoch 3", plan.Intend)
			}
		}},
		{"waits for the peer's view", local(nil), []membership.Peer{peerB("other", ackA)}, func(t *testing.T, plan Plan) {
			if len(plan.Intend) != 0 {
				t.Fatalf("intended %v while the peer has another view", plan.Intend)
			}
		}},
		{"a piece the peer lists does not start", local(func(l *Local) { l.Status[aPiece] = Intended }), []membership.Peer{peerB(view2, ackA, aPiece)}, func(t *testing.T, plan Plan) {
			if has(plan.Start, aPiece) || has(plan.Intend, aPiece) || !has(plan.Drop, aPiece) {
				t.Fatalf("want %s dropped, not started: %+v", aPiece, plan)
			}
		}},
		{"a ghost's piece does not start", local(nil), []membership.Peer{peerB(view2, ackA), {Name: "c", State: membership.State{Incarnation: "ic", Running: []string{string(aPiece)}}}}, func(t *testing.T, plan Plan) {
			if has(plan.Intend, aPiece) {
				t.Fatalf("intended %s that a ghost lists", aPiece)
			}
		}},
		{"confirmed intent starts", local(func(l *Local) {
			l.Status[aPiece] = Intended
			l.Confirmed = membership.State{Incarnation: "ia", Epoch: 3, View: view2, Running: []string{string(aPiece)}}
		}), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if !has(plan.Start, aPiece) {
				t.Fatalf("want %s started: %+v", aPiece, plan)
			}
		}},
		{"unconfirmed intent waits", local(func(l *Local) {
			l.Status[aPiece] = Intended
			l.Confirmed = membership.State{Incarnation: "ia", Epoch: 3, View: view2}
		}), []membership.Peer{peerB(view2, ackA)}, func(t *testing.T, plan Plan) {
			if has(plan.Start, aPiece) {
				t.Fatalf("started %s before its intent was confirmed", aPiece)
			}
		}},
		{"leaving stops everything", local(func(l *Local) { l.Leaving = true; l.Status[aPiece] = Running; l.Status[bPiece] = Intended }), nil, func(t *testing.T, plan Plan) {
			if !has(plan.Stop, aPiece) || !has(plan.Drop, bPiece) || len(plan.Intend) != 0 {
				t.Fatalf("leaving: %+v", plan)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, Decide(tc.local, tc.peers, &RingCache{}))
		})
	}
}
