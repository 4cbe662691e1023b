package informers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/pager"
)

// namespaceReadTimeout bounds one shared read of the namespaces: its
// callers retry on error.
const namespaceReadTimeout = time.Minute

// namespaceReads shares the consistent reads of every namespace's name
// that gains and keepers' lists make (ownedpartitions.go): each caller
// is answered by a read sent after it asked, so that the answer holds
// every namespace created before the call, and the callers that ask
// while a read is on its way share the next one. A replica starting its
// seventeen kinds reads the namespaces a few times, not twice per kind.
type namespaceReads struct {
	read func(ctx context.Context) ([]string, error)

	mu sync.Mutex
	// next: the read the callers since the last one started wait for;
	// nil when none waits.
	next *namespaceRead
	// reading: a read is on its way, and the loop sending it sends next
	// after it.
	reading bool
}

type namespaceRead struct {
	done  chan struct{}
	names []string
	err   error
	// callers: how many wait for it.
	callers int
}

// get returns the names of every namespace, read after the call.
func (r *namespaceReads) get(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	if r.next == nil {
		r.next = &namespaceRead{done: make(chan struct{})}
		if !r.reading {
			r.reading = true
			go r.loop()
		}
	}
	mine := r.next
	mine.callers++
	r.mu.Unlock()
	select {
	case <-mine.done:
		return mine.names, mine.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loop sends the reads callers wait for, one at a time, until none
// waits.
func (r *namespaceReads) loop() {
	for {
		r.mu.Lock()
		cur := r.next
		r.next = nil
		if cur == nil {
			r.reading = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), namespaceReadTimeout)
		cur.names, cur.err = r.read(ctx)
		cancel()
		close(cur.done)
	}
}

// namespaceNames reads the name of every namespace by a consistent list
// (no resource version: the server reads its store as it is now), so
// that it holds every namespace created before it was asked for.
func (o *OwnedCache) namespaceNames(ctx context.Context) ([]string, error) {
	client, err := o.config.RESTClients.forGroupVersion(corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	list, _, err := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return client.Get().Resource("namespaces").VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Get()
	}).ListWithAlloc(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var names []string
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		names = append(names, m.GetName())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return names, nil
}
