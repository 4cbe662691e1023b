package informers

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestGainWaitsForTheTrunksList gains a partition while the trunk lists
// again (its version expired): the gain must not show the partition's
// namespace before that list is answered. Shown earlier, a ConfigMap
// created and deleted in it meanwhile folds into the trunk's list, and
// the handlers it was shown to never hear of it. What holds it here is
// the join, not the gain's wait for ready sources: the namespace joins
// the listing trunk and stays awaited until its list is in, so the test
// passes with -ownedsim.plant=gain-shows-while-listing too, and fails
// only with both guards out (allHold answering true unawaited).
func TestGainWaitsForTheTrunksList(t *testing.T) {
	plantRule(t, *ownedSimPlant)
	inBothListModes(t, testGainWaitsForTheTrunksList)
}

func testGainWaitsForTheTrunksList(t *testing.T, sharded bool) {
	model := newAPIServerModel()
	defer model.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model.createNamespace("home")
	model.createNamespace("ns-1")
	model.writeConfigMap("ns-1", "kept", false)
	owned, _ := startRowCache(ctx, t, model, sharded)

	// The next ConfigMap list, the trunk's, waits until released;
	// entered says it is in flight. Any later one is answered at once.
	var once sync.Once
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	released := false
	model.mu.Lock()
	model.beforeList = func() {
		first := false
		once.Do(func() {
			first = true
			close(entered)
		})
		if first {
			<-release
		}
	}
	model.mu.Unlock()
	releaseList := func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			released = true
			close(release)
		}
	}
	defer releaseList()
	// The trunk's watch is behind the compaction: it resumes to 410 Gone
	// and lists again.
	model.stall(true)
	model.writeConfigMap("home", "passed", false)
	model.compact()
	model.stall(false)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatalf("the trunk never listed again after its version was compacted away: %v, waiting %+v", model.countsNow(), owned.Waiting())
	}

	loaded := make(chan error, 1)
	go func() { loaded <- owned.Load(ctx, rowPartition("ns-1")) }()
	// The gain's read of the namespaces is answered at once, and ns-1
	// joins the listing trunk: what the gain then waits for is the
	// trunk's list alone.
	var shownWhileListing bool
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		shownWhileListing = !released
		mu.Unlock()
	case <-time.After(time.Second):
		t.Logf("the gain waits, the trunk's list in flight: %+v", owned.Waiting())
		releaseList()
		if err := <-loaded; err != nil {
			t.Fatal(err)
		}
	}
	if shownWhileListing {
		t.Errorf("the gain showed ns-1 while the trunk's list was in flight: what happens in ns-1 before that list is answered folds into it")
	}
	releaseList()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return owned.Sources()["configmaps"] > 0 && len(owned.Waiting()) == 0, nil
	}); err != nil {
		t.Fatalf("the cache never settled after the list: waiting for %v", owned.Waiting())
	}
}
