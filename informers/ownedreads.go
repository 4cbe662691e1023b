package informers

import (
	"maps"
	"reflect"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// Partitions lists the loaded partitions.
func (o *OwnedCache) Partitions() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.partitions))
}

// Everywhere lists the resources held everywhere now, sorted (tests, debug).
func (o *OwnedCache) Everywhere() []string {
	var out []string
	o.eachResolved(func(i *ownedInformer, t *listWatchTarget) {
		if i.everywhere > 0 {
			out = append(out, t.resource)
		}
	})
	sort.Strings(out)
	return out
}

// FieldSelectors gives the selector narrowing each informer made so far
// that has one, by resource (tests, debug).
func (o *OwnedCache) FieldSelectors() map[string]string {
	out := map[string]string{}
	o.eachResolved(func(_ *ownedInformer, t *listWatchTarget) {
		if t.fieldSelector != "" {
			out[t.resource] = t.fieldSelector
		}
	})
	return out
}

// FieldSelectorOf is the selector narrowing obj's kind ("" none).
func (o *OwnedCache) FieldSelectorOf(obj runtime.Object) string {
	if selector, ok := o.config.FieldSelectors[reflect.TypeOf(obj)]; ok {
		return selector.String()
	}
	return ""
}

// Keys lists the keys each informer holds, by resource (tests, debug).
func (o *OwnedCache) Keys() map[string][]string {
	out := map[string][]string{}
	o.eachResolved(func(i *ownedInformer, t *listWatchTarget) {
		keys := i.informer.GetStore().ListKeys()
		sort.Strings(keys)
		out[t.resource] = keys
	})
	return out
}

// eachResolved calls f, with o.mu held, on each informer whose resource
// resolves, and its target.
func (o *OwnedCache) eachResolved(f func(i *ownedInformer, t *listWatchTarget)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, i := range o.informers {
		if t, err := i.lw.target(); err == nil {
			f(i, t)
		}
	}
}

// PartitionObjects counts each loaded partition's objects over every
// informer: the weight the replica publishes, since the controllers' work
// and the replica's memory follow the objects watched.
func (o *OwnedCache) PartitionObjects() map[int]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[int]uint64, len(o.partitions))
	for p := range o.partitions {
		out[p] = 0
	}
	for _, i := range o.informers {
		i.lw.mu.Lock()
		for ns, names := range i.lw.ledger {
			p := o.config.PartitionOf(ns)
			if o.partitions[p] {
				out[p] += uint64(len(names))
			}
		}
		i.lw.mu.Unlock()
	}
	return out
}

// NamespaceItems is what the informer of obj's kind holds in each of
// namespaces in a loaded partition (each a key, empty without such an
// informer), from which a replica reads its young namespaces' work.
func (o *OwnedCache) NamespaceItems(obj runtime.Object, namespaces []string) map[string][]any {
	o.mu.Lock()
	out := make(map[string][]any, len(namespaces))
	for _, ns := range namespaces {
		if o.partitions[o.config.PartitionOf(ns)] {
			out[ns] = nil
		}
	}
	i := o.informers[reflect.TypeOf(obj)]
	o.mu.Unlock()
	if i == nil {
		return out
	}
	indexer := i.informer.GetIndexer()
	for ns := range out {
		out[ns], _ = indexer.ByIndex(cache.NamespaceIndex, ns)
	}
	return out
}
