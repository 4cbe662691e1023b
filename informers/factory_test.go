package informers

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientinformers "k8s.io/client-go/informers"
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

// TestPieceFactoryLifecycle starts and stops a piece's informers 100 times
// against one shared factory: the piece sees only its namespaces, shared
// informers keep running, and no goroutine nor handler is left behind.
func TestPieceFactoryLifecycle(t *testing.T) {
	client := fake.NewSimpleClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mine"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "mine"}},
	)
	replica, stopReplica := context.WithCancel(context.Background())
	defer stopReplica()
	shared := clientinformers.NewSharedInformerFactory(client, 0)
	inPiece := func(ns string) bool { return ns == "mine" }
	var stoppedPieceEvents atomic.Int64
	var stopped atomic.Bool

	cycle := func() *PieceFactory {
		ctx, cancel := context.WithCancel(context.Background())
		f := NewPieceFactory(client, client, shared, replica.Done(), testMapper(), inPiece, 0, nil)
		nodes := f.Core().V1().Nodes().Informer()
		if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
			if stopped.Load() {
				stoppedPieceEvents.Add(1)
			}
		}}); err != nil {
			t.Fatal(err)
		}
		deployments := f.Apps().V1().Deployments().Informer()
		namespaces := f.Core().V1().Namespaces().Lister()
		f.Start(ctx.Done())
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		if f.Handlers() != 1 {
			t.Fatalf("want the piece's one handler on the shared Nodes informer tracked, got %d", f.Handlers())
		}
		all, err := namespaces.List(labels.Everything())
		if err != nil || len(all) != 1 || all[0].Name != "mine" {
			t.Fatalf("the piece's Namespaces view must hold only its namespace, got %v (%v)", all, err)
		}
		if len(deployments.GetStore().List()) != 1 {
			t.Fatal("deployment informer empty")
		}
		cancel()
		f.Shutdown()
		if f.Handlers() != 0 {
			t.Fatalf("%d handlers left after Shutdown", f.Handlers())
		}
		if nodes.IsStopped() {
			t.Fatal("stopping a piece stopped a shared informer")
		}
		return f
	}
	cycle() // warm up: shared informers start once
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 100 {
		cycle()
	}
	var after int
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		if after = runtime.NumGoroutine(); after <= before+2 {
			break
		}
	}
	if after > before+2 {
		t.Fatalf("goroutines grew from %d to %d over 100 piece start/stop cycles", before, after)
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
