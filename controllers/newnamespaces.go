package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// dealSettle is how long a namespace the replica's cache has just added
// stays out of NewNamespaces, so a keeper deals it only once the member
// the ring placed it on has served its first moments. Its
// kube-root-ca.crt and default ServiceAccount take 3-16 ms there (median,
// docs/benchmarks/owned-partitions): dealt 4 ms after it appeared, a
// namespace's partition moved before they were written, and they came
// 150-880 ms late, after the handover (the Pods of a Deployment created
// with the namespace are refused until its ServiceAccount exists).
const dealSettle = 100 * time.Millisecond

// NewNamespaces are the namespaces created within window, by their
// creation timestamps, each with its partition: what a keeper placing by
// weight deals as they appear (shard's weightdeal.go), read from the
// Namespaces the replica caches for its whole life. Those added within
// dealSettle are left for the step that follows it, their partitions
// named as settling.
func (r *Runtime) NewNamespaces(window time.Duration) shard.FreshNamespaces {
	since := time.Now().Add(-window)
	out := shard.FreshNamespaces{Fresh: map[string]int{}, Settling: map[int]bool{}}
	for _, obj := range r.namespaces.GetStore().List() {
		m, err := meta.Accessor(obj)
		if err != nil || m.GetDeletionTimestamp() != nil || !m.GetCreationTimestamp().After(since) {
			continue
		}
		if r.settling.has(m.GetName()) {
			out.Settling[r.partitionOf(m.GetName())] = true
			continue
		}
		out.Fresh[m.GetName()] = r.partitionOf(m.GetName())
	}
	return out
}

// NamespacesAdded signals, once for any number, that namespaces the cache
// added have settled (dealSettle) since it was last read: a keeper deals
// new namespaces within a step of then rather than at its next timed one.
func (r *Runtime) NamespacesAdded() <-chan struct{} { return r.namespacesAdded }

// signalNamespacesAdded is the Namespaces informer's handler. Its
// initial list does not settle: those namespaces were placed before this
// replica started (a keeper's first step leaves them where they run).
func (r *Runtime) signalNamespacesAdded(settle time.Duration) cache.ResourceEventHandler {
	signal := func() {
		select {
		case r.namespacesAdded <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(obj any, isInInitialList bool) {
		m, err := meta.Accessor(obj)
		if err != nil || isInInitialList {
			signal()
			return
		}
		name := m.GetName()
		r.settling.add(name)
		time.AfterFunc(settle, func() {
			r.settling.remove(name)
			signal()
		})
	}}
}

// settlingNamespaces are the namespaces added within dealSettle.
type settlingNamespaces struct {
	mu    sync.Mutex
	names map[string]int
}

func (s *settlingNamespaces) add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]int{}
	}
	s.names[name]++
}

// remove ends one add of name (a namespace deleted and created again
// within dealSettle is added twice).
func (s *settlingNamespaces) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names[name]--; s.names[name] <= 0 {
		delete(s.names, name)
	}
}

func (s *settlingNamespaces) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name] > 0
}
