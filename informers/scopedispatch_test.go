package informers

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// laggingInformer plays an informer whose scope's dispatcher runs behind
// its store: every change is applied to the store at once and its
// notification queued, and the test says when the dispatcher is told.
type laggingInformer struct {
	cache.SharedIndexInformer
	store  cache.Indexer
	queued []func()
	h      *dispatcher
}

// RemoveEventHandler takes the dispatcher off; nothing is registered.
func (l *laggingInformer) RemoveEventHandler(cache.ResourceEventHandlerRegistration) error {
	return nil
}

// syncedRegistration is a dispatcher's registration on an informer that
// has synced.
type syncedRegistration struct{}

func (syncedRegistration) HasSynced() bool                     { return true }
func (syncedRegistration) HasSyncedChecker() cache.DoneChecker { return syncedRegistration{} }
func (syncedRegistration) Name() string                        { return "synced" }
func (syncedRegistration) Done() <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

func (l *laggingInformer) write(ns, name, version string, deleted bool) {
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: version}}
	old, exists, _ := l.store.Get(obj)
	switch {
	case deleted:
		_ = l.store.Delete(obj)
		l.queued = append(l.queued, func() { l.h.OnDelete(obj) })
	case exists:
		_ = l.store.Update(obj)
		l.queued = append(l.queued, func() { l.h.OnUpdate(old, obj) })
	default:
		_ = l.store.Add(obj)
		l.queued = append(l.queued, func() { l.h.OnAdd(obj, false) })
	}
}

func (l *laggingInformer) tell() {
	for _, f := range l.queued {
		f()
	}
	l.queued = nil
}

