package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// NewNamespaces are the namespaces created within window, by their
// creation timestamps, each with its partition: what a keeper placing by
// weight deals as they appear (shard's weightdeal.go), read from the
// Namespaces the replica caches for its whole life.
func (r *Runtime) NewNamespaces(window time.Duration) map[string]int {
	since := time.Now().Add(-window)
	out := map[string]int{}
	for _, obj := range r.namespaces.GetStore().List() {
		m, err := meta.Accessor(obj)
		if err != nil || m.GetDeletionTimestamp() != nil || !m.GetCreationTimestamp().After(since) {
			continue
		}
		out[m.GetName()] = r.partitionOf(m.GetName())
	}
	return out
}

// NamespacesAdded signals, once for any number, that the cache has added
// Namespaces since it was last read: a keeper deals new namespaces
// within a step of their creation rather than at its next timed one.
func (r *Runtime) NamespacesAdded() <-chan struct{} { return r.namespacesAdded }

// signalNamespacesAdded is the Namespaces informer's handler.
func (r *Runtime) signalNamespacesAdded() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		select {
		case r.namespacesAdded <- struct{}{}:
		default:
		}
	}}
}
