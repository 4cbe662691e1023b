//go:build e2e

package informers

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	clientinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/component-base/metrics/testutil"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestOwnedCache runs the owned cache against real apiservers, with shard
// selectors (gate on, and gate off where the client's filter must do the
// work) and with namespace-scoped requests: the cache holds exactly the
// objects of the loaded partitions' namespaces, compared with a full list,
// after loading a partition (at once: Load returns when it is cached),
// unloading one, namespaces created and deleted, and objects changed in
// and out of them; loading a partition lists only its namespaces. The
// selectors name at most 2 namespaces, so a partition's namespaces are
// split across requests (the fallback of a replica owning more namespaces
// than a selector holds). Without selectors and past 2 namespaces, one
// cluster-wide source carries them all, and the client keeps only its own
// (the fallback of a replica owning more namespaces than it should watch
// one by one): its first list is one cluster-wide list, a partition of
// three namespaces loaded later is listed in one too, and a namespace
// created later in a loaded partition is kept from its first event, with
// no list. Held everywhere (for the
// colocated singletons), the informer holds every namespace until
// released. With the ConfigMaps' watch selected, it names the loaded
// namespaces: loading a partition or creating a namespace in one opens it
// once more, from where it stopped (the objects changed meanwhile reach
// the cache), and kube-apiserver drops the events of the other namespaces
// before writing them (its apiserver_watch_filtered_events_total).
// Secrets are narrowed by a field selector on their type: their
// informer holds only the matching Secrets of the loaded namespaces, by
// every kind of request above, and cannot be held everywhere.
func TestOwnedCache(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sharded bool
		gateOff bool
		// wideAbove: NamespaceWatchMax.
		wideAbove int
		// loadLists is how many list requests loading a partition of three
		// namespaces makes.
		loadLists int
		// selected: the ConfigMaps' watch names the loaded namespaces in
		// a shard selector (SelectedWatches).
		selected bool
	}{
		{"sharded", true, false, 0, 2, false},
		{"sharded, selected watch", true, false, 0, 2, true},
		{"sharded, gate off", true, true, 0, 2, false},
		{"namespace", false, false, 0, 3, false},
		{"namespace, wide past 2 namespaces", false, false, 2, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its own control plane and mostly waits.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			options := localcluster.Options{}
			if tc.gateOff {
				options.APIServerArgs = []string{"--feature-gates=ShardedListAndWatch=false"}
			}
			cluster, err := localcluster.Start(ctx, options)
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Stop()
			config, err := cluster.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			testOwnedCache(ctx, t, config, tc.sharded, tc.wideAbove, tc.loadLists, tc.selected)
			if ignored, err := testutil.GetCounterMetricValue(selectorIgnored.WithLabelValues("configmaps")); tc.gateOff && (err != nil || ignored == 0) {
				t.Fatal("the apiserver ignored the selectors and fleet_owned_cache_selector_ignored_total did not count it")
			}
		})
	}
}

// listCounter counts the list and the watch requests for configmaps.
type listCounter struct {
	next           http.RoundTripper
	mu             sync.Mutex
	lists, watches int
}

func (c *listCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/configmaps") {
		c.mu.Lock()
		if r.URL.Query().Get("watch") == "true" {
			c.watches++
		} else {
			c.lists++
		}
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

func (c *listCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists
}

func (c *listCounter) watchCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches
}

