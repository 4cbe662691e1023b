package informers

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The Namespaces informer's creations: only what its watch saw created.
func TestCreationsRecordWhatTheWatchSawCreated(t *testing.T) {
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: model.server.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	model.createNamespace("listed")
	pool, namespaces, _ := startModelPool(ctx, t, client)
	if !cache.WaitForCacheSync(ctx.Done(), namespaces.HasSynced) {
		t.Fatal("the Namespaces informer never synced")
	}
	model.createNamespace("watched")
	versionOf := func(name string) string {
		t.Helper()
		var version string
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			obj, exists, err := namespaces.GetStore().GetByKey(name)
			if err != nil || !exists {
				return false, err
			}
			version = obj.(*corev1.Namespace).ResourceVersion
			return true, nil
		})
		if err != nil {
			t.Fatalf("namespace %s never reached the informer: %v", name, err)
		}
		return version
	}
	tests := []struct {
		name, version, want string
	}{
		{name: "listed", version: versionOf("listed"), want: ""},
		{name: "watched", version: versionOf("watched"), want: versionOf("watched")},
		{name: "watched", version: "1", want: ""},
		{name: "never", version: "1", want: ""},
	}
	for _, tc := range tests {
		if got := pool.creations.Of(tc.name, tc.version); got != tc.want {
			t.Errorf("Of(%q, %q) = %q, want %q", tc.name, tc.version, got, tc.want)
		}
	}
	var none *Creations
	if got := none.Of("watched", "1"); got != "" {
		t.Errorf("no creations: Of = %q, want none", got)
	}
}

// A selected watch takes a namespace created in a loaded partition from
// its creation, with no list, even once it has delivered past that
// version (the Namespaces watch late); without creations it lists it.
func TestSelectedWatchTakesANewNamespaceFromItsCreation(t *testing.T) {
	tests := []struct {
		name      string
		creations bool
		wantLists int
	}{
		{name: "creations recorded", creations: true, wantLists: 0},
		{name: "no creations", creations: false, wantLists: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := newAPIServerModel()
			// Bookmarks (every 100 ms) carry the trunk past the
			// namespace's creation before its Namespace event arrives.
			model.namespaceLatency = 400 * time.Millisecond
			defer model.close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			model.createNamespace("old")
			model.writeConfigMap("old", "a", false)
			_, informer := startModelCache(ctx, t, model, OwnedCacheConfig{Sharded: true, MaxTerms: 2,
				PartitionOf: func(string) int { return 0 }, Partitions: 1, SelectedWatches: sets.New("configmaps")}, tc.creations)
			before := model.countsNow()["list configmaps"]
			model.createNamespace("new")
			model.writeConfigMap("new", "first", false)
			model.writeConfigMap("old", "b", false)
			err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
				return maps.Equal(heldIn(informer, "new"), model.configMapsIn("new")) && maps.Equal(heldIn(informer, "old"), model.configMapsIn("old")), nil
			})
			if err != nil {
				t.Fatalf("the cache holds new %v and old %v, want %v and %v", heldIn(informer, "new"), heldIn(informer, "old"), model.configMapsIn("new"), model.configMapsIn("old"))
			}
			if lists := model.countsNow()["list configmaps"] - before; lists != tc.wantLists {
				t.Errorf("ConfigMaps listed %d times for the new namespace, want %d", lists, tc.wantLists)
			}
		})
	}
}