// TestScopeOrderedReveal: when the scope reveals or hides a namespace
// while the informer's notifications are still queued for its
// dispatcher, a handler is never told of a deletion or update of an
// object it does not know, nor of an older version than it knows, nor
// of an object twice, and ends knowing exactly the store's visible
// objects.
func TestScopeOrderedReveal(t *testing.T) {
	type step struct {
		op                string // write, delete, tell, gain, lose
		ns, name, version string
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a deletion queued across a gain", []step{
			{op: "write", ns: "p0-a", name: "k", version: "1"}, {op: "tell"},
			{op: "delete", ns: "p0-a", name: "k", version: "2"},
			{op: "gain"}, {op: "tell"},
		}},
		{"updates queued across a gain", []step{
			{op: "write", ns: "p0-a", name: "k", version: "1"}, {op: "tell"},
			{op: "write", ns: "p0-a", name: "k", version: "2"},
			{op: "write", ns: "p0-a", name: "k", version: "3"},
			{op: "gain"}, {op: "tell"},
		}},
		{"an addition and its deletion queued across a gain", []step{
			{op: "write", ns: "p0-a", name: "k", version: "1"},
			{op: "delete", ns: "p0-a", name: "k", version: "2"},
			{op: "gain"}, {op: "tell"},
		}},
		{"an object deleted and made again under its name across a gain", []step{
			{op: "write", ns: "p0-a", name: "k", version: "1"}, {op: "tell"},
			{op: "delete", ns: "p0-a", name: "k", version: "2"},
			{op: "write", ns: "p0-a", name: "k", version: "3"},
			{op: "gain"}, {op: "tell"},
		}},
		{"a deletion queued across a lose", []step{
			{op: "gain"},
			{op: "write", ns: "p0-a", name: "k", version: "1"}, {op: "tell"},
			{op: "delete", ns: "p0-a", name: "k", version: "2"},
			{op: "lose"}, {op: "tell"},
		}},
		{"an addition and its deletion queued across a lose", []step{
			{op: "gain"},
			{op: "write", ns: "p0-a", name: "k", version: "1"},
			{op: "delete", ns: "p0-a", name: "k", version: "2"},
			{op: "lose"}, {op: "tell"},
		}},
		{"a deletion after a lose of an object it told as gone", []step{
			{op: "gain"},
			{op: "write", ns: "p0-a", name: "k", version: "1"}, {op: "tell"},
			{op: "lose"},
			{op: "delete", ns: "p0-a", name: "k", version: "2"}, {op: "tell"},
		}},
		{"lost and gained again with changes queued", []step{
			{op: "gain"},
			{op: "write", ns: "p0-a", name: "k", version: "1"}, {op: "tell"},
			{op: "write", ns: "p0-a", name: "k", version: "2"},
			{op: "lose"},
			{op: "delete", ns: "p0-a", name: "k", version: "3"},
			{op: "write", ns: "p0-a", name: "j", version: "4"},
			{op: "gain"}, {op: "tell"},
		}},
		{"a deletion queued across a gain and the lose right after", []step{
			{op: "write", ns: "p0-a", name: "k", version: "1"},
			{op: "write", ns: "p0-a", name: "j", version: "2"}, {op: "tell"},
			{op: "delete", ns: "p0-a", name: "k", version: "3"},
			{op: "gain"}, {op: "lose"}, {op: "tell"},
		}},
		{"another partition's events pass as before", []step{
			{op: "gain"},
			{op: "write", ns: "p1-a", name: "k", version: "1"},
			{op: "delete", ns: "p1-a", name: "k", version: "2"},
			{op: "write", ns: "p0-a", name: "j", version: "3"},
			{op: "tell"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scope := NewScope(2, func(ns string) int {
				if strings.HasPrefix(ns, "p1-") {
					return 1
				}
				return 0
			})
			checker := &simHandler{known: map[string]string{}}
			informer := &laggingInformer{store: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
			informer.h = newDispatcher(scope, informer, false)
			informer.h.registration = syncedRegistration{}
			scope.dispatchers[informer] = informer.h
			handler := newScopedHandler(informer.h, checker.handler(), klog.Background())
			informer.h.mu.Lock()
			informer.h.add(handler)
			informer.h.mu.Unlock()
			defer handler.stop()
			for _, s := range tc.steps {
				switch s.op {
				case "write", "delete":
					informer.write(s.ns, s.name, s.version, s.op == "delete")
				case "tell":
					informer.tell()
				case "gain":
					scope.Gain(0)
				case "lose":
					scope.Lose(0)
				}
			}
			if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return handler.idle(), nil }); err != nil {
				t.Fatal("the handler's queue did not empty")
			}
			checker.mu.Lock()
			defer checker.mu.Unlock()
			for _, v := range checker.violations {
				t.Errorf("the handler was told %s", v)
			}
			want := map[string]string{}
			for _, obj := range informer.store.List() {
				cm := obj.(*corev1.ConfigMap)
				if scope.HasNamespace(cm.Namespace) {
					want[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
				}
			}
			if d := diffVersions(checker.known, want); d != "" {
				t.Errorf("the handler's view against the store's visible objects: %s", d)
			}
		})
	}
}

// TestScopeChangeWaitsForHandlers: a change returns once every handler it
// queued objects to has been told them (a release waits for the keys its
// deletions queued), and a handler removed meanwhile does not hold it.
func TestScopeChangeWaitsForHandlers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		removed bool
	}{
		{name: "told"},
		{name: "removed while blocked", removed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope := NewScope(1, func(string) int { return 0 })
			informer := &laggingInformer{store: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})}
			d := newDispatcher(scope, informer, false)
			d.registration = syncedRegistration{}
			scope.dispatchers[informer] = d
			release := make(chan struct{})
			var told atomic.Int32
			handler := newScopedHandler(d, cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
				<-release
				told.Add(1)
			}}, klog.Background())
			d.mu.Lock()
			d.add(handler)
			d.mu.Unlock()
			d.OnAdd(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "k"}}, true)
			gained := make(chan struct{})
			go func() {
				scope.Gain(0)
				close(gained)
			}()
			select {
			case <-gained:
				t.Fatal("Gain returned before its handler was told")
			case <-time.After(50 * time.Millisecond):
			}
			if tc.removed {
				if err := scope.removeHandler(handler); err != nil {
					t.Fatal(err)
				}
			}
			close(release)
			select {
			case <-gained:
			case <-time.After(10 * time.Second):
				t.Fatal("Gain did not return")
			}
			if !tc.removed && told.Load() != 1 {
				t.Errorf("the handler was told %d additions, want 1", told.Load())
			}
		})
	}
}

// idle says whether nothing is queued or being handled.
func (h *scopedHandler) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending) == 0 && !h.busy
}
