package controllers

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// testTable is a partition table whose controllers run (no owned cache:
// every object is in the shared informers), with a scope over 8
// partitions (namespace "ns-<p>" is in partition p), and a "job"
// workqueue whose adds and Done counts the test sets.
type testTable struct {
	*partitionTable
	queueAdds *prometheus.CounterVec
	queueDone *prometheus.HistogramVec
	ended     chan shard.Ended
	// gained: the partitions delivered as gained, in order.
	gained []int
}

func newTestTable(t *testing.T) *testTable {
	t.Helper()
	partitionOf := func(ns string) int {
		p, _ := strconv.Atoi(strings.TrimPrefix(ns, "ns-"))
		return p
	}
	registry := prometheus.NewRegistry()
	tt := &testTable{
		queueAdds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total"}, []string{"name"}),
		queueDone: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds"}, []string{"name"}),
		ended:     make(chan shard.Ended, 16),
	}
	registry.MustRegister(tt.queueAdds, tt.queueDone)
	tt.queueAdds.WithLabelValues("job").Add(0)
	drain := newQueueDrain(registry)
	drain.minInterval = 0
	tt.partitionTable = &partitionTable{
		scope: informers.NewScope(8, partitionOf), partitionOf: partitionOf,
		drain: drain, ended: tt.ended, wake: make(chan struct{}, 1), rows: map[int]*partitionRow{},
		controllersRunning: true,
	}
	tt.deliverGain = func(p int) int {
		tt.gained = append(tt.gained, p)
		return tt.scope.Gain(p)
	}
	return tt
}

// writable says whether a write into p's namespace passes its gate.
func (tt *testTable) writable(p int) bool {
	gate := tt.gateOf("ns-"+strconv.Itoa(p), false)
	if gate == nil {
		return false
	}
	done, ok := gate.admit(false)
	if ok {
		done()
	}
	return ok
}

