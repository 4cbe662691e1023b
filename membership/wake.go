package membership

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// wakeTimer calls notify when a deadline passes (authority running out),
// so pieces stop on time even if nothing else happens; each renewal moves
// the deadline. Its goroutine ends with the context of the first at.
type wakeTimer struct {
	clock  clock.Clock
	notify func()

	mu    sync.Mutex
	timer clock.Timer
}

func newWakeTimer(clk clock.Clock, notify func()) *wakeTimer {
	return &wakeTimer{clock: clk, notify: notify}
}

// at sets the deadline to t.
func (w *wakeTimer) at(ctx context.Context, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := t.Sub(w.clock.Now())
	if w.timer != nil {
		w.timer.Reset(d)
		return
	}
	timer := w.clock.NewTimer(d)
	w.timer = timer
	go func() {
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C():
				w.notify()
			}
		}
	}()
}
