package informers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// recorder is a controller's handler as the test sees it: what it was
// told exists now, and how many calls each namespace's objects got.
type recorder struct {
	mu      sync.Mutex
	live    map[string]bool // keys added and not deleted since
	calls   map[string]int  // namespace -> calls
	tomb    int             // deletions with unknown final state
	running atomic.Int32    // calls in progress (must stay <= 1)
	overlap atomic.Bool
}

func newRecorder() *recorder { return &recorder{live: map[string]bool{}, calls: map[string]int{}} }

func (r *recorder) enter() func() {
	if r.running.Add(1) > 1 {
		r.overlap.Store(true)
	}
	time.Sleep(10 * time.Microsecond)
	return func() { r.running.Add(-1) }
}

func (r *recorder) note(obj any, live bool) {
	key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		r.tomb++
	}
	if live {
		r.live[key] = true
	} else {
		delete(r.live, key)
	}
	r.calls[namespaceOfKey(key, false)]++
}

func (r *recorder) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { defer r.enter()(); r.note(obj, true) },
		UpdateFunc: func(_, obj any) { defer r.enter()(); r.note(obj, true) },
		DeleteFunc: func(obj any) { defer r.enter()(); r.note(obj, false) },
	}
}

func (r *recorder) tombs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tomb
}

func (r *recorder) liveKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.live {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *recorder) callsIn(namespaces ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int
	for _, ns := range namespaces {
		n += r.calls[ns]
	}
	return n
}

// TestScope runs one controller set's view of shared informers through
// partition changes, with a fake clientset: handlers hear of exactly the
// owned namespaces' objects, listers show exactly those, a gained partition
// is delivered as additions and a lost one as deletions, the other
// partitions' objects are never re-delivered, and no handler is called by
// two goroutines at once.
func TestScope(t *testing.T) {
	var objects []runtime.Object
	for _, ns := range scopeTestNamespaces() {
		objects = append(objects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		for i := range 5 {
			objects = append(objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns}})
		}
	}
	testScope(t, fake.NewSimpleClientset(objects...))
}

// scopeTestNamespaces are the namespaces testScope expects, each holding
// ConfigMaps cm-0..cm-4: two per partition 0, 1, 2.
func scopeTestNamespaces() []string {
	var out []string
	for p := range 3 {
		for _, suffix := range []string{"a", "b"} {
			out = append(out, fmt.Sprintf("p%d-%s", p, suffix))
		}
	}
	return out
}

