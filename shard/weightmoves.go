package shard

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// The moves table of PlacementWeightedMoves.
//
// A table of PlacementWeighted holds weights, and its placement is the
// ring's balanced by them: a new table undoes the earlier moves it no
// longer needs as well as making its own, more than the fewest moves that
// reach the bound. So the moves table carries the placement's moves
// themselves, which the keeper computes by balancing from the placement
// the fleet runs, and a ring only applies them: a new table moves what the
// new weights need and nothing else, and the keeper's policy can change
// from release to release without changing what a table means.
//
// Encoding (base64url without padding, as any table): the weight codes,
// one byte per partition as PlacementWeighted's, then per move two bytes
// of partition number (big-endian), one byte of the member name's length
// and the name, in ascending partition order. A move to a member not in
// the ring, or of the colocated singletons' partition, is not applied.

// maxTableBytes is the longest table a member's state may carry
// (membership's check: a table is at most as long as a running list).
const maxTableBytes = 8192

// EncodeMovesTable writes codes (one per partition) and moves
// (partition -> member).
func EncodeMovesTable(codes []byte, moves map[int]string) (string, error) {
	out := slices.Clone(codes)
	partitions := make([]int, 0, len(moves))
	for p := range moves {
		partitions = append(partitions, p)
	}
	slices.Sort(partitions)
	for _, p := range partitions {
		name := moves[p]
		if p < 0 || p >= len(codes) || len(name) == 0 || len(name) > 255 {
			return "", fmt.Errorf("move of partition %d to %q", p, name)
		}
		out = binary.BigEndian.AppendUint16(out, uint16(p))
		out = append(out, byte(len(name)))
		out = append(out, name...)
	}
	if len(out) > maxTableBytes {
		return "", fmt.Errorf("a moves table of %d bytes, more than %d", len(out), maxTableBytes)
	}
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// DecodeMovesTable reads a table written by EncodeMovesTable for
// partitions.
func DecodeMovesTable(table string, partitions int) ([]byte, map[int]string, error) {
	data, err := base64.RawURLEncoding.DecodeString(table)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding moves table: %w", err)
	}
	if len(data) < partitions {
		return nil, nil, fmt.Errorf("moves table of %d bytes for %d partitions", len(data), partitions)
	}
	codes, rest := data[:partitions], data[partitions:]
	moves := map[int]string{}
	last := -1
	for len(rest) > 0 {
		if len(rest) < 3 || len(rest) < 3+int(rest[2]) || rest[2] == 0 {
			return nil, nil, errors.New("moves table: a move cut short")
		}
		p := int(binary.BigEndian.Uint16(rest))
		if p >= partitions || p <= last {
			return nil, nil, fmt.Errorf("moves table: partition %d out of order or range", p)
		}
		moves[p] = string(rest[3 : 3+int(rest[2])])
		last = p
		rest = rest[3+int(rest[2]):]
	}
	return codes, moves, nil
}

// applyMoves moves the partitions the view's table moves, to members of
// the ring; an unreadable table moves none.
func (r *Ring) applyMoves(inRing []string) {
	_, moves, err := DecodeMovesTable(r.config.WeightTable, r.config.Partitions)
	if err != nil {
		return
	}
	_, pinned := r.heavyOf()
	for p, m := range moves {
		if p != pinned && slices.Contains(inRing, m) {
			r.owners[p] = m
		}
	}
}

// movesTable is the table the keeper adopts for weights (one per
// partition, 0: not measured) under a PlacementWeightedMoves view whose
// table is current: the current placement balanced by weights
// (balanceByWeight, every member it can, leaving the partitions fixed
// says where they run), written as its moves from the ring's own
// placement.
func movesTable(view Plan, current string, weights map[int]uint64, fixed func(int) bool) (string, error) {
	partitions := view.Ring.Partitions
	codes := make([]byte, partitions)
	for p, w := range weights {
		if p >= 0 && p < partitions {
			codes[p] = membership.WeightCode(w)
		}
	}
	balanced := weightsOfCodes(codes)
	if balanced == nil {
		return "", errors.New("no weights to balance by")
	}
	now, base, inRing := runningAndBase(view, current)
	owners := slices.Clone(now.owners)
	heavy, pinned := base.heavyOf()
	balanceByWeight(owners, inRing, balanced, heavy, view.Ring.ColocatedShare, pinned, fixed, true)
	moves := map[int]string{}
	for p, m := range owners {
		if m != base.owners[p] {
			moves[p] = m
		}
	}
	return EncodeMovesTable(codes, moves)
}

// runningAndBase are the view's ring under the table current (the
// placement the fleet runs) and without a table (the ring's own, which a
// moves table's moves are from), and the members in the ring.
func runningAndBase(view Plan, current string) (running, base *Ring, inRing []string) {
	config := view.Ring
	config.WeightTable = current
	running = NewRing(config, view.Members)
	config.WeightTable = ""
	base = NewRing(config, view.Members)
	inRing = base.members
	if len(inRing) > config.Partitions {
		inRing = inRing[:config.Partitions]
	}
	return running, base, inRing
}
