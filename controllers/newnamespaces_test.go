package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestNewNamespacesSettle: a namespace the cache adds after its first
// list is left out of NewNamespaces until it has settled, and the signal
// for it comes then; one of the first list is in at once.
func TestNewNamespacesSettle(t *testing.T) {
	for _, tc := range []struct {
		name string
		// existing: the namespace is there before the informer starts.
		existing bool
		settle   time.Duration
		// wantListed: NewNamespaces holds it as soon as the store does;
		// wantSettled: it does after a while, and a signal came.
		wantListed, wantSettled bool
	}{
		{name: "in the first list", existing: true, settle: time.Hour, wantListed: true, wantSettled: true},
		{name: "created later, settling", existing: false, settle: time.Hour, wantListed: false, wantSettled: false},
		{name: "created later, settled", existing: false, settle: 10 * time.Millisecond, wantListed: false, wantSettled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := fake.NewClientset()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant", CreationTimestamp: metav1.Now()}}
			if tc.existing {
				if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			informer := informers.NewSharedInformerFactory(client, 0).Core().V1().Namespaces().Informer()
			r := &Runtime{namespaces: informer, partitionOf: func(string) int { return 7 }, namespacesAdded: make(chan struct{}, 1)}
			if _, err := informer.AddEventHandler(r.signalNamespacesAdded(tc.settle)); err != nil {
				t.Fatal(err)
			}
			go informer.Run(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
				t.Fatal("namespaces never synced")
			}
			// Drain a signal of the first list: the one under test comes
			// after the namespace is added.
			select {
			case <-r.namespacesAdded:
			default:
			}
			if !tc.existing {
				if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
				_, ok, _ := informer.GetStore().GetByKey("tenant")
				return ok && (tc.existing || r.settling.has("tenant") || tc.settle < time.Hour), nil
			}); err != nil {
				t.Fatal(err)
			}
			if _, listed := r.NewNamespaces(time.Minute).Fresh["tenant"]; listed != tc.wantListed && tc.settle == time.Hour {
				t.Errorf("NewNamespaces holds the namespace as it is added: %v, want %v", listed, tc.wantListed)
			}
			settled := false
			if tc.wantSettled {
				settled = wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					return r.NewNamespaces(time.Minute).Fresh["tenant"] == 7, nil
				}) == nil
			} else {
				_, settled = r.NewNamespaces(time.Minute).Fresh["tenant"]
			}
			if settled != tc.wantSettled {
				t.Errorf("NewNamespaces holds the namespace later: %v, want %v", settled, tc.wantSettled)
			}
			if !tc.existing && tc.wantSettled {
				select {
				case <-r.namespacesAdded:
				case <-ctx.Done():
					t.Error("no signal once the namespace settled")
				}
			}
		})
	}
}
