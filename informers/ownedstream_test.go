package informers

import (
	"testing"
	"time"
)

func TestClosedEarly(t *testing.T) {
	seconds := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name    string
		timeout *int64
		open    time.Duration
		want    bool
	}{
		{"no timeout asked", nil, time.Second, false},
		{"zero timeout", seconds(0), time.Second, false},
		{"closed a second after opening", seconds(300), time.Second, true},
		{"closed well before its timeout", seconds(300), 200 * time.Second, true},
		{"ended by its timeout", seconds(300), 300 * time.Second, false},
		{"ended within the slack of its timeout", seconds(300), 300*time.Second - closedEarlySlack/2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ownedStream{timeout: tc.timeout}
			if got := s.closedEarly(time.Now().Add(-tc.open)); got != tc.want {
				t.Errorf("closedEarly after %v with timeout %v = %v, want %v", tc.open, tc.timeout, got, tc.want)
			}
		})
	}
}

func TestClosedBackoffGrowsAndCaps(t *testing.T) {
	b := newClosedBackoff()
	var steps []time.Duration
	for range 6 {
		steps = append(steps, b.Step())
	}
	// Jitter 1: each step lies in [d, 2d) of its base d.
	bases := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, got := range steps {
		if got < bases[i] || got > 2*bases[i] {
			t.Errorf("step %d = %v, want within [%v, %v]", i, got, bases[i], 2*bases[i])
		}
	}
}
