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

// namespaceReadTimeout bounds one shared read; its callers retry on error.
const namespaceReadTimeout = time.Minute

// namespaceReads shares the consistent reads of the namespaces' names
// (ownedpartitions.go) so a replica starting its kinds reads a few times,
// not twice per kind. Each caller gets a read sent after it asked, which
// holds every namespace created before; callers asking while a read is on
// its way share the next.
type namespaceReads struct {
	read func(ctx context.Context) ([]string, error)

	mu sync.Mutex
	// next: the read callers wait for since the last one started; nil if none.
	next *namespaceRead
	// reading: a loop is sending reads; it sends next after the current.
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

// loop sends the reads callers wait for, one at a time, until none waits.
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

// namespaceNames reads every namespace's name by a consistent list (no
// resource version), so it holds every namespace created before the call.
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
