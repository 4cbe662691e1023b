package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestSampleMemory reads this process: a mean RSS above zero, the
// anonymous part no larger, and an error once the context ends.
func TestSampleMemory(t *testing.T) {
	pid := os.Getpid()
	rss, anon, err := sampleMemory(t.Context(), []int{pid, pid}, 60*time.Millisecond, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rss {
		if rss[i] <= 0 || anon[i] <= 0 || anon[i] > rss[i] {
			t.Errorf("reading %d: RSS %.1f MiB, anonymous %.1f MiB", i, rss[i], anon[i])
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := sampleMemory(ctx, []int{pid}, time.Minute, time.Second); err == nil {
		t.Error("sampling went on after its context ended")
	}
}