func testOwnedCache(ctx context.Context, t *testing.T, config *rest.Config, sharded bool, wideAbove, loadLists int, selected bool) {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	createNamespace := func(name string) {
		t.Helper()
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createConfigMap := func(ns, name string) {
		t.Helper()
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Namespace "pN-x" is in partition N, every other in partition 9.
	partitionOf := func(ns string) int {
		var p int
		var suffix string
		if n, _ := fmt.Sscanf(ns, "p%d-%s", &p, &suffix); n != 2 {
			return 9
		}
		return p
	}
	const selectedType = "fleet.test/selected"
	createSecrets := func(ns string) {
		t.Helper()
		for name, typ := range map[string]corev1.SecretType{"plain": corev1.SecretTypeOpaque, "chosen": selectedType} {
			if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p := range 3 {
		for _, suffix := range []string{"a", "b", "c"} {
			ns := fmt.Sprintf("p%d-%s", p, suffix)
			createNamespace(ns)
			for i := range 3 {
				createConfigMap(ns, fmt.Sprintf("cm-%d", i))
			}
			createSecrets(ns)
		}
	}

	counter := &listCounter{}
	counted := rest.CopyConfig(config)
	// As a replica's clients (KCM's --kube-api-content-type): the trunk
	// reads a protobuf event's namespace before decoding it.
	counted.ContentType = runtime.ContentTypeProtobuf
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	replica, stop := context.WithCancel(ctx)
	defer stop()
	shared := clientinformers.NewSharedInformerFactory(client, 0)
	namespaces := shared.Core().V1().Namespaces().Informer()
	shared.Start(replica.Done())
	typeSelector := fields.OneTermEqualSelector("type", selectedType)
	var selectedWatches sets.Set[string]
	if selected {
		selectedWatches = sets.New("configmaps")
	}
	owned, err := NewOwnedCache(OwnedCacheConfig{Sharded: sharded, MaxTerms: 2, NamespaceWatchMax: wideAbove, RESTClients: NewRESTClients(counted), Mapper: mapper,
		Namespaces: namespaces, PartitionOf: partitionOf, Partitions: 10, FieldSelectors: map[reflect.Type]fields.Selector{reflect.TypeOf(&corev1.Secret{}): typeSelector},
		SelectedWatches: selectedWatches})
	if err != nil {
		t.Fatal(err)
	}
	if err := owned.Include(ctx, 0); err != nil {
		t.Fatal(err)
	}
	informer := owned.InformerFor(&corev1.ConfigMap{})
	secrets := owned.InformerFor(&corev1.Secret{})
	owned.Start(replica.Done())
	if !waitSynced(ctx, owned.HasSynced) {
		t.Fatal("the owned cache did not sync")
	}

	// expected is a full list's keys in the loaded partitions.
	expected := func(loaded ...int) []string {
		t.Helper()
		all, err := client.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, cm := range all.Items {
			for _, p := range loaded {
				if partitionOf(cm.Namespace) == p {
					keys = append(keys, cm.Namespace+"/"+cm.Name)
				}
			}
		}
		sort.Strings(keys)
		return keys
	}
	cached := func() []string {
		keys := informer.GetStore().ListKeys()
		sort.Strings(keys)
		return keys
	}
	waitExact := func(what string, loaded ...int) {
		t.Helper()
		var got, want []string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got, want = cached(), expected(loaded...)
			return strings.Join(got, ",") == strings.Join(want, ","), nil
		})
		if err != nil {
			t.Fatalf("%s: the cache holds %v, want %v", what, got, want)
		}
	}
	waitExact("first list", 0)
	// secretsExact waits until the Secret informer holds the selected
	// Secrets of the loaded partitions, by a full list with the selector.
	secretsExact := func(what string, loaded ...int) {
		t.Helper()
		var got, want []string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			all, err := client.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: typeSelector.String()})
			if err != nil {
				return false, err
			}
			want = nil
			for _, s := range all.Items {
				if slices.Contains(loaded, partitionOf(s.Namespace)) {
					want = append(want, s.Namespace+"/"+s.Name)
				}
			}
			got = secrets.GetStore().ListKeys()
			sort.Strings(got)
			sort.Strings(want)
			return len(want) > 0 && strings.Join(got, ",") == strings.Join(want, ","), nil
		})
		if err != nil {
			t.Fatalf("%s: the Secret informer holds %v, want the %s Secrets %v", what, got, selectedType, want)
		}
	}
	secretsExact("first list", 0)

	// sourcesAre waits until the ConfigMap sources are n, wide of them.
	sourcesAre := func(what string, n, wide int) {
		t.Helper()
		var got, gotWide float64
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got = float64(owned.Sources()["configmaps"])
			gotWide, _ = testutil.GetGaugeMetricValue(ownedWideSources.WithLabelValues("configmaps"))
			return got == float64(n) && gotWide == float64(wide), nil
		})
		if err != nil {
			t.Fatalf("%s: ConfigMaps are in %v sources (%v wide), want %d (%d wide)", what, got, gotWide, n, wide)
		}
	}
	before, watchesBefore := counter.count(), counter.watchCount()
	if err := owned.Load(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got, want := cached(), expected(0, 1); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("right after Load(1) the cache holds %v, want %v", got, want)
	}
	// Partition 1 has three namespaces: with 2 per selector, 2 lists; one
	// per namespace, 3; wide (more than 2 namespaces at once), 1.
	// Partition 0 is not listed again.
	if got := counter.count() - before; got != loadLists {
		t.Fatalf("loading partition 1 made %d list requests, want %d", got, loadLists)
	}

	// The one watch per kind carries partition 1's changes too: loading
	// it opened none, or, naming its namespaces, one, from where the
	// previous one stopped.
	watchesOpened := func(what string, want int) {
		t.Helper()
		var got int
		// A selected watch opens again shortly after namespaces join it.
		_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Second, true, func(context.Context) (bool, error) {
			got = counter.watchCount() - watchesBefore
			return got >= want, nil
		})
		if got != want {
			t.Fatalf("%s opened %d watches of ConfigMaps, want %d", what, got, want)
		}
	}
	reopens := 0
	if selected {
		reopens = 1
	}
	watchesOpened("loading partition 1", reopens)
	sourcesAre("after loading partition 1", 1, 1)
	createConfigMap("p1-b", "after-load")
	waitExact("after partition 1 was loaded", 0, 1)

	owned.Unload(0)
	waitExact("after unloading partition 0", 1)
	secretsExact("after unloading partition 0", 1)
	// A namespace created in a loaded partition is kept from its first
	// event with no list, and no watch is opened again; one the watch
	// names (selected) is listed alone and re-opens it.
	before, watchesBefore = counter.count(), counter.watchCount()
	skippedBefore, _ := testutil.GetCounterMetricValue(eventsSkipped.WithLabelValues("configmaps"))
	createConfigMap("p0-a", "after-unload")
	createConfigMap("p1-a", "new")
	if err := client.CoreV1().ConfigMaps("p1-b").Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createNamespace("p1-d")
	createConfigMap("p1-d", "in-new-namespace")
	createSecrets("p1-d")
	createNamespace("p2-d")
	createConfigMap("p2-d", "unloaded")
	waitExact("after changes in and out of the loaded namespaces", 1)
	secretsExact("after a namespace was created", 1)
	watchesOpened("unloading a partition and creating a namespace in a loaded one", reopens)
	wantLists := 0
	if selected {
		wantLists = 1
	}
	if lists := counter.count() - before; lists != wantLists {
		t.Fatalf("unloading a partition and creating a namespace in a loaded one made %d lists, want %d", lists, wantLists)
	}
	if selected {
		// The watch names p1-d now and not p2-d: kube-apiserver drops
		// p2-d's ConfigMaps before writing them.
		filteredBefore := apiserverCounter(ctx, t, client, "apiserver_watch_filtered_events_total", "configmaps")
		for i := range 20 {
			createConfigMap("p2-d", fmt.Sprintf("filtered-%d", i))
		}
		createConfigMap("p1-d", "after-filtered")
		waitExact("after ConfigMaps created in a namespace not loaded", 1)
		if filtered := apiserverCounter(ctx, t, client, "apiserver_watch_filtered_events_total", "configmaps") - filteredBefore; filtered < 20 {
			t.Fatalf("kube-apiserver filtered %v ConfigMap events by the watch's shard selector, want the 20 created in p2-d", filtered)
		}
	} else if skipped, _ := testutil.GetCounterMetricValue(eventsSkipped.WithLabelValues("configmaps")); skipped-skippedBefore < 2 {
		// The ConfigMaps created in p0-a and p2-d were not decoded (the
		// counter is the process's, shared by the cases running beside).
		t.Fatalf("the watch skipped %v events of namespaces not loaded, want at least the 2 ConfigMaps created in p0-a and p2-d", skipped-skippedBefore)
	}

	if err := client.CoreV1().Namespaces().Delete(ctx, "p1-c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExact("after a namespace was deleted", 1)

	// The store's version (what the controllers' read-after-write checks
	// compare their writes with) does not go back when a partition's list
	// hands over older objects.
	last, err := client.CoreV1().ConfigMaps("p1-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-reload"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitExact("after a write in a loaded namespace", 1)
	if err := owned.Load(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got, want := cached(), expected(0, 1); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("right after loading partition 0 again the cache holds %v, want %v", got, want)
	}
	secretsExact("after loading partition 0 again", 0, 1)
	var stored string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		stored = informer.GetStore().LastStoreSyncResourceVersion()
		return !newerVersion(last.ResourceVersion, stored), nil
	})
	if err != nil {
		t.Fatalf("after loading partition 0 again the store reads through version %s, behind the last write (%s)", stored, last.ResourceVersion)
	}

	// A singleton reading every namespace holds the same informer: it
	// holds a full list once HoldEverywhere returns, keeps it while
	// partitions unload and namespaces are created, and holds the loaded
	// partitions' again once released.
	if _, err := owned.HoldEverywhere(ctx, &corev1.Secret{}); err == nil {
		t.Fatal("Secrets, narrowed by a field selector, were held everywhere")
	}
	held, err := owned.HoldEverywhere(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if held != informer {
		t.Fatal("HoldEverywhere gave another informer than the partition controllers'")
	}
	everywhere := []int{0, 1, 2, 9}
	if got, want := cached(), expected(everywhere...); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("right after HoldEverywhere the cache holds %v, want every ConfigMap %v", got, want)
	}
	// Selectors naming every namespace would cost the apiserver a
	// filtered watcher per two namespaces, and a watch per namespace one
	// watcher each; the changes below arrive through one unfiltered
	// watch.
	sourcesAre("held everywhere", 1, 1)
	owned.Unload(1)
	// A namespace created while every namespace is held joins the one
	// watch at its first object: nothing is listed for it, and its
	// objects are held as soon as they arrive, not after the Namespaces
	// informer has seen it (a singleton counting objects, resourcequota,
	// read none of a new namespace's first objects otherwise).
	before = counter.count()
	createNamespace("p2-e")
	createConfigMap("p2-e", "while-held")
	createConfigMap("p1-a", "while-held")
	waitExact("held everywhere, after partition 1 unloaded and a namespace created", everywhere...)
	if got := counter.count() - before; got != 0 {
		t.Fatalf("held everywhere, a namespace created made %d list requests, want none", got)
	}
	owned.ReleaseEverywhere(&corev1.ConfigMap{})
	waitExact("released", 0)
	sourcesAre("released", 1, 1)
	createConfigMap("p2-e", "after-release")
	createConfigMap("p0-a", "after-release")
	waitExact("released, after changes in and out of the loaded namespaces", 0)
}

// apiserverCounter sums the samples of counter name whose resource label
// is resource in kube-apiserver's /metrics.
func apiserverCounter(ctx context.Context, t *testing.T, client kubernetes.Interface, name, resource string) float64 {
	t.Helper()
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading kube-apiserver's metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

func waitSynced(ctx context.Context, synced func() bool) bool {
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return synced(), nil }) == nil
}
