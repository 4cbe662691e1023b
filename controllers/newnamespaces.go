package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
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
