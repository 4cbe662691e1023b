package informers

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// TestRelistCovers: a trunk's list covers the namespaces it named and
// carries, not those it carries but did not name, nor one a feeder
// handed over at a newer version (stale, not taken back).
func TestRelistCovers(t *testing.T) {
	for _, r := range []struct {
		name      string
		listed    map[string]string
		carries   []string
		floors    map[string]string
		want      []string
		wantStale []string
	}{
		{
			name:    "only the namespaces it named",
			listed:  map[string]string{"": "9", "a": "9"},
			carries: []string{"a", "b"},
			want:    []string{"a"},
		},
		{
			name:      "not one handed over newer",
			listed:    map[string]string{"": "9", "a": "9", "b": "9"},
			carries:   []string{"a", "b"},
			floors:    map[string]string{"b": "12"},
			want:      []string{"a"},
			wantStale: []string{"b"},
		},
	} {
		t.Run(r.name, func(t *testing.T) {
			lw := newOwnedListWatch(nil, false, 1, 0)
			src := &source{namespaces: r.carries, floors: r.floors}
			covered, stale := lw.relistCovers(src, r.listed, "9")
			if !slices.Equal(covered, r.want) || !slices.Equal(slices.Sorted(maps.Keys(stale)), r.wantStale) {
				t.Errorf("covered %v (stale %v), want %v (stale %v)", covered, stale, r.want, r.wantStale)
			}
		})
	}
}

// TestGainWakesASourceWaitingToResume gains a partition whose namespace
// the owned cache holds everywhere while the source carrying it waits to
// resume a watch kube-apiserver closed, and a ConfigMap was created and
// deleted meanwhile (the root-CA publisher's, deleted by a user): the
// gain must wake the source, whose watch then tells the informer's
// handlers of the deletion, rather than wait and make it list again,
// which folds the deletion away. Without the wake, the publisher never
// heard its ConfigMap was deleted and never wrote it again (the
// owned-cache simulation: "no publisher's ConfigMap in namespace").
func TestGainWakesASourceWaitingToResume(t *testing.T) {
	inBothListModes(t, testGainWakes)
}

func testGainWakes(t *testing.T, sharded bool) {
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model.createNamespace("home")
	model.createNamespace("ns-0")
	model.writeConfigMap("ns-0", "kept", false)
	owned, informer := startRowCache(ctx, t, model, sharded)
	var mu sync.Mutex
	var deleted []string
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			mu.Lock()
			deleted = append(deleted, m.GetNamespace()+"/"+m.GetName())
			mu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	// The source follows ns-0 before its watch is closed.
	server := func() map[string]string { return model.configMapsIn("ns-0") }
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return diffVersions(heldIn(informer, "ns-0"), server()) == "", nil
	}); err != nil {
		t.Fatalf("the cache never followed ns-0: %s", diffVersions(heldIn(informer, "ns-0"), server()))
	}
	// One source, merged from the trunk and the adopter the hold began:
	// a merge starts a new watch, which would deliver what this test
	// needs the gain to wake for.
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return owned.Sources()["configmaps"] == 1 && model.countsNow()["open watches"] == 2, nil
	}); err != nil {
		t.Fatalf("the sources were never merged and watching (the Namespaces informer's watch beside): %v, %v", owned.Sources(), model.countsNow())
	}
	lw := owned.informers[reflect.TypeOf(&corev1.ConfigMap{})].lw
	lw.mu.Lock()
	lw.closedWaitForTest = time.Hour
	lw.mu.Unlock()
	model.closeWatches()
	// The gain finds the source behind: kept changed too.
	model.writeConfigMap("ns-0", "kept", true)
	model.writeConfigMap("ns-0", "root", false)
	model.deleteConfigMap("ns-0", "root")
	relists := counterValue(t, catchUpRelists.WithLabelValues("configmaps"))
	loadCtx, cancelLoad := context.WithTimeout(ctx, 30*time.Second)
	defer cancelLoad()
	if err := owned.Load(loadCtx, rowPartition("ns-0")); err != nil {
		t.Fatalf("the gain did not return: %v; the owned cache waits for %v", err, owned.Waiting())
	}
	if got := counterValue(t, catchUpRelists.WithLabelValues("configmaps")); got > relists {
		t.Errorf("the gain made the source list again (%v relists), folding what its watch would have told", got-relists)
	}
	told := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(deleted, "ns-0/root")
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return told(), nil }); err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("the informer's handlers were never told ns-0/root was deleted; told of the deletion of %v", deleted)
	}
}
