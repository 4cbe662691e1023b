package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// PieceRecord is one line of the record file of --dummy-pieces mode: the
// handover tests read these to prove no piece ran on two replicas at once.
type PieceRecord struct {
	Event string `json:"ev"` // start or stop
	Piece string `json:"piece"`
	// Member and Incarnation name the process.
	Member      string `json:"member"`
	Incarnation string `json:"inc"`
	// Time is when the event happened (Unix nanoseconds).
	Time int64 `json:"t"`
	// ActedUntil, on stop: the last time the piece checked its fence and
	// found it valid. A piece acts only then, so its run interval is
	// [start, ActedUntil].
	ActedUntil int64 `json:"actedUntil,omitempty"`
}

// dummyRunner runs pieces that do nothing but check their fence every tick
// and record when they start and stop.
type dummyRunner struct {
	member, incarnation string
	tick                time.Duration
	mu                  sync.Mutex
	out                 *os.File
}

func newDummyRunner(path, member, incarnation string) (*dummyRunner, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening piece record file: %w", err)
	}
	return &dummyRunner{member: member, incarnation: incarnation, tick: 20 * time.Millisecond, out: f}, nil
}

func (d *dummyRunner) record(r PieceRecord) error {
	r.Member, r.Incarnation = d.member, d.incarnation
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding piece record: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// One write per line with O_APPEND: a kill -9 loses no whole line.
	if _, err := d.out.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("writing piece record: %w", err)
	}
	return nil
}

func (d *dummyRunner) Run(ctx context.Context, piece shard.Piece, fence shard.Authority) error {
	if !fence.Valid() {
		return fmt.Errorf("piece %s: no authority at start", piece)
	}
	if err := d.record(PieceRecord{Event: "start", Piece: string(piece), Time: time.Now().UnixNano()}); err != nil {
		return err
	}
	actedUntil := time.Now()
	ticker := time.NewTicker(d.tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return d.record(PieceRecord{Event: "stop", Piece: string(piece), Time: time.Now().UnixNano(), ActedUntil: actedUntil.UnixNano()})
		case <-ticker.C:
			now := time.Now()
			if fence.Valid() {
				actedUntil = now
			}
		}
	}
}
