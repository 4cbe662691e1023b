package informers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestHandlerResyncOnARunningInformer: a handler's resync period is kept
// when the shared informer was running before the piece added it (the
// namespace controller's 5 minutes on the replica's Namespaces informer;
// client-go would raise it to the informer's own, here none), in the
// piece's scope only, and ends with the piece.
func TestHandlerResyncOnARunningInformer(t *testing.T) {
	client := fake.NewSimpleClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mine"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}},
	)
	replica, stop := context.WithCancel(context.Background())
	defer stop()
	shared := NewPool(replica, PoolConfig{Client: client})
	if _, err := shared.ForResource("replica", corev1.SchemeGroupVersion.WithResource("namespaces"), corev1.SchemeGroupVersion.WithKind("Namespace")); err != nil {
		t.Fatal(err)
	}
	shared.Start("replica")
	scope := scopeOwningMine()
	for _, tc := range []struct {
		name  string
		scope *Scope
		// want: the namespaces resynced.
		want []string
	}{
		{"singleton", nil, []string{"mine", "theirs"}},
		{"partition view", scope, []string{"mine"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewPieceFactory(PieceConfig{Shared: shared, SharedStop: replica.Done(), Mapper: testMapper(), Scopes: MapperScopes{testMapper()}, Scope: tc.scope})
			if err != nil {
				t.Fatal(err)
			}
			var resyncs atomic.Int64
			seen := map[string]*atomic.Int64{"mine": {}, "theirs": {}}
			informer := f.Core().V1().Namespaces().Informer()
			if _, err := informer.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, obj any) {
				if old == obj {
					resyncs.Add(1)
					seen[obj.(*corev1.Namespace).Name].Add(1)
				}
			}}, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			f.Start(replica.Done())
			if !eventually(func() bool {
				for _, ns := range tc.want {
					if seen[ns].Load() < 2 {
						return false
					}
				}
				return true
			}) {
				t.Fatalf("resyncs after 5 s: mine %d, theirs %d; want at least 2 of each of %v", seen["mine"].Load(), seen["theirs"].Load(), tc.want)
			}
			if tc.scope != nil && seen["theirs"].Load() > 0 {
				t.Errorf("a namespace out of the piece's scope was resynced %d times", seen["theirs"].Load())
			}
			f.Shutdown()
			time.Sleep(150 * time.Millisecond)
			after := resyncs.Load()
			time.Sleep(300 * time.Millisecond)
			if got := resyncs.Load(); got != after {
				t.Errorf("%d resyncs after the piece shut down", got-after)
			}
		})
	}
}
