package informers

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// A schedule whose store lacks a namespace's objects (about one in 3,000
// fresh seeds, never reproduced by replaying one) is traced from the
// state the cache held the namespace in when the check gave up, printed
// with the failure, since a replay's interleaving is the machine's.

// namespaceState describes how the informer of obj's kind holds ns: its
// partition at the cache (loaded, gains naming it, held, everywhere) and
// at the informer (phase, noted), whether it is loaded, in the ledger
// and awaited, and every source with its version, whether the source
// carries ns, has it joining and floors it.
func (o *OwnedCache) namespaceState(obj runtime.Object, ns string) string {
	o.mu.Lock()
	i := o.informers[reflect.TypeOf(obj)]
	p := o.config.PartitionOf(ns)
	cacheSide := fmt.Sprintf("partition %d: loaded %v, naming %d, held %v", p, o.partitions[p], o.naming[p], o.held[ns])
	everywhere := 0
	if i != nil {
		everywhere = i.everywhere
	}
	o.mu.Unlock()
	if i == nil {
		return cacheSide + "; no informer"
	}
	lw := i.lw
	lw.mu.Lock()
	defer lw.mu.Unlock()
	phase, byPartition := lw.partitions[p]
	awaited, isAwaited := lw.awaited[ns]
	var sources []string
	for s := range lw.sources {
		kind := "trunk"
		if s.feeds != nil {
			kind = "feeder"
		}
		desc := fmt.Sprintf("%s at %q carries %v", kind, s.version, s.has(ns))
		if j := s.joining[ns]; j != nil {
			desc += fmt.Sprintf(", joining (feeder %v, %d held back)", j.feeder != nil, len(j.backlog))
		}
		if floor, ok := s.floors[ns]; ok {
			desc += fmt.Sprintf(", floor %q", floor)
		}
		if s.watchCovers != nil {
			desc += fmt.Sprintf(", watch names it %v", s.watchCovers[ns])
		}
		sources = append(sources, desc)
	}
	sort.Strings(sources)
	return fmt.Sprintf("%s, everywhere %d; informer: kept by partition %v (phase %d), noted %v, everywhere %v, loaded %v, in ledger %d, awaited %v (%d listed); sources: %s; store holds %d of it",
		cacheSide, everywhere, byPartition, phase, lw.noted[p][ns], lw.everywhere, lw.loaded[ns], len(lw.ledger[ns]), isAwaited, len(awaited),
		strings.Join(sources, " | "), storeCount(i.informer.GetIndexer(), ns))
}

// storeCount is how many objects of ns the store holds.
func storeCount(indexer cache.Indexer, ns string) int {
	objs, err := indexer.ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return -1
	}
	return len(objs)
}
