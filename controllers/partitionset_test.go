package controllers

import (
	"context"
	"testing"
	"time"
)

// TestPartitionSetLockGivesUpWithItsPiece: a gain waiting for the lock
// behind another partition's Load returns as soon as its piece is no
// longer wanted, instead of after that Load.
func TestPartitionSetLockGivesUpWithItsPiece(t *testing.T) {
	s := &partitionSet{lock: make(chan struct{}, 1)}
	if !s.acquire(t.Context()) {
		t.Fatal("a free lock was not taken")
	}
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan bool, 1)
	go func() { got <- s.acquire(ctx) }()
	select {
	case <-got:
		t.Fatal("a held lock was taken")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case ok := <-got:
		if ok {
			t.Fatal("the lock was taken while held")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end with its context")
	}
	s.release()
	if !s.acquire(t.Context()) {
		t.Fatal("the released lock was not taken")
	}
}

// TestGainOpensTheGateBeforeDelivering: the controllers act on a gained
// partition's objects as they are delivered, so its write gate is open by
// then; a write refused in between leaves a Warning Event KCM never writes.
func TestGainOpensTheGateBeforeDelivering(t *testing.T) {
	const p = 3
	r := &Runtime{partitions: newPartitionFence(func(string) int { return p })}
	s := &partitionSet{runtime: r, lock: make(chan struct{}, 1), lostAt: map[int]time.Time{}, waiting: map[int]bool{}, running: true}
	var admitted *bool
	s.deliverGain = func(int) int {
		done, ok := r.partitions.admit("team-a")
		if ok {
			done()
		}
		admitted = &ok
		return 1
	}
	ok, err := s.gain(t.Context(), p)
	if !ok || err != nil {
		t.Fatalf("gain: %v, %v", ok, err)
	}
	if admitted == nil || !*admitted {
		t.Fatal("a write into the gained partition was refused while its objects were being delivered")
	}
}
