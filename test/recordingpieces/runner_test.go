package recordingpieces

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

type authority struct{ valid atomic.Bool }

func (a *authority) Valid() bool { return a.valid.Load() }

func (a *authority) Authority() (bool, time.Time) { return a.Valid(), time.Now() }

// TestRunRecordsWhatThePieceActedOn: a piece records its start and, on
// stop, the last tick at which its authority held, not when it stopped;
// Read returns the records in time order and skips a line cut short.
func TestRunRecordsWhatThePieceActedOn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jsonl")
	r, err := NewRecorder(path, "a", "inc1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var auth authority
	if err := r.run(context.Background(), "p0", &auth); err == nil {
		t.Fatal("a piece started without authority")
	}
	auth.valid.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.run(ctx, "p1", &auth) }()
	time.Sleep(100 * time.Millisecond)
	auth.valid.Store(false)
	lost := time.Now()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A killed replica's last line, cut short.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"ev":"start","pie`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	records, err := Read(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 2 || records[0].Event != "start" || records[1].Event != "stop" {
		t.Fatalf("records %+v, want a start and a stop", records)
	}
	stop := records[1]
	if stop.Piece != "p1" || stop.Member != "a" || stop.Incarnation != "inc1" {
		t.Fatalf("stop record %+v", stop)
	}
	if acted := time.Unix(0, stop.ActedUntil); acted.After(lost) || stop.Time-stop.ActedUntil < int64(50*time.Millisecond) {
		t.Fatalf("acted until %v, authority lost at %v, stopped at %v", acted, lost, time.Unix(0, stop.Time))
	}
}
