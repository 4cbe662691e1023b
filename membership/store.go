package membership

import (
	"context"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// LeaseStore keeps the records membership decides on: the fleet's member
// Leases and kube-controller-manager's leader Lease. It plays the part
// client-go's resourcelock.Interface plays for leader election: Member and
// leaderLease judge and compose the records, the store only reads and
// writes them, so a test can put a store in between that conflicts, fails
// or answers late on demand.
//
// Update and Delete are conditional: Update on the resourceVersion of the
// Lease passed in, Delete on the preconditions given; a stale copy gets a
// Conflict error (apierrors.IsConflict), a missing Lease NotFound.
type LeaseStore interface {
	Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, namespace, name string, preconditions metav1.Preconditions) error
	// List and Watch serve the informers of watchLeases.
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// NewLeaseStore is the store of a cluster: its Leases, through client.
func NewLeaseStore(client kubernetes.Interface) LeaseStore { return clientStore{client: client} }

type clientStore struct{ client kubernetes.Interface }

func (s clientStore) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	return s.client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (s clientStore) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.client.CoordinationV1().Leases(lease.Namespace).Create(ctx, lease, metav1.CreateOptions{})
}

func (s clientStore) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.client.CoordinationV1().Leases(lease.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
}

func (s clientStore) Delete(ctx context.Context, namespace, name string, preconditions metav1.Preconditions) error {
	return s.client.CoordinationV1().Leases(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &preconditions})
}

func (s clientStore) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	return s.client.CoordinationV1().Leases(namespace).List(ctx, opts)
}

func (s clientStore) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return s.client.CoordinationV1().Leases(namespace).Watch(ctx, opts)
}

// IsWatchListSemanticsUnSupported passes on what the client says (a fake
// clientset does not stream a watch's initial list), as the generated
// informers do.
func (s clientStore) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(s.client)
}

// leaseWatch is an informer of some Leases of one namespace: the member
// Leases of the fleet (by label) or kube-controller-manager's leader Lease
// (by name). Both halves of membership watch through it.
type leaseWatch struct {
	informer cache.SharedIndexInformer
	done     sync.WaitGroup
}

// watchLeases starts an informer of the Leases in namespace that tweak
// selects, calling handler on every change, until ctx ends; wait for its
// end with stop.
func watchLeases(ctx context.Context, store LeaseStore, namespace string, tweak func(*metav1.ListOptions), handler cache.ResourceEventHandler) (*leaseWatch, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			tweak(&opts)
			return store.List(ctx, namespace, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			tweak(&opts)
			return store.Watch(ctx, namespace, opts)
		},
	}
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, store), &coordinationv1.Lease{}, 0, cache.Indexers{})
	if _, err := informer.AddEventHandler(handler); err != nil {
		return nil, fmt.Errorf("handling lease events: %w", err)
	}
	w := &leaseWatch{informer: informer}
	w.done.Go(func() { informer.RunWithContext(ctx) })
	return w, nil
}

// synced waits until the informer listed, or ctx ended (false).
func (w *leaseWatch) synced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced)
}

// stop waits for the informer to end; its context must have ended.
func (w *leaseWatch) stop() { w.done.Wait() }

// get reads a Lease from the informer's cache: nil before it listed, or
// when the Lease is not there.
func (w *leaseWatch) get(namespace, name string) *coordinationv1.Lease {
	if !w.informer.HasSynced() {
		return nil
	}
	obj, ok, err := w.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	lease, _ := obj.(*coordinationv1.Lease)
	return lease
}
