package informers

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
