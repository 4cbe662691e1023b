package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"
)

// TestQueueDrainReadsUpstreamQueues drives a real upstream workqueue named
// like a notFoundQueues one through the metrics provider kube-controller-manager
// installs: a key added after the loss is outstanding until its worker
// calls Done, whatever the other queues hold.
func TestQueueDrainReadsUpstreamQueues(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint_slice_mirroring"})
	defer queue.ShutDown()
	other := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "deployment_drain_test"})
	defer other.ShutDown()
	other.Add("busy/forever")

	drain := newQueueDrain(legacyregistry.DefaultGatherer)
	drain.minInterval = 0
	lostAt := time.Now()
	queue.Add("ns/svc")
	queue.Add("ns/svc") // deduplicated: one add, one Done
	steps := []struct {
		name string
		act  func()
		want bool
	}{
		{"queued", func() {}, false},
		{"in a worker", func() {
			if key, _ := queue.Get(); key != "ns/svc" {
				t.Fatalf("got %q", key)
			}
		}, false},
		{"added again while in a worker", func() { queue.Add("ns/svc") }, false},
		{"done, and queued again", func() { queue.Done("ns/svc") }, false},
		{"done again", func() {
			key, _ := queue.Get()
			queue.Done(key)
		}, true},
	}
	for _, step := range steps {
		step.act()
		got, err := drain.drainedSince(lostAt)
		if err != nil {
			t.Fatal(err)
		}
		if got != step.want {
			t.Fatalf("%s: drainedSince = %v, want %v", step.name, got, step.want)
		}
	}
	// Drained once after the loss stays drained for it; a later loss
	// needs a reading after it.
	queue.Add("ns/other")
	if got, _ := drain.drainedSince(lostAt); !got {
		t.Fatal("a loss already seen drained is outstanding again")
	}
	if got, _ := drain.drainedSince(time.Now()); got {
		t.Fatal("a key added after a later loss is not outstanding")
	}
}

func TestQueueDrainCounts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		adds, dones map[string]float64
		want        bool
	}{
		{"no queue yet", nil, nil, true},
		{"every add done", map[string]float64{"job": 3, "endpoint": 2}, map[string]float64{"job": 3, "endpoint": 2}, true},
		{"a job key outstanding", map[string]float64{"job": 3}, map[string]float64{"job": 2}, false},
		{"another queue's keys do not count", map[string]float64{"deployment": 9, "job": 1}, map[string]float64{"job": 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			adds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total"}, []string{"name"})
			work := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds"}, []string{"name"})
			reg.MustRegister(adds, work)
			for q, n := range tc.adds {
				adds.WithLabelValues(q).Add(n)
			}
			for q, n := range tc.dones {
				for range int(n) {
					work.WithLabelValues(q).Observe(0.01)
				}
			}
			drain := newQueueDrain(reg)
			got, err := drain.drainedSince(time.Now().Add(-time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("drainedSince = %v, want %v", got, tc.want)
			}
		})
	}
}
