package informers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestHeldEverywhereAgainAfterARelease follows what a replica whose
// authority runs out and comes back does to a kind held everywhere for a
// singleton (Pods): its partitions and its singletons stop, in either
// order, dropping the namespaces of the partitions from the informer;
// they start again, the singleton holding every namespace once more and
// the partitions gained. HoldEverywhere and then Load must each return
// with the informer holding the partitions' namespaces as the server
// does, objects written while they were away included. A cache that
// took the namespaces back as empty made a ReplicaSet controller handed
// it see none of its Pods and create them all again.
func TestHeldEverywhereAgainAfterARelease(t *testing.T) {
	// Parallel: it mostly waits on its model's timers, beside the other
	// tests that do.
	t.Parallel()
	inBothListModes(t, testHeldEverywhereAgain)
}

func testHeldEverywhereAgain(t *testing.T, sharded bool) {
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type row struct {
		name string
		// partitionFirst: the partition is released before the
		// singleton lets go of every namespace; else after.
		partitionFirst bool
		// away: how long between the release and the singleton holding
		// every namespace again.
		away time.Duration
	}
	rows := []row{
		{name: "partition released first, back at once", partitionFirst: true},
		{name: "singleton released first, back at once"},
		{name: "partition released first, back after a while", partitionFirst: true, away: 3 * time.Second},
		{name: "singleton released first, back after a while", away: 3 * time.Second},
	}
	// Row i's namespace is ns-i, of partition i+1 (rowPartition);
	// partition 0 is the replica's throughout.
	model.createNamespace("home")
	for i := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		model.createNamespace(ns)
		model.writeConfigMap(ns, "kept", false)
		model.writeConfigMap(ns, "changed", false)
		model.writeConfigMap(ns, "gone", false)
	}
	owned, informer := startRowCache(ctx, t, model, sharded)
	if _, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	holds := func(ns string) map[string]string { return heldIn(informer, ns) }
	for i, r := range rows {
		ns, p := fmt.Sprintf("ns-%d", i), i+1
		t.Run(r.name, func(t *testing.T) {
			if err := owned.Load(ctx, p); err != nil {
				t.Fatal(err)
			}
			if d := diffVersions(holds(ns), model.configMapsIn(ns)); d != "" {
				t.Fatalf("before the release, Load returned while the informer differed from the server: %s", d)
			}
			if r.partitionFirst {
				owned.Unload(p)
				owned.ReleaseEverywhere(&corev1.ConfigMap{})
			} else {
				owned.ReleaseEverywhere(&corev1.ConfigMap{})
				owned.Unload(p)
			}
			// The informer is handed the deletions asynchronously.
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return len(holds(ns)) == 0, nil }); err != nil {
				t.Fatalf("released, the informer still holds %s: %v", ns, holds(ns))
			}
			// Written while no one here holds the namespace.
			model.writeConfigMap(ns, "new", false)
			model.writeConfigMap(ns, "changed", true)
			model.deleteConfigMap(ns, "gone")
			time.Sleep(r.away)
			if _, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{}); err != nil {
				t.Fatal(err)
			}
			if d := diffVersions(holds(ns), model.configMapsIn(ns)); d != "" {
				t.Errorf("HoldEverywhere returned while the informer differed from the server in %s: %s", ns, d)
			}
			if err := owned.Load(ctx, p); err != nil {
				t.Fatal(err)
			}
			if d := diffVersions(holds(ns), model.configMapsIn(ns)); d != "" {
				t.Errorf("Load returned while the informer differed from the server in %s: %s", ns, d)
			}
		})
	}
}

// TestHoldEverywhereCatchesUpWithTheServer: a singleton starting to hold
// every namespace reads those the replica's partitions hold already from
// the source carrying them, which can be behind the server (its watch
// stalled) after an object there was created: the first HoldEverywhere
// must not return before the informer holds it, and makes a source still
// behind after catchUpRelistAfter list again.
func TestHoldEverywhereCatchesUpWithTheServer(t *testing.T) {
	// Parallel: it mostly waits on its model's timers, beside the other
	// tests that do.
	t.Parallel()
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows := []struct {
		name string
		// thaw: the stalled watches are thawed once HoldEverywhere has
		// been called; otherwise the source must be made to list again.
		thaw   bool
		relist bool
	}{
		{name: "created while stalled", thaw: true},
		{name: "created while stalled for good", relist: true},
	}
	// Row i's namespace is ns-i, of partition i+1 (rowPartition), loaded
	// before the row.
	model.createNamespace("home")
	for i := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		model.createNamespace(ns)
		model.writeConfigMap(ns, "kept", false)
	}
	owned, informer := startRowCache(ctx, t, model, false)
	for i, r := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		t.Run(r.name, func(t *testing.T) {
			defer model.stall(false)
			if err := owned.Load(ctx, i+1); err != nil {
				t.Fatal(err)
			}
			relists := counterValue(t, catchUpRelists.WithLabelValues("configmaps"))
			model.stall(true)
			model.writeConfigMap(ns, "new", false)
			held := make(chan error, 1)
			go func() {
				_, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{})
				held <- err
			}()
			if r.thaw {
				time.Sleep(200 * time.Millisecond)
				model.stall(false)
			}
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			defer owned.ReleaseEverywhere(&corev1.ConfigMap{})
			if _, exists, _ := informer.GetIndexer().GetByKey(ns + "/new"); !exists {
				t.Errorf("HoldEverywhere returned while the informer lacked %s/new", ns)
			}
			relisted := counterValue(t, catchUpRelists.WithLabelValues("configmaps")) > relists
			if relisted != r.relist {
				t.Errorf("the hold made the source list again: %v, want %v", relisted, r.relist)
			}
		})
	}
}
