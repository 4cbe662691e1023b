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
