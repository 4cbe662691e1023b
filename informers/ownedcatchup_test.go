package informers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// TestGainCatchesUpWithTheServer gains partitions whose namespaces the
// owned cache holds already, everywhere for a singleton, while the source
// carrying them is behind the server (its watch stalled, or told 410 Gone
// and not listed again yet) and something changed there: Load must not
// return before the informer holds the namespace as the server did after
// the gain began. Without the catch-up it returned at once, and a Job
// controller handed the cache ran a Job's Pod again.
func TestGainCatchesUpWithTheServer(t *testing.T) {
	// Parallel: it mostly waits on its model's timers, beside the other
	// tests that do.
	t.Parallel()
	inBothListModes(t, testGainCatchesUp)
}

func testGainCatchesUp(t *testing.T, sharded bool) {
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type row struct {
		name string
		// before writes the namespace's objects while the cache follows.
		before func(ns string)
		// behind puts the source carrying the namespace behind the
		// server and changes what it has not delivered.
		behind func(ns string)
		// thaw: the stalled watches are thawed once Load has been
		// called; otherwise they stay stalled and the source must be
		// made to list again.
		thaw   bool
		relist bool
		want   map[string]bool // names the informer must hold
	}
	rows := []row{
		{
			name:   "nothing changed while stalled",
			before: func(ns string) { model.writeConfigMap(ns, "kept", false) },
			behind: func(string) { model.stall(true) },
			want:   map[string]bool{"kept": true},
		},
		{
			name:   "created while stalled",
			before: func(ns string) { model.writeConfigMap(ns, "kept", false) },
			behind: func(ns string) { model.stall(true); model.writeConfigMap(ns, "new", false) },
			thaw:   true,
			want:   map[string]bool{"kept": true, "new": true},
		},
		{
			name:   "the namespace's first object created while stalled",
			before: func(string) {},
			behind: func(ns string) { model.stall(true); model.writeConfigMap(ns, "first", false) },
			thaw:   true,
			want:   map[string]bool{"first": true},
		},
		{
			name:   "deleted while stalled",
			before: func(ns string) { model.writeConfigMap(ns, "kept", false); model.writeConfigMap(ns, "gone", false) },
			behind: func(ns string) { model.stall(true); model.deleteConfigMap(ns, "gone") },
			thaw:   true,
			want:   map[string]bool{"kept": true},
		},
		{
			name:   "updated while stalled",
			before: func(ns string) { model.writeConfigMap(ns, "changed", false) },
			behind: func(ns string) { model.stall(true); model.writeConfigMap(ns, "changed", true) },
			thaw:   true,
			want:   map[string]bool{"changed": true},
		},
		{
			name:   "created while stalled for good",
			before: func(ns string) { model.writeConfigMap(ns, "kept", false) },
			behind: func(ns string) { model.stall(true); model.writeConfigMap(ns, "new", false) },
			relist: true,
			want:   map[string]bool{"kept": true, "new": true},
		},
		{
			// Last: the compaction makes the source list again on its
			// own, after the row too.
			name:   "created, then the history compacted",
			before: func(ns string) { model.writeConfigMap(ns, "kept", false) },
			behind: func(ns string) {
				model.stall(true)
				model.writeConfigMap(ns, "new", false)
				model.compact()
				model.stall(false)
			},
			want: map[string]bool{"kept": true, "new": true},
		},
	}
	// Each row gains a partition of its own: partition i+1 is namespace
	// ns-i (rowPartition); partition 0 is the replica's from the start.
	model.createNamespace("home")
	for i, r := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		model.createNamespace(ns)
		r.before(ns)
	}
	owned, informer := startRowCache(ctx, t, model, sharded)
	// A singleton reads every ConfigMap here: the rows' namespaces are
	// held before their partitions are gained.
	if _, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	holds := func(ns string) map[string]string { return heldIn(informer, ns) }
	for i, r := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		t.Run(r.name, func(t *testing.T) {
			defer model.stall(false)
			// The cache follows the server before the row's change.
			server := func() map[string]string { return model.configMapsIn(ns) }
			if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return diffVersions(holds(ns), server()) == "", nil }); err != nil {
				t.Fatalf("before the row, the cache never held %s as the server: %s", ns, diffVersions(holds(ns), server()))
			}
			relists := counterValue(t, catchUpRelists.WithLabelValues("configmaps"))
			r.behind(ns)
			want := server()
			loaded := make(chan error, 1)
			go func() { loaded <- owned.Load(ctx, i+1) }()
			if r.thaw {
				// Thawed only once the gain has read the server, so the
				// gain finds its source behind.
				time.Sleep(200 * time.Millisecond)
				model.stall(false)
			}
			if err := <-loaded; err != nil {
				t.Fatal(err)
			}
			got := holds(ns)
			for name := range r.want {
				if _, ok := got[name]; !ok {
					t.Errorf("Load returned while the informer lacked %s/%s; it holds %v", ns, name, got)
				}
			}
			// Every object at least as new as the server's after the
			// change, and nothing the server no longer has.
			for name, version := range got {
				if !r.want[name] {
					t.Errorf("Load returned while the informer held %s/%s, deleted on the server", ns, name)
				} else if newerVersion(want[name], version) {
					t.Errorf("Load returned while the informer held %s/%s at version %s, older than the server's %s", ns, name, version, want[name])
				}
			}
			relisted := counterValue(t, catchUpRelists.WithLabelValues("configmaps")) > relists
			if relisted != r.relist {
				t.Errorf("the gain made the source list again: %v, want %v", relisted, r.relist)
			}
		})
	}
}

func counterValue(t *testing.T, c metrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