// testScope is TestScope's body, for a fake clientset or a real apiserver.
// Namespace "pN-x" is in partition N; any other namespace (an apiserver's
// default, kube-system, ...) is in partition 3, which is never gained.
func testScope(t *testing.T, client kubernetes.Interface) {
	partitionOf := func(ns string) int {
		prefix, _, ok := strings.Cut(ns, "-")
		n, err := strconv.Atoi(strings.TrimPrefix(prefix, "p"))
		if !ok || !strings.HasPrefix(prefix, "p") || err != nil || n > 2 {
			return 3
		}
		return n
	}
	replica, stop := context.WithCancel(context.Background())
	defer stop()
	shared := NewPool(replica, PoolConfig{Client: client})
	scope := NewScope(4, partitionOf)
	f, err := NewPieceFactory(PieceConfig{Shared: shared, SharedStop: replica.Done(), Mapper: testMapper(), Scopes: MapperScopes{testMapper()}, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	configMaps, namespaces := newRecorder(), newRecorder()
	cmInformer := f.Core().V1().ConfigMaps()
	nsInformer := f.Core().V1().Namespaces()
	if _, err := cmInformer.Informer().AddEventHandler(configMaps.handler()); err != nil {
		t.Fatal(err)
	}
	if _, err := nsInformer.Informer().AddEventHandler(namespaces.handler()); err != nil {
		t.Fatal(err)
	}
	if scope.Handlers() != 0 {
		t.Fatalf("handlers went live before Start: %d", scope.Handlers())
	}
	scope.Gain(0)
	f.Start(replica.Done())
	f.WaitForCacheSync(replica.Done())

	wantCM := func(partitions ...int) []string {
		var out []string
		for _, p := range partitions {
			for _, suffix := range []string{"a", "b"} {
				for i := range 5 {
					out = append(out, fmt.Sprintf("p%d-%s/cm-%d", p, suffix, i))
				}
			}
		}
		sort.Strings(out)
		return out
	}
	wantNS := func(partitions ...int) []string {
		var out []string
		for _, p := range partitions {
			out = append(out, fmt.Sprintf("p%d-a", p), fmt.Sprintf("p%d-b", p))
		}
		sort.Strings(out)
		return out
	}
	check := func(t *testing.T, owned ...int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(replica, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return equal(configMaps.liveKeys(), wantCM(owned...)) && equal(namespaces.liveKeys(), wantNS(owned...)), nil
		}); err != nil {
			t.Fatalf("handlers know configmaps %v and namespaces %v, want those of partitions %v", configMaps.liveKeys(), namespaces.liveKeys(), owned)
		}
		listed, err := cmInformer.Lister().List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, cm := range listed {
			keys = append(keys, cm.Namespace+"/"+cm.Name)
		}
		sort.Strings(keys)
		if !equal(keys, wantCM(owned...)) {
			t.Fatalf("lister shows %v, want partitions %v", keys, owned)
		}
		nsListed, _ := nsInformer.Lister().List(labels.Everything())
		if len(nsListed) != len(wantNS(owned...)) {
			t.Fatalf("namespace lister shows %d, want %d", len(nsListed), len(wantNS(owned...)))
		}
		if _, err := cmInformer.Lister().ConfigMaps("p1-a").Get("cm-0"); (err == nil) != scope.Owns(1) {
			t.Fatalf("lister Get in partition 1: err %v, owned %v", err, scope.Owns(1))
		}
	}
	check(t, 0)

	steps := []struct {
		name  string
		gain  bool
		p     int
		owned []int
	}{
		{"gain 1", true, 1, []int{0, 1}},
		{"gain 2", true, 2, []int{0, 1, 2}},
		{"lose 1", false, 1, []int{0, 2}},
		{"lose 0", false, 0, []int{2}},
		{"regain 1", true, 1, []int{1, 2}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			var others []string
			for p := range 3 {
				if p != step.p {
					others = append(others, fmt.Sprintf("p%d-a", p), fmt.Sprintf("p%d-b", p))
				}
			}
			before := configMaps.callsIn(others...)
			tombs := configMaps.tombs()
			var delivered int
			if step.gain {
				delivered = scope.Gain(step.p)
			} else {
				delivered = scope.Lose(step.p)
			}
			// 10 ConfigMaps and 2 Namespaces per partition.
			if delivered != 12 {
				t.Errorf("delivered %d objects, want 12", delivered)
			}
			check(t, step.owned...)
			if after := configMaps.callsIn(others...); after != before {
				t.Errorf("objects of other partitions got %d calls", after-before)
			}
			if !step.gain && configMaps.tombs()-tombs != 10 {
				t.Errorf("%d deletions with unknown final state, want 10", configMaps.tombs()-tombs)
			}
		})
	}

	t.Run("events follow the scope", func(t *testing.T) {
		before := configMaps.callsIn("p0-a")
		for _, ns := range []string{"p0-a", "p1-a"} {
			if _, err := client.CoreV1().ConfigMaps(ns).Create(replica, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := wait.PollUntilContextTimeout(replica, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return slices.Contains(configMaps.liveKeys(), "p1-a/new"), nil
		}); err != nil {
			t.Fatal("the owned partition's new object was not delivered")
		}
		if configMaps.callsIn("p0-a") != before {
			t.Error("an event of a partition the scope lost reached the handler")
		}
	})

	t.Run("handlers leave with the factory", func(t *testing.T) {
		f.Shutdown()
		if scope.Handlers() != 0 {
			t.Errorf("%d scoped handlers left after Shutdown", scope.Handlers())
		}
		calls := configMaps.callsIn("p1-a", "p1-b", "p2-a", "p2-b")
		scope.Lose(1)
		if _, err := client.CoreV1().ConfigMaps("p2-a").Create(replica, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: "p2-a"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if got := configMaps.callsIn("p1-a", "p1-b", "p2-a", "p2-b"); got != calls {
			t.Errorf("a removed handler got %d calls", got-calls)
		}
	})
	if configMaps.overlap.Load() || namespaces.overlap.Load() {
		t.Error("a handler was called by two goroutines at once")
	}
}

// TestScopeConcurrentGain: partitions gained and lost while the informer
// delivers events; every handler call is serialized and the handler ends
// knowing exactly the owned partitions' objects.
func TestScopeConcurrentGain(t *testing.T) {
	partitionOf := func(ns string) int { n, _ := strconv.Atoi(strings.TrimPrefix(ns, "ns")); return n % 4 }
	client := fake.NewSimpleClientset()
	replica, stop := context.WithCancel(context.Background())
	defer stop()
	shared := NewPool(replica, PoolConfig{Client: client})
	scope := NewScope(4, partitionOf)
	f, err := NewPieceFactory(PieceConfig{Shared: shared, SharedStop: replica.Done(), Mapper: testMapper(), Scopes: MapperScopes{testMapper()}, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	informer := f.Core().V1().ConfigMaps()
	clusterInformer, err := shared.ForResource(t, corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err != nil {
		t.Fatal(err)
	}
	cluster := clusterInformer.GetStore()
	if _, err := informer.Informer().AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	f.Start(replica.Done())
	f.WaitForCacheSync(replica.Done())
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range 50 {
				ns := fmt.Sprintf("ns%d", (w*50+i)%8)
				name := fmt.Sprintf("cm-%d-%d", w, i)
				_, _ = client.CoreV1().ConfigMaps(ns).Create(replica, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
				// The fake clientset's watch panics when more than 100
				// events wait in it: each writer waits for the informer
				// to take its object before the next.
				_ = wait.PollUntilContextTimeout(replica, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					// The replica's store: the view shows owned namespaces only.
					_, ok, _ := cluster.GetByKey(ns + "/" + name)
					return ok, nil
				})
			}
		}()
	}
	for i := range 42 {
		p := i % 4
		if scope.Owns(p) {
			scope.Lose(p)
		} else {
			scope.Gain(p)
		}
	}
	writers.Wait()
	var owned []int
	for p := range 4 {
		if scope.Owns(p) {
			owned = append(owned, p)
		}
	}
	want := func() []string {
		var out []string
		for _, obj := range informer.Informer().GetStore().List() {
			cm := obj.(*corev1.ConfigMap)
			if scope.HasNamespace(cm.Namespace) {
				out = append(out, cm.Namespace+"/"+cm.Name)
			}
		}
		sort.Strings(out)
		return out
	}
	if err := wait.PollUntilContextTimeout(replica, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return len(want()) == 200*len(owned)/4 && equal(rec.liveKeys(), want()), nil
	}); err != nil {
		t.Fatalf("handler knows %d objects, want %d (partitions %v)", len(rec.liveKeys()), len(want()), owned)
	}
	if rec.overlap.Load() {
		t.Error("a handler was called by two goroutines at once")
	}
}

// TestScopeIgnoreLosses: a handler marked IgnoreLosses hears Gain's
// additions and the owned namespaces' events, and nothing of a Lose,
// while the unmarked handler beside it gets the lost partition's
// deletions; events of the lost partition reach neither.
func TestScopeIgnoreLosses(t *testing.T) {
	partitionOf := func(ns string) int { n, _ := strconv.Atoi(strings.TrimPrefix(ns, "ns")); return n % 2 }
	var objects []runtime.Object
	for ns := range 4 {
		for i := range 3 {
			objects = append(objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i), Namespace: fmt.Sprintf("ns%d", ns)}})
		}
	}
	client := fake.NewSimpleClientset(objects...)
	replica, stop := context.WithCancel(context.Background())
	defer stop()
	scope := NewScope(2, partitionOf)
	f, err := NewPieceFactory(PieceConfig{Shared: NewPool(replica, PoolConfig{Client: client}), SharedStop: replica.Done(), Mapper: testMapper(), Scopes: MapperScopes{testMapper()}, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	told, ignoring := newRecorder(), newRecorder()
	informer := f.Core().V1().Secrets().Informer()
	if _, err := informer.AddEventHandler(told.handler()); err != nil {
		t.Fatal(err)
	}
	if _, err := informer.AddEventHandler(IgnoreLosses(ignoring.handler())); err != nil {
		t.Fatal(err)
	}
	f.Start(replica.Done())
	f.WaitForCacheSync(replica.Done())
	scope.Gain(0)
	scope.Gain(1)
	waitKnown := func(r *recorder, want int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(replica, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return len(r.liveKeys()) == want, nil
		}); err != nil {
			t.Fatalf("handler knows %v, want %d objects", r.liveKeys(), want)
		}
	}
	waitKnown(told, 12)
	waitKnown(ignoring, 12)

	if delivered := scope.Lose(1); delivered != 6 {
		t.Errorf("Lose delivered %d deletions, want 6 (to the unmarked handler only)", delivered)
	}
	waitKnown(told, 6)
	if told.tombs() != 6 {
		t.Errorf("unmarked handler got %d deletions with unknown final state, want 6", told.tombs())
	}
	if ignoring.tombs() != 0 || len(ignoring.liveKeys()) != 12 {
		t.Errorf("IgnoreLosses handler got %d deletions and knows %d objects, want 0 and 12", ignoring.tombs(), len(ignoring.liveKeys()))
	}

	calls := ignoring.callsIn("ns1", "ns3")
	for _, ns := range []string{"ns0", "ns1"} {
		if _, err := client.CoreV1().Secrets(ns).Create(replica, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitKnown(told, 7)
	waitKnown(ignoring, 13)
	if !slices.Contains(ignoring.liveKeys(), "ns0/new") || ignoring.callsIn("ns1", "ns3") != calls {
		t.Errorf("IgnoreLosses handler: knows %v, %d calls for the lost partition; want ns0/new and none", ignoring.liveKeys(), ignoring.callsIn("ns1", "ns3")-calls)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Handlers is how many handlers the scope delivers to (tests).
func (s *Scope) Handlers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int
	for _, d := range s.dispatchers {
		d.mu.Lock()
		n += len(d.handlers)
		d.mu.Unlock()
	}
	return n
}

// namespaceOfKey is the namespace a store key places its object in; for
// Namespaces (byName) the key is the namespace.
func namespaceOfKey(key string, byName bool) string {
	if byName {
		return key
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return ns
}
