package membership

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestWakeTimer: notify runs when the deadline passes, a later deadline
// moves it, and the timer's goroutine ends with its context.
func TestWakeTimer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	var notified atomic.Int32
	w := newWakeTimer(clk, func() { notified.Add(1) })
	ctx, cancel := context.WithCancel(t.Context())
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	w.at(ctx, clk.Now().Add(time.Second))
	w.at(ctx, clk.Now().Add(3*time.Second)) // renewed: the deadline moves
	clk.Step(2 * time.Second)
	time.Sleep(20 * time.Millisecond)
	if n := notified.Load(); n != 0 {
		t.Fatalf("notified %d times before the moved deadline", n)
	}
	clk.Step(time.Second)
	waitFor("the notification at the deadline", func() bool { return notified.Load() == 1 })
	w.at(ctx, clk.Now().Add(10*time.Second))
	if !clk.HasWaiters() {
		t.Fatal("a new deadline set no timer")
	}
	cancel()
	waitFor("the timer to stop with its context", func() bool { return !clk.HasWaiters() })
}
