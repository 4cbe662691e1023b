package informers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestHeldEverywhereAgainAfterARelease follows what a replica whose
// authority runs out and comes back does to a kind held everywhere for a
// singleton (Pods): its partitions and its singletons stop, in either
// order, dropping the namespaces of the partitions from the informer;
// they start again, the singleton holding every namespace once more and
// the partitions gained. HoldEverywhere and then Load must each return
// with the informer holding the partitions' namespaces as the server
// does, objects written while they were away included. A source that
// adopted every namespace and outlived the release took them back as
// empty: a ReplicaSet controller handed that cache saw none of its Pods
// and created them all again.
func TestHeldEverywhereAgainAfterARelease(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			testHeldEverywhereAgain(t, sharded)
		})
	}
}

func testHeldEverywhereAgain(t *testing.T, sharded bool) {
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := &rest.Config{Host: model.server.URL, QPS: -1}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name string
		// partitionFirst: the partition is released before the
		// singleton lets go of every namespace; else after.
		partitionFirst bool
		// away: how long between the release and the singleton holding
		// every namespace again (past compactDelay, the sources have
		// merged in between).
		away time.Duration
	}
	rows := []row{
		{name: "partition released first, back at once", partitionFirst: true},
		{name: "singleton released first, back at once"},
		{name: "partition released first, back after the sources merged", partitionFirst: true, away: compactDelay + time.Second},
		{name: "singleton released first, back after the sources merged", away: compactDelay + time.Second},
	}
	// Row i's namespace is ns-i, of partition i+1; partition 0 is the
	// replica's throughout.
	partitionOf := func(ns string) int {
		var i int
		if _, err := fmt.Sscanf(ns, "ns-%d", &i); err != nil {
			return 0
		}
		return i + 1
	}
	model.createNamespace("home")
	for i := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		model.createNamespace(ns)
		model.writeConfigMap(ns, "kept", false)
		model.writeConfigMap(ns, "changed", false)
		model.writeConfigMap(ns, "gone", false)
	}
	_, namespaces, mapper := startModelPool(ctx, t, client)
	owned, err := NewOwnedCache(OwnedCacheConfig{Sharded: sharded, MaxTerms: 2, RESTClients: NewRESTClients(config), Mapper: mapper, Namespaces: namespaces, PartitionOf: partitionOf})
	if err != nil {
		t.Fatal(err)
	}
	informer := owned.InformerFor(&corev1.ConfigMap{})
	if err := owned.Include(ctx, 0); err != nil {
		t.Fatal(err)
	}
	owned.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the owned cache never synced")
	}
	if _, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	holds := func(ns string) map[string]string {
		out := map[string]string{}
		objs, _ := informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		for _, obj := range objs {
			m, _ := meta.Accessor(obj)
			out[m.GetName()] = m.GetResourceVersion()
		}
		return out
	}
	server := func(ns string) map[string]string {
		out := map[string]string{}
		for key, version := range model.configMapVersions() {
			if name, ok := strings.CutPrefix(key, ns+"/"); ok {
				out[name] = version
			}
		}
		return out
	}
	for i, r := range rows {
		ns, p := fmt.Sprintf("ns-%d", i), i+1
		t.Run(r.name, func(t *testing.T) {
			if err := owned.Load(ctx, p); err != nil {
				t.Fatal(err)
			}
			if d := diffVersions(holds(ns), server(ns)); d != "" {
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
			if d := diffVersions(holds(ns), server(ns)); d != "" {
				t.Errorf("HoldEverywhere returned while the informer differed from the server in %s: %s", ns, d)
			}
			if err := owned.Load(ctx, p); err != nil {
				t.Fatal(err)
			}
			if d := diffVersions(holds(ns), server(ns)); d != "" {
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
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := &rest.Config{Host: model.server.URL, QPS: -1}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
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
	// Row i's namespace is ns-i, of partition i+1, loaded before the row.
	partitionOf := func(ns string) int {
		var i int
		if _, err := fmt.Sscanf(ns, "ns-%d", &i); err != nil {
			return 0
		}
		return i + 1
	}
	model.createNamespace("home")
	for i := range rows {
		ns := fmt.Sprintf("ns-%d", i)
		model.createNamespace(ns)
		model.writeConfigMap(ns, "kept", false)
	}
	_, namespaces, mapper := startModelPool(ctx, t, client)
	owned, err := NewOwnedCache(OwnedCacheConfig{MaxTerms: 2, RESTClients: NewRESTClients(config), Mapper: mapper, Namespaces: namespaces, PartitionOf: partitionOf})
	if err != nil {
		t.Fatal(err)
	}
	informer := owned.InformerFor(&corev1.ConfigMap{})
	if err := owned.Include(ctx, 0); err != nil {
		t.Fatal(err)
	}
	owned.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the owned cache never synced")
	}
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
