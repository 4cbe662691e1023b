package informers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Creations records the creation version of each Namespace the
// Namespaces informer's watches told of (package doc; source.takeFrom).
// They select nothing, so each addition is a creation; a namespace first
// met in a list has no record.
type Creations struct {
	mu sync.Mutex
	at map[string]string
}

// Of is the version at which the Namespace ns, as last seen at version,
// was created: version if the watch told of its creation there, else ""
// (met in a list, or changed since).
func (c *Creations) Of(ns, version string) string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at[ns] == version {
		return version
	}
	return ""
}

// record notes the creations and deletions a watch event tells of; it
// runs before the informer's store and handlers see the event.
func (c *Creations) record(e watch.Event) (watch.Event, bool) {
	m, err := meta.Accessor(e.Object)
	if err != nil {
		return e, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Type {
	case watch.Added:
		c.at[m.GetName()] = m.GetResourceVersion()
	case watch.Deleted:
		delete(c.at, m.GetName())
	}
	return e, true
}

// newInformer is a Namespaces informer, as client-go's typed one but for
// its watches, which record the creations they carry.
func (c *Creations) newInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	namespaces := client.CoreV1().Namespaces()
	lw := &creationsListWatch{ListWatch: &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			return namespaces.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			w, err := namespaces.Watch(ctx, options)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, c.record), nil
		},
	}}
	return cache.NewSharedIndexInformer(lw, &corev1.Namespace{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

type creationsListWatch struct {
	*cache.ListWatch
}

// IsWatchListSemanticsUnSupported keeps the reflector listing: a
// watch-list would tell of every namespace as an addition.
func (lw *creationsListWatch) IsWatchListSemanticsUnSupported() bool { return true }
