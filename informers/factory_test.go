package informers

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Node"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return m
}

// TestPieceFactoryLifecycle starts and stops a partition view's informers
// 100 times against one shared pool: the view sees only its scope's
// namespaces, its handlers only their events, shared informers another
// user holds keep running, those only the piece used stop with it, and no
// goroutine nor handler is left behind. (The owned cache needs a real
// apiserver: TestOwnedCache.)
func TestPieceFactoryLifecycle(t *testing.T) {
	// Parallel: it mostly waits on its model's timers, beside the other
	// tests that do.
	t.Parallel()
	mine := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "mine"}}
	client := fake.NewSimpleClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mine"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		mine,
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "theirs"}},
	)
	replica, stopReplica := context.WithCancel(context.Background())
	defer stopReplica()
	shared := NewPool(replica, PoolConfig{Client: client})
	// The replica holds Nodes for its lifetime; Deployments only the
	// piece uses.
	if _, err := shared.ForResource("replica", corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node")); err != nil {
		t.Fatal(err)
	}
	shared.Start("replica")
	scope := scopeOwningMine()
	var stoppedPieceEvents, foreignEvents, earlyEvents atomic.Int64
	var stopped, started atomic.Bool
	const wantHandlers = 2

	cycle := func() *PieceFactory {
		ctx, cancel := context.WithCancel(context.Background())
		f, err := NewPieceFactory(PieceConfig{Shared: shared, SharedStop: replica.Done(), Mapper: testMapper(), Scopes: MapperScopes{testMapper()}, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		nodes := f.Core().V1().Nodes().Informer()
		if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
			if stopped.Load() {
				stoppedPieceEvents.Add(1)
			}
		}}); err != nil {
			t.Fatal(err)
		}
		deployments := f.Apps().V1().Deployments().Informer()
		started.Store(false)
		handle, err := deployments.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			if namespaceOf(obj) != "mine" {
				foreignEvents.Add(1)
			}
			if !started.Load() {
				earlyEvents.Add(1)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := deployments.AddIndexers(cache.Indexers{"by-name": func(obj any) ([]string, error) { return []string{namespaceOf(obj)}, nil }}); err != nil {
			t.Fatalf("a second piece adding the same indexer: %v", err)
		}
		namespaces := f.Core().V1().Namespaces().Lister()
		time.Sleep(time.Millisecond) // a running shared informer would deliver now
		started.Store(true)
		f.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), handle.HasSynced) {
			t.Fatal("the piece's Deployments handler did not sync")
		}
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		if f.Handlers() != wantHandlers {
			t.Fatalf("want the piece's %d handlers on shared informers tracked, got %d", wantHandlers, f.Handlers())
		}
		all, err := namespaces.List(labels.Everything())
		if err != nil || len(all) != 1 || all[0].Name != "mine" {
			t.Fatalf("the piece's Namespaces view must hold only its namespace, got %v (%v)", all, err)
		}
		if got := deployments.GetIndexer().ListKeys(); len(got) != 1 || got[0] != "mine/d" {
			t.Fatalf("the piece's Deployments must be only mine/d, got %v", got)
		}
		cancel()
		f.Shutdown()
		if f.Handlers() != 0 {
			t.Fatalf("%d handlers left after Shutdown", f.Handlers())
		}
		if nodes.IsStopped() {
			t.Fatal("stopping a piece stopped a shared informer the replica holds")
		}
		if !eventually(deployments.IsStopped) {
			t.Fatal("the Deployments informer only the stopped piece used still runs")
		}
		return f
	}
	before, after := cyclesLeaveNoGoroutine(t, 100, func() { cycle() })
	if n := earlyEvents.Load(); n > 0 {
		t.Fatalf("piece handlers received %d events before the piece started its informers", n)
	}
	if n := foreignEvents.Load(); n > 0 {
		t.Fatalf("piece handlers received %d events of other namespaces", n)
	}
	// No stopped piece's handler may still receive events.
	stopped.Store(true)
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := stoppedPieceEvents.Load(); n > 0 {
		t.Fatalf("handlers of stopped pieces received %d events", n)
	}
	t.Logf("100 start/stop cycles: goroutines %d before, %d after", before, after)
}

// cyclesLeaveNoGoroutine runs cycle once to warm up (shared informers
// start once), then n times, and fails, with a goroutine dump, if the
// goroutines do not come back to within 2 of the count after warm-up.
func cyclesLeaveNoGoroutine(t *testing.T, n int, cycle func()) (before, after int) {
	t.Helper()
	cycle()
	time.Sleep(200 * time.Millisecond)
	before = runtime.NumGoroutine()
	for range n {
		cycle()
	}
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		if after = runtime.NumGoroutine(); after <= before+2 {
			return before, after
		}
	}
	var dump strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
	t.Fatalf("goroutines grew from %d to %d over %d piece start/stop cycles:\n%s", before, after, n, dump.String())
	return before, after
}

// MapperScopes reads a kind's scope from a RESTMapper that knows every kind
// it is asked about (tests; a static mapper).
type MapperScopes struct{ Mapper meta.RESTMapper }

func (m MapperScopes) ClusterScoped(gvk schema.GroupVersionKind) (bool, error) {
	mapping, err := m.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return false, fmt.Errorf("%s: %w", gvk, ErrNotServed)
	}
	if err != nil {
		return false, err
	}
	return mapping.Scope.Name() == meta.RESTScopeNameRoot, nil
}

func (m MapperScopes) ClusterScopedResource(gvr schema.GroupVersionResource) (bool, error) {
	gvk, err := m.Mapper.KindFor(gvr)
	if meta.IsNoMatchError(err) {
		return false, fmt.Errorf("%s: %w", gvr, ErrNotServed)
	}
	if err != nil {
		return false, err
	}
	return m.ClusterScoped(gvk)
}

// Handlers is how many handlers the piece holds on shared informers (tests).
func (f *PieceFactory) Handlers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.handlers)
}

// namespaceOf is the namespace of an object or of a deletion tombstone.
func namespaceOf(obj any) string {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return ""
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return ns
}

// scopeOwningMine is a scope of two partitions that owns the one
// namespace "mine" is in, and not the one of every other namespace.
func scopeOwningMine() *Scope {
	scope := NewScope(2, func(ns string) int {
		if ns == "mine" {
			return 0
		}
		return 1
	})
	scope.Gain(0)
	return scope
}
