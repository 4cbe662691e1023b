//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The end-to-end tests run at once, in lanes: each test (or each subtest
// of a test that has several) takes a share of the machine before it
// starts its control plane, and gives it back when it ends. Most of a
// test's time is spent waiting (for leases to expire, for a workload to
// converge): run one after another, the e2e package kept the 2-core
// machine 80-90% idle. One test binary runs them all, so the loopback
// ports localcluster.FreePort hands out stay unique.
//
// The machine has 3 * GOMAXPROCS shares (6 on the 2-core machine CI runs
// on), or FCM_E2E_SHARES. Waiting tests are let in largest share first,
// then the tests that run for minutes (inLongLane), then in the order they
// asked, so the long comparisons and workloads start early and the light
// tests fill what is left; `go test -parallel`
// must let every test wait here at once (the Makefile passes -parallel 64).
// A test whose bound holds only on a quiet machine does not take a lane:
// it does not call t.Parallel, so it runs alone, before the others.
var lanes = &laneQueue{free: machineShares()}

func machineShares() int64 {
	if s := os.Getenv("FCM_E2E_SHARES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < int64(laneHeavy) {
			panic(fmt.Sprintf("FCM_E2E_SHARES=%q: want a number of shares, at least %d", s, laneHeavy))
		}
		return n
	}
	return max(int64(laneHeavy), 3*int64(runtime.GOMAXPROCS(0)))
}

// lane is the share of the machine a test holds while it runs.
type lane int64

const (
	// laneLight: one control plane with a fleet or a KCM, a small
	// workload.
	laneLight lane = 1
	// laneHeavy: two control planes (KCM beside a fleet), or a workload of
	// pods scheduled onto kwok nodes, or a check of a replica's own timing
	// (a renew deadline) that a machine at full load could push past.
	laneHeavy lane = 2
)

// inLane runs t beside the other tests once its share is free. A test whose
// subtests each take a lane calls t.Parallel itself and inLane in each
// subtest.
func inLane(t *testing.T, l lane) {
	t.Helper()
	takeLane(t, l, false)
}

// inLongLane is inLane for a test that runs for minutes: let in before the
// other tests of its share, it does not start last and end the run alone
// (the e2e tests' time on a 2-core machine is about as long as their
// shares' sum allows once the longest starts first).
func inLongLane(t *testing.T, l lane) {
	t.Helper()
	takeLane(t, l, true)
}

func takeLane(t *testing.T, l lane, long bool) {
	t.Helper()
	t.Parallel()
	shares := min(int64(l), machineShares())
	start := time.Now()
	lanes.acquire(shares, long)
	t.Cleanup(func() { lanes.release(shares) })
	// test/testsummary reads this line: keep its form.
	t.Logf("lane: %d of %d shares after waiting %v", shares, machineShares(), time.Since(start).Round(time.Millisecond))
}

// laneQueue hands out shares, largest request first, long tests first
// among equals.
type laneQueue struct {
	mu      sync.Mutex
	free    int64
	waiting []laneWaiter // by shares, largest first, then long; stable in arrival
}

type laneWaiter struct {
	shares int64
	long   bool
	admit  chan struct{}
}

func (q *laneQueue) acquire(shares int64, long bool) {
	admit := make(chan struct{})
	q.mu.Lock()
	i := sort.Search(len(q.waiting), func(i int) bool {
		w := q.waiting[i]
		return w.shares < shares || (w.shares == shares && long && !w.long)
	})
	q.waiting = slices.Insert(q.waiting, i, laneWaiter{shares, long, admit})
	q.admitLocked()
	q.mu.Unlock()
	<-admit
}

func (q *laneQueue) release(shares int64) {
	q.mu.Lock()
	q.free += shares
	q.admitLocked()
	q.mu.Unlock()
}

// admitLocked lets in waiters from the head of the queue while they fit: a
// light test does not pass a heavy one, which would otherwise wait until
// the end and lengthen it.
func (q *laneQueue) admitLocked() {
	for len(q.waiting) > 0 && q.waiting[0].shares <= q.free {
		q.free -= q.waiting[0].shares
		close(q.waiting[0].admit)
		q.waiting = q.waiting[1:]
	}
}

// bothSides runs a comparison's two sides at once, each in a lane of its
// own: run(t, false) under kube-controller-manager, run(t, true) under the
// fleet. It returns once both ended, and ends t if either failed.
func bothSides[T any](t *testing.T, l lane, run func(t *testing.T, fleet bool) T) (kcm, fleet T) {
	t.Helper()
	out := sidesAtOnce(t, l, []string{"kube-controller-manager", "fleet"}, func(t *testing.T, side string) T {
		return run(t, side == "fleet")
	})
	return out["kube-controller-manager"], out["fleet"]
}

// sidesAtOnce runs run for each side at once, each in a lane of its own,
// as subtests of t named after the sides. It returns once all ended, and
// ends t if any failed.
func sidesAtOnce[T any](t *testing.T, l lane, sides []string, run func(t *testing.T, side string) T) map[string]T {
	t.Helper()
	t.Parallel()
	var mu sync.Mutex
	out := map[string]T{}
	ok := t.Run("sides", func(t *testing.T) {
		for _, side := range sides {
			t.Run(side, func(t *testing.T) {
				inLane(t, l)
				result := run(t, side)
				mu.Lock()
				out[side] = result
				mu.Unlock()
			})
		}
	})
	if !ok {
		t.FailNow()
	}
	return out
}

func TestLaneQueueLetsInLargestFirst(t *testing.T) {
	q := &laneQueue{}
	type waiter struct {
		shares int64
		long   bool
	}
	admitted := make(chan waiter, 5)
	for i, w := range []waiter{{1, false}, {2, false}, {1, true}, {2, true}, {1, false}} {
		go func() { q.acquire(w.shares, w.long); admitted <- w }()
		for q.waitingLen() < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	for _, tc := range []struct {
		release int64
		want    []waiter
	}{
		{1, nil},                 // 1 free: the heavy head does not fit, nobody passes it
		{1, []waiter{{2, true}}}, // the long one of the heavy two, though it asked later
		{2, []waiter{{2, false}}},
		{1, []waiter{{1, true}}},
		{2, []waiter{{1, false}, {1, false}}},
	} {
		q.release(tc.release)
		for _, want := range tc.want {
			if got := <-admitted; got != want {
				t.Fatalf("after releasing %d: admitted %v, want %v", tc.release, got, want)
			}
		}
		select {
		case got := <-admitted:
			t.Fatalf("after releasing %d: admitted %v more than %v", tc.release, got, tc.want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (q *laneQueue) waitingLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}
