package informers

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

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
