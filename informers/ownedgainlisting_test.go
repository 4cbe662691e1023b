package informers

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// A gain must not show a partition's namespace while the trunk lists
// again (its version expired): shown then, a ConfigMap created and
// deleted in it before that list folds into it, and the handlers it was
// shown to never hear of it. Two guards hold it, one per moment the list
// can begin:
//
//   - the gain begins while the trunk lists (TestGainWaitsForTheTrunksList):
//     the namespace joins the listing trunk and stays awaited until that
//     list is in, so this holds with -ownedsim.plant=gain-shows-while-listing
//     too, and fails only with both guards out;
//   - the trunk begins listing after the gain's own list of the namespace
//     was handed over (TestGainWaitsForATrunkListingAfterItsList): nothing
//     is awaited any more, and only the gain's wait for ready sources holds
//     it, so the plant fails it. No simulated schedule can: what the
//     plant folds there is a deletion compacted away, which the
//     simulation exempts, as a plain informer's relist folds it too.

func TestGainWaitsForTheTrunksList(t *testing.T) {
	plantRule(t, *ownedSimPlant)
	inBothListModes(t, testGainWaitsForTheTrunksList)
}

func testGainWaitsForTheTrunksList(t *testing.T, sharded bool) {
	ctx, model, owned, _ := startGainListing(t, sharded)

	// The next ConfigMap list, the trunk's, waits until released.
	trunkList := holdConfigMapLists(model, 1)[0]
	defer trunkList.release()
	expireTrunk(model)
	trunkList.waitEntered(ctx, t, "the trunk's list after its version was compacted away", owned)

	loaded := make(chan error, 1)
	go func() { loaded <- owned.Load(ctx, rowPartition("ns-1")) }()
	// The gain's read of the namespaces is answered at once, and ns-1
	// joins the listing trunk: what the gain then waits for is the
	// trunk's list alone.
	expectGainAfter(ctx, t, owned, loaded, trunkList)
}

func TestGainWaitsForATrunkListingAfterItsList(t *testing.T) {
	plantRule(t, *ownedSimPlant)
	inBothListModes(t, testGainWaitsForATrunkListingAfterItsList)
}

func testGainWaitsForATrunkListingAfterItsList(t *testing.T, sharded bool) {
	ctx, model, owned, informer := startGainListing(t, sharded)

	// The next ConfigMap list is the feeder's of ns-1, the one after it
	// the trunk's; each waits until released.
	lists := holdConfigMapLists(model, 2)
	feederList, trunkList := lists[0], lists[1]
	defer feederList.release()
	defer trunkList.release()
	loaded := make(chan error, 1)
	go func() { loaded <- owned.Load(ctx, rowPartition("ns-1")) }()
	feederList.waitEntered(ctx, t, "the gain's list of ns-1", owned)
	expireTrunk(model)
	trunkList.waitEntered(ctx, t, "the trunk's list after its version was compacted away", owned)
	// ns-1's list is handed over while the trunk's is in flight: the
	// informer holds ns-1, and nothing of it is awaited.
	feederList.release()
	if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(heldIn(informer, "ns-1")) == 1, nil
	}); err != nil {
		t.Fatalf("ns-1's list was never handed over: %v", owned.Waiting())
	}
	expectGainAfter(ctx, t, owned, loaded, trunkList)
}

// startGainListing starts a row cache of the model holding namespaces home
// (partition 0, loaded) and ns-1 (not loaded) with a ConfigMap, ended
// with t.
func startGainListing(t *testing.T, sharded bool) (context.Context, *apiServerModel, *OwnedCache, cache.SharedIndexInformer) {
	t.Helper()
	model := newAPIServerModel()
	t.Cleanup(model.close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	model.createNamespace("home")
	model.createNamespace("ns-1")
	model.writeConfigMap("ns-1", "kept", false)
	owned, informer := startRowCache(ctx, t, model, sharded)
	return ctx, model, owned, informer
}

// expireTrunk makes the trunk's watch resume to 410 Gone, so that it
// lists again: stalled, it misses a write, which is compacted away.
func expireTrunk(model *apiServerModel) {
	model.stall(true)
	model.writeConfigMap("home", "passed", false)
	model.compact()
	model.stall(false)
}

// expectGainAfter fails t if the gain (loaded) returns before trunkList is
// released, and waits for the cache to settle after it.
func expectGainAfter(ctx context.Context, t *testing.T, owned *OwnedCache, loaded <-chan error, trunkList *heldList) {
	t.Helper()
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatal(err)
		}
		if !trunkList.isReleased() {
			t.Errorf("the gain showed ns-1 while the trunk's list was in flight: what happens in ns-1 before that list is answered folds into it")
		}
	case <-time.After(time.Second):
		t.Logf("the gain waits, the trunk's list in flight: %+v", owned.Waiting())
		trunkList.release()
		if err := <-loaded; err != nil {
			t.Fatal(err)
		}
	}
	trunkList.release()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return owned.Sources()["configmaps"] > 0 && len(owned.Waiting()) == 0, nil
	}); err != nil {
		t.Fatalf("the cache never settled after the list: waiting for %v", owned.Waiting())
	}
}

// heldList is one ConfigMap list of the model held in flight, before its
// snapshot, until released.
type heldList struct {
	entered, released chan struct{}
	once              sync.Once
}

// holdConfigMapLists holds each of the model's next n ConfigMap lists
// until released; any later one is answered at once.
func holdConfigMapLists(model *apiServerModel, n int) []*heldList {
	lists := make([]*heldList, n)
	for i := range lists {
		lists[i] = &heldList{entered: make(chan struct{}), released: make(chan struct{})}
	}
	var mu sync.Mutex
	calls := 0
	model.mu.Lock()
	model.beforeList = func() {
		mu.Lock()
		i := calls
		calls++
		mu.Unlock()
		if i < n {
			close(lists[i].entered)
			<-lists[i].released
		}
	}
	model.mu.Unlock()
	return lists
}

func (l *heldList) release() { l.once.Do(func() { close(l.released) }) }

func (l *heldList) isReleased() bool {
	select {
	case <-l.released:
		return true
	default:
		return false
	}
}

// waitEntered fails t unless the list (what) is asked for within ctx.
func (l *heldList) waitEntered(ctx context.Context, t *testing.T, what string, owned *OwnedCache) {
	t.Helper()
	select {
	case <-l.entered:
	case <-ctx.Done():
		t.Fatalf("%s was never asked for: waiting %+v", what, owned.Waiting())
	}
}
