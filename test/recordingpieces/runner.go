// Package recordingpieces runs pieces that do nothing but check their
// authority every tick and record, one JSON line per event, when they
// start and stop. The handover tests' own replica binary
// (cmd/fleet-recording-replica) runs them instead of controllers, so the
// tests can prove from the records that no piece ran on two replicas at
// once; they read the records back with Read.
package recordingpieces

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// PieceRecord is one line of the record file.
type PieceRecord struct {
	Event string `json:"ev"` // start or stop
	Piece string `json:"piece"`
	// Member and Incarnation name the process.
	Member      string `json:"member"`
	Incarnation string `json:"inc"`
	// Time is when the event happened (Unix nanoseconds).
	Time int64 `json:"t"`
	// ActedUntil, on stop: the last time the piece checked its authority and
	// found it valid. A piece acts only then, so its run interval is
	// [start, ActedUntil].
	ActedUntil int64 `json:"actedUntil,omitempty"`
}

// Recorder runs recording pieces, each in a goroutine of its own: it is
// the shard.Runner of the recording replica.
type Recorder struct {
	member, incarnation string
	authority           shard.Authority
	tick                time.Duration
	ended               chan shard.Ended

	mu      sync.Mutex
	out     *os.File
	cancels map[shard.Piece]context.CancelFunc
}

// NewRecorder appends the records of member's incarnation to the file at
// path; its pieces act while authority is valid.
func NewRecorder(path, member, incarnation string, authority shard.Authority) (*Recorder, error) {
	if path == "" {
		return nil, fmt.Errorf("no piece record file given")
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening piece record file: %w", err)
	}
	return &Recorder{
		member: member, incarnation: incarnation, authority: authority, tick: 20 * time.Millisecond, out: f,
		ended: make(chan shard.Ended), cancels: map[shard.Piece]context.CancelFunc{},
	}, nil
}

// Start runs each piece until it is stopped (shard.Runner).
func (d *Recorder) Start(pieces []shard.Piece) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, piece := range pieces {
		ctx, cancel := context.WithCancel(context.Background())
		d.cancels[piece] = cancel
		go func() {
			err := d.run(ctx, piece, d.authority)
			d.mu.Lock()
			delete(d.cancels, piece)
			d.mu.Unlock()
			cancel()
			d.ended <- shard.Ended{Piece: piece, Err: err}
		}()
	}
}

// Stop stops pieces (shard.Runner): a recording piece acts only on its
// ticks, and its stop record holds the last one.
func (d *Recorder) Stop(pieces []shard.Piece, _ bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, piece := range pieces {
		if cancel := d.cancels[piece]; cancel != nil {
			cancel()
		}
	}
}

// Ended reports each piece once its stop is recorded (shard.Runner).
func (d *Recorder) Ended() <-chan shard.Ended { return d.ended }

func (d *Recorder) record(r PieceRecord) error {
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

// run records the piece's start, checks its authority every tick while ctx
// lasts, and records its stop with the last time authority held.
func (d *Recorder) run(ctx context.Context, piece shard.Piece, authority shard.Authority) error {
	if !authority.Valid() {
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
			if authority.Valid() {
				actedUntil = now
			}
		}
	}
}

// Read reads the records of every file matching pattern, in time order. A
// line that does not decode is skipped: a killed process may leave its
// last line cut short.
func Read(pattern string) ([]PieceRecord, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("finding record files: %w", err)
	}
	var out []PieceRecord
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading piece records: %w", err)
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			var r PieceRecord
			if json.Unmarshal(line, &r) == nil {
				out = append(out, r)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time < out[j].Time })
	return out, nil
}
