package controllers

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// testPartitionSet is a partition set whose controllers run (no owned
// cache: every object is in the shared informers), with a fence and a
// scope over 8 partitions (namespace "ns-<p>" is in partition p), and a
// "job" workqueue whose adds and Done counts the test sets.
type testPartitionSet struct {
	*partitionSet
	queueAdds *prometheus.CounterVec
	queueDone *prometheus.HistogramVec
	// gained: the partitions delivered as gained, in order.
	gained []int
}

func newTestPartitionSet(t *testing.T) *testPartitionSet {
	t.Helper()
	partitionOf := func(ns string) int {
		p, _ := strconv.Atoi(strings.TrimPrefix(ns, "ns-"))
		return p
	}
	registry := prometheus.NewRegistry()
	ts := &testPartitionSet{
		queueAdds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total"}, []string{"name"}),
		queueDone: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds"}, []string{"name"}),
	}
	registry.MustRegister(ts.queueAdds, ts.queueDone)
	ts.queueAdds.WithLabelValues("job").Add(0)
	drain := newQueueDrain(registry)
	drain.minInterval = 0
	ts.partitionSet = &partitionSet{
		runtime: &Runtime{partitions: newPartitionFence(partitionOf)},
		scope:   informers.NewScope(8, partitionOf),
		drain:   drain, wake: make(chan struct{}, 1),
		table: map[int]*partitionEntry{}, expected: map[int]bool{},
		running: true,
	}
	ts.deliverGain = func(p int) int {
		ts.gained = append(ts.gained, p)
		return ts.scope.Gain(p)
	}
	return ts
}

// writable says whether a write into p's namespace passes the fence.
func (ts *testPartitionSet) writable(p int) bool {
	done, ok := ts.runtime.partitions.admit("ns-" + strconv.Itoa(p))
	if ok {
		done()
	}
	return ok
}

// startRun starts a run of p's piece as the Manager does; stop ends it
// and returns once Run has.
func (ts *testPartitionSet) startRun(t *testing.T, p int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan error, 1)
	go func() { returned <- ts.run(ctx, shard.PartitionPiece(p)) }()
	// Registered once want has run: the table names the run.
	deadline := time.Now().Add(5 * time.Second)
	for ts.wantedBy(p) != ctx {
		if time.Now().After(deadline) {
			t.Fatalf("the run of partition %d did not register", p)
		}
		time.Sleep(time.Millisecond)
	}
	return func() {
		cancel()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatalf("run of partition %d: %v", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the run of partition %d did not return", p)
		}
	}
}

// backEarly serves p, loses it with a key its loss queued still undone,
// and starts a new run of p.
func (ts *testPartitionSet) backEarly(t *testing.T, p int) {
	t.Helper()
	stop := ts.startRun(t, p)
	ts.reconcile(t.Context())
	stop()
	ts.reconcile(t.Context())
	ts.queueAdds.WithLabelValues("job").Inc()
	ts.startRun(t, p)
}