// stop stops p's run as the Manager does and waits until it is reported
// ended.
func (tt *testTable) stop(t *testing.T, p int) {
	t.Helper()
	tt.Stop([]int{p}, true)
	select {
	case e := <-tt.ended:
		if e.Piece != shard.PartitionPiece(p) || e.Err != nil {
			t.Fatalf("ended %v (%v), want partition %d", e.Piece, e.Err, p)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the run of partition %d was not reported ended", p)
	}
}

// backEarly serves p, releases it with a key its release queued still
// undone, and starts a new run of p.
func (tt *testTable) backEarly(t *testing.T, p int) {
	t.Helper()
	tt.Start([]int{p})
	tt.reconcile(t.Context())
	tt.stop(t, p)
	tt.reconcile(t.Context())
	tt.queueAdds.WithLabelValues("job").Inc()
	tt.Start([]int{p})
}

// TestPartitionTableReconcile: what one reconcile does from the table.
func TestPartitionTableReconcile(t *testing.T) {
	tests := []struct {
		name string
		// steps runs the scenario and returns what to check.
		steps func(t *testing.T, ts *testTable)
	}{{
		name: "a wanted partition is served: in scope, writable",
		steps: func(t *testing.T, ts *testTable) {
			ts.Start([]int{1})
			if retry := ts.reconcile(t.Context()); retry != 0 {
				t.Fatalf("retry after %v, want none", retry)
			}
			if !slices.Equal(ts.served(), []int{1}) || !ts.scope.Owns(1) || !ts.writable(1) {
				t.Fatalf("served %v, in scope %v, writable %v", ts.served(), ts.scope.Owns(1), ts.writable(1))
			}
		},
	}, {
		name: "a stopped run can no longer write once Stop returns, and the next reconcile takes the partition out",
		steps: func(t *testing.T, ts *testTable) {
			ts.Start([]int{1})
			ts.reconcile(t.Context())
			ts.Stop([]int{1}, true)
			if ts.writable(1) {
				t.Fatal("a write passed after Stop returned")
			}
			ts.reconcile(t.Context())
			if len(ts.served()) != 0 || ts.scope.Owns(1) || ts.rows[1].releasedAt.IsZero() {
				t.Fatalf("served %v, in scope %v, released at %v", ts.served(), ts.scope.Owns(1), ts.rows[1].releasedAt)
			}
		},
	}, {
		name: "a run stopped before its gain is not served",
		steps: func(t *testing.T, ts *testTable) {
			ts.Start([]int{1})
			gate := ts.rows[1].run
			ts.Stop([]int{1}, true)
			if gate.Open() {
				t.Fatal("a stopped run's gate opened")
			}
			ts.reconcile(t.Context())
			if len(ts.gained) != 0 || ts.writable(1) {
				t.Fatalf("gained %v, writable %v", ts.gained, ts.writable(1))
			}
		},
	}, {
		name: "back early: waits until the keys its release queued are done",
		steps: func(t *testing.T, ts *testTable) {
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
		steps: func(t *testing.T, ts *testTable) {
			ts.backEarly(t, 1)
			ts.reconcile(t.Context())
			ts.rows[1].releasedAt = time.Now().Add(-minOutOfScope)
			ts.reconcile(t.Context())
			if !slices.Equal(ts.served(), []int{1}) {
				t.Fatalf("served %v", ts.served())
			}
		},
	}, {
		name: "a new run before the old run's release was applied: released, then regained for the new run",
		steps: func(t *testing.T, ts *testTable) {
			ts.Start([]int{1})
			ts.reconcile(t.Context())
			ts.stop(t, 1)
			ts.Start([]int{1})
			if states := ts.states(); states[1] != rowReleasing {
				t.Fatalf("state %q, want %q", states[1], rowReleasing)
			}
			ts.reconcile(t.Context())
			r := ts.rows[1]
			if r.releasedAt.IsZero() || r.served != r.run || !ts.writable(1) || !slices.Equal(ts.gained, []int{1, 1}) {
				t.Fatalf("released at %v, served for the new run %v, writable %v, gained %v", r.releasedAt, r.served == r.run, ts.writable(1), ts.gained)
			}
		},
	}, {
		name: "a step's partitions are gained in one reconcile",
		steps: func(t *testing.T, ts *testTable) {
			ts.Start([]int{1, 2})
			ts.reconcile(t.Context())
			if !slices.Equal(ts.gained, []int{1, 2}) {
				t.Fatalf("gained %v", ts.gained)
			}
		},
	}, {
		name: "a write admitted before Stop is waited for: the run is reported ended once it is answered",
		steps: func(t *testing.T, ts *testTable) {
			ts.Start([]int{1})
			ts.reconcile(t.Context())
			done, ok := ts.gateOf("ns-1", false).admit(false)
			if !ok {
				t.Fatal("a write into a served partition was refused")
			}
			ts.Stop([]int{1}, true)
			select {
			case e := <-ts.ended:
				t.Fatalf("%v reported ended with a write in flight", e.Piece)
			case <-time.After(50 * time.Millisecond):
			}
			done()
			select {
			case <-ts.ended:
			case <-time.After(5 * time.Second):
				t.Fatal("not reported ended once its write was answered")
			}
		},
	}, {
		name: "the gate opens before the objects are delivered",
		steps: func(t *testing.T, ts *testTable) {
			var admitted []bool
			ts.deliverGain = func(p int) int {
				admitted = append(admitted, ts.writable(p))
				return 0
			}
			ts.Start([]int{3})
			ts.reconcile(t.Context())
			if !slices.Equal(admitted, []bool{true}) {
				t.Fatalf("writes admitted while delivering: %v, want [true]", admitted)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.steps(t, newTestTable(t))
		})
	}
}

// TestPartitionTableLoop: the loop reconciles on its own when a run
// starts and when it stops.
func TestPartitionTableLoop(t *testing.T) {
	ts := newTestTable(t)
	go ts.loop(t.Context())
	ts.Start([]int{2})
	waitFor(t, "partition 2 served", func() bool { return slices.Equal(ts.served(), []int{2}) })
	ts.stop(t, 2)
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
