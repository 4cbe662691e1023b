package informers

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
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

// NamespaceObjects is what each of namespaces holds, among those of the
// loaded partitions, summed over the kinds but those of besides: the
// young namespaces' weights the replica publishes promptly (a
// namespace's first minute is when the work it brings is dealt).
func (o *OwnedCache) NamespaceObjects(namespaces []string, besides ...runtime.Object) map[string]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]uint64, len(namespaces))
	for _, ns := range namespaces {
		if o.partitions[o.config.PartitionOf(ns)] {
			out[ns] = 0
		}
	}
	skip := map[reflect.Type]bool{}
	for _, obj := range besides {
		skip[reflect.TypeOf(obj)] = true
	}
	for t, i := range o.informers {
		if skip[t] {
			continue
		}
		i.lw.mu.Lock()
		for ns := range out {
			out[ns] += uint64(len(i.lw.ledger[ns]))
		}
		i.lw.mu.Unlock()
	}
	return out
}