// TestPartitionSetReconcile: what one reconcile does from the table.
func TestPartitionSetReconcile(t *testing.T) {
	tests := []struct {
		name string
		// steps runs the scenario and returns what to check.
		steps func(t *testing.T, ts *testPartitionSet)
	}{{
		name: "a wanted partition is served: in scope, writable",
		steps: func(t *testing.T, ts *testPartitionSet) {
			ts.startRun(t, 1)
			if retry := ts.reconcile(t.Context()); retry != 0 {
				t.Fatalf("retry after %v, want none", retry)
			}
			if !slices.Equal(ts.served(), []int{1}) || !ts.scope.Owns(1) || !ts.writable(1) {
				t.Fatalf("served %v, in scope %v, writable %v", ts.served(), ts.scope.Owns(1), ts.writable(1))
			}
		},
	}, {
		name: "a run that ends can no longer write when it returns, and the next reconcile takes the partition out",
		steps: func(t *testing.T, ts *testPartitionSet) {
			stop := ts.startRun(t, 1)
			ts.reconcile(t.Context())
			stop()
			if ts.writable(1) {
				t.Fatal("a write passed after the run returned")
			}
			ts.reconcile(t.Context())
			if len(ts.served()) != 0 || ts.scope.Owns(1) || ts.table[1].lostAt.IsZero() {
				t.Fatalf("served %v, in scope %v, lost at %v", ts.served(), ts.scope.Owns(1), ts.table[1].lostAt)
			}
		},
	}, {
		name: "a run that ended before its gain is not served",
		steps: func(t *testing.T, ts *testPartitionSet) {
			ctx, cancel := context.WithCancel(t.Context())
			ts.want(1, ctx)
			cancel() // its run has not reached unwant yet
			ts.reconcile(t.Context())
			if len(ts.gained) != 0 || ts.writable(1) {
				t.Fatalf("gained %v, writable %v", ts.gained, ts.writable(1))
			}
		},
	}, {
		name: "back early: waits until the keys its loss queued are done",
		steps: func(t *testing.T, ts *testPartitionSet) {
			ts.backEarly(t, 1)
			if retry := ts.reconcile(t.Context()); retry <= 0 || len(ts.served()) != 0 {
				t.Fatalf("retry after %v, served %v: want a wait and nothing served", retry, ts.served())
			}
			ts.queueDone.WithLabelValues("job").Observe(0.001)
			ts.reconcile(t.Context())
			if !slices.Equal(ts.served(), []int{1}) || !ts.writable(1) {
				t.Fatalf("served %v, writable %v", ts.served(), ts.writable(1))
			}
		},
	}, {
		name: "back early with keys never done: served once the quiet time is over",
		steps: func(t *testing.T, ts *testPartitionSet) {
			ts.backEarly(t, 1)
			ts.reconcile(t.Context())
			ts.table[1].lostAt = time.Now().Add(-minOutOfScope)
			ts.reconcile(t.Context())
			if !slices.Equal(ts.served(), []int{1}) {
				t.Fatalf("served %v", ts.served())
			}
		},
	}, {
		name: "a new run before the old run's loss was applied: lost, then regained for the new run",
		steps: func(t *testing.T, ts *testPartitionSet) {
			stop := ts.startRun(t, 1)
			ts.reconcile(t.Context())
			stop()
			ts.startRun(t, 1)
			ts.reconcile(t.Context())
			e := ts.table[1]
			if e.lostAt.IsZero() || e.servedFor != e.wantedBy || !ts.writable(1) || !slices.Equal(ts.gained, []int{1, 1}) {
				t.Fatalf("lost at %v, served for the new run %v, writable %v, gained %v", e.lostAt, e.servedFor == e.wantedBy, ts.writable(1), ts.gained)
			}
		},
	}, {
		name: "a step's partitions are gained in one reconcile once every run registered",
		steps: func(t *testing.T, ts *testPartitionSet) {
			ts.prepare([]int{1, 2})
			ts.startRun(t, 1)
			if retry := ts.reconcile(t.Context()); retry <= 0 || len(ts.gained) != 0 {
				t.Fatalf("retry after %v, gained %v: want a wait for partition 2", retry, ts.gained)
			}
			ts.startRun(t, 2)
			ts.reconcile(t.Context())
			if !slices.Equal(ts.gained, []int{1, 2}) {
				t.Fatalf("gained %v", ts.gained)
			}
		},
	}, {
		name: "a step's run that never registers holds the others at most prepareWait",
		steps: func(t *testing.T, ts *testPartitionSet) {
			ts.prepare([]int{1, 2})
			ts.startRun(t, 1)
			ts.expectedAt = time.Now().Add(-prepareWait)
			ts.reconcile(t.Context())
			if !slices.Equal(ts.gained, []int{1}) {
				t.Fatalf("gained %v", ts.gained)
			}
		},
	}, {
		name: "the gate opens before the objects are delivered",
		steps: func(t *testing.T, ts *testPartitionSet) {
			var admitted []bool
			ts.deliverGain = func(p int) int {
				admitted = append(admitted, ts.writable(p))
				return 0
			}
			ts.startRun(t, 3)
			ts.reconcile(t.Context())
			if !slices.Equal(admitted, []bool{true}) {
				t.Fatalf("writes admitted while delivering: %v, want [true]", admitted)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.steps(t, newTestPartitionSet(t))
		})
	}
}

// TestPartitionSetLoop: the loop reconciles on its own when a run
// registers and when it ends.
func TestPartitionSetLoop(t *testing.T) {
	ts := newTestPartitionSet(t)
	go ts.loop(t.Context())
	stop := ts.startRun(t, 2)
	waitFor(t, "partition 2 served", func() bool { return slices.Equal(ts.served(), []int{2}) })
	stop()
	waitFor(t, "partition 2 out of scope", func() bool { return len(ts.served()) == 0 && !ts.scope.Owns(2) })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
