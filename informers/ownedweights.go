package informers

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// PartitionObjects is what each loaded partition holds: the objects of
// its namespaces in every informer of the cache, summed over kinds. It is
// the partition's weight the replica publishes, so that every member
// sees how the work is spread: the partition controllers' work follows
// the objects they watch, and the replica's memory too.
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
// namespaces that is in a loaded partition: every such namespace is a
// key, with no items when the cache has no informer of that kind. It is
// what a replica reads its young namespaces' work to come from.
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
