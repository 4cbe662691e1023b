//go:build e2e

package informers

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery/cached/memory"
	clientinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestNamespaceWatch runs namespace-watch pieces against a real apiserver:
// a piece holds exactly the objects of its namespaces, follows namespaces
// that join it, and a watch resumed after a stop delivers what happened
// meanwhile in every namespace, once.
func TestNamespaceWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	config, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
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
	for _, ns := range []string{"mine-1", "mine-2", "theirs"} {
		createNamespace(ns)
		createConfigMap(ns, "a")
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	replica, stopReplica := context.WithCancel(ctx)
	defer stopReplica()
	shared := clientinformers.NewSharedInformerFactory(client, 0)
	clients := NewRESTClients(config)
	inPiece := func(ns string) bool { return strings.HasPrefix(ns, "mine-") }
	newPiece := func() *PieceFactory {
		f, err := NewPieceFactory(PieceConfig{Mode: ModeNamespaceWatch, Client: client, RESTClients: clients,
			Shared: shared, SharedStop: replica.Done(), Mapper: mapper, InPiece: inPiece})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	t.Run("piece view", func(t *testing.T) {
		f := newPiece()
		informer := f.Core().V1().ConfigMaps().Informer()
		var foreign int
		if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			if !inPiece(namespaceOf(obj)) {
				foreign++
			}
		}}); err != nil {
			t.Fatal(err)
		}
		pieceCtx, stopPiece := context.WithCancel(ctx)
		f.Start(pieceCtx.Done())
		for typ, ok := range f.WaitForCacheSync(pieceCtx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		waitKeys := func(want ...string) {
			t.Helper()
			sort.Strings(want)
			var got []string
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				got = informer.GetStore().ListKeys()
				sort.Strings(got)
				return strings.Join(got, ",") == strings.Join(want, ","), nil
			})
			if err != nil {
				t.Fatalf("piece holds %v, want %v", got, want)
			}
		}
		waitKeys("mine-1/a", "mine-2/a")
		createConfigMap("mine-2", "b")
		createConfigMap("theirs", "b")
		waitKeys("mine-1/a", "mine-2/a", "mine-2/b")
		// A namespace created while the piece runs joins it.
		createNamespace("mine-3")
		createConfigMap("mine-3", "c")
		waitKeys("mine-1/a", "mine-2/a", "mine-2/b", "mine-3/c")
		if err := client.CoreV1().ConfigMaps("mine-1").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitKeys("mine-2/a", "mine-2/b", "mine-3/c")
		stopPiece()
		f.Shutdown()
		if foreign != 0 {
			t.Fatalf("the piece's handler saw %d objects of other namespaces", foreign)
		}
	})

	t.Run("resume per namespace", func(t *testing.T) {
		f := newPiece()
		namespaces := f.namespaceInformer()
		pieceCtx, stopPiece := context.WithCancel(ctx)
		defer stopPiece()
		f.Start(pieceCtx.Done())
		lw := &namespacesListWatch{clients: clients, mapper: mapper, obj: &corev1.ConfigMap{}, namespaces: informerNamespaceSet{namespaces}}
		if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		next := func(w watch.Interface) watch.Event {
			t.Helper()
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("merged watch closed")
				}
				return e
			case <-time.After(30 * time.Second):
				t.Fatal("no event within 30s")
			}
			return watch.Event{}
		}
		describe := func(e watch.Event) string {
			cm, ok := e.Object.(*corev1.ConfigMap)
			if !ok {
				return string(e.Type) + " " + e.Object.GetObjectKind().GroupVersionKind().Kind
			}
			return string(e.Type) + " " + cm.Namespace + "/" + cm.Name
		}
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Events of two namespaces; the later one has the higher version.
		createConfigMap("mine-1", "x")
		if got := describe(next(w)); got != "ADDED mine-1/x" {
			t.Fatalf("got %s, want ADDED mine-1/x", got)
		}
		createConfigMap("mine-2", "y")
		if got := describe(next(w)); got != "ADDED mine-2/y" {
			t.Fatalf("got %s, want ADDED mine-2/y", got)
		}
		w.Stop()
		for range w.ResultChan() {
		}
		// While no watch is open: a change in each namespace.
		createConfigMap("mine-1", "z")
		if _, err := client.CoreV1().ConfigMaps("mine-2").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "y", Namespace: "mine-2"}, Data: map[string]string{"k": "v"}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w, err = lw.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		got := []string{describe(next(w)), describe(next(w))}
		sort.Strings(got)
		if want := []string{"ADDED mine-1/z", "MODIFIED mine-2/y"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("resumed watch delivered %v, want %v", got, want)
		}
		select {
		case e := <-w.ResultChan():
			t.Fatalf("resumed watch delivered more: %s", describe(e))
		case <-time.After(2 * time.Second):
		}
	})

	t.Run("lifecycle", func(t *testing.T) {
		cycle := func() {
			f := newPiece()
			f.Core().V1().ConfigMaps().Informer()
			f.Core().V1().Pods().Informer()
			pieceCtx, stopPiece := context.WithCancel(ctx)
			f.Start(pieceCtx.Done())
			for typ, ok := range f.WaitForCacheSync(pieceCtx.Done()) {
				if !ok {
					t.Fatalf("%v did not sync", typ)
				}
			}
			stopPiece()
			f.Shutdown()
		}
		before, after := cyclesLeaveNoGoroutine(t, 50, cycle)
		t.Logf("50 cycles: goroutines %d before, %d after", before, after)
	})
}
