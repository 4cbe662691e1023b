package informers

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// partitionPhase is a loaded partition's state (doc.go).
type partitionPhase int

const (
	partitionNaming  partitionPhase = iota // the gain reads its namespaces
	partitionKept                          // its namespaces are taken at their first event
	partitionLeaving                       // a selected kind let go everywhere, until letGoEverywhere
)

// keepsByPartition says whether the trunk's watch carries every namespace
// (no shard selector, or the kind held everywhere). Called with mu held.
func (lw *ownedListWatch) keepsByPartition() bool {
	if lw.partitionOf == nil {
		return false
	}
	t, err := lw.target()
	return err == nil && (!(lw.sharded && t.selectWatch) || lw.everywhere)
}

// nameGain marks partitions naming, for a kind kept by partition, and
// returns the gain's token for keepGain: a partition named after it is
// kept only by a gain whose read of the namespaces followed the naming.
func (lw *ownedListWatch) nameGain(partitions map[int]bool) uint64 {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.keepsByPartition() {
		return lw.named
	}
	for p := range partitions {
		if _, ok := lw.partitions[p]; !ok {
			lw.named++
			lw.partitions[p] = partitionNaming
			lw.namedAt[p] = lw.named
		}
	}
	return lw.named
}

// keepGain loads namespaces (read by a consistent list after nameGain)
// and those the trunk noted, until none is left, then keeps the
// partitions with mu still held: a namespace noted while others load had
// its first event dropped, and kept, its partition would take it at its
// next one. It returns what load returns and the namespaces loaded.
func (lw *ownedListWatch) keepGain(partitions map[int]bool, namespaces []string, await bool, token uint64) (unlisted, loading []string) {
	batch := sets.New(namespaces...)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for {
		for p := range partitions {
			for ns := range lw.noted[p] {
				batch.Insert(ns)
			}
			delete(lw.noted, p)
		}
		if batch.Len() == 0 {
			break
		}
		names := sets.List(batch)
		lw.mu.Unlock()
		unlisted = append(unlisted, lw.load(names, await, nil)...)
		lw.mu.Lock()
		loading = append(loading, names...)
		batch = sets.New[string]()
	}
	sort.Strings(loading)
	keeps := lw.keepsByPartition()
	for p := range partitions {
		switch phase, named := lw.partitions[p]; {
		case !named || phase != partitionNaming:
		case lw.namedAt[p] > token && !plantedKeepsLaterNaming:
			// Named after this gain's read was asked for, which may lack
			// a namespace the trunk never decoded: the later gain keeps it.
		case keeps:
			lw.partitions[p] = partitionKept
		default:
			// Its watch names its namespaces again (a selected kind
			// let go everywhere while the gain read them): listed.
			delete(lw.partitions, p)
		}
	}
	lw.ensureTrunk()
	return unlisted, loading
}

// phaseOf is the phase of ns's partition; false if the trunk does not
// keep it by partition. Called with mu held.
func (lw *ownedListWatch) phaseOf(ns string) (partitionPhase, bool) {
	if len(lw.partitions) == 0 {
		return 0, false
	}
	phase, ok := lw.partitions[lw.partitionOf(ns)]
	return phase, ok
}

// claims says whether the trunk takes ns, not loaded: its partition is
// kept or leaving; a naming partition's is noted (its event is dropped).
// Called with mu held.
func (lw *ownedListWatch) claims(ns string) bool {
	phase, ok := lw.phaseOf(ns)
	if ok && phase == partitionNaming && !plantedNoNote {
		p := lw.partitionOf(ns)
		if lw.noted[p] == nil {
			lw.noted[p] = map[string]bool{}
		}
		lw.noted[p][ns] = true
	}
	return ok && phase != partitionNaming
}

// ensureTrunk starts an empty trunk when there is none, so namespaces
// created in kept partitions reach the informer. Called with mu held.
func (lw *ownedListWatch) ensureTrunk() {
	if len(lw.partitions) == 0 || lw.trunk() != nil {
		return
	}
	s := &source{}
	lw.sources[s] = struct{}{}
	if lw.stream != nil {
		lw.stream.start(s)
	}
	lw.countSources()
}

// takeUncarried reads the namespaces around a list of the trunk src
// (doc.go) and makes src take those of kept partitions no source carries.
// Before the list (join false) src carries them: relisting, it missed
// their events, and its list folds no more than a plain relist would.
// After it (join true) they join src through a feeder (feedJoining):
// created while the list was on its way, their older events may be in
// neither the list nor src's watch; those created after the read reach
// the watch. False if the read failed.
func (lw *ownedListWatch) takeUncarried(ctx context.Context, src *source, join bool) bool {
	lw.mu.Lock()
	skip := len(lw.partitions) == 0 || lw.listNamespaceNames == nil || plantedNoReadAfterList
	lw.mu.Unlock()
	if skip {
		return true
	}
	names, err := lw.listNamespaceNames(ctx)
	if err != nil {
		return false
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	var taken []string
	for _, ns := range names {
		if lw.take(src, ns) {
			taken = append(taken, ns)
		}
	}
	if join && len(taken) > 0 {
		src.join(taken, nil)
	}
	return true
}

// ready says whether ns can be shown to handlers: no trunk lists (its
// list and the read after may yet make ns join) and no source has ns
// joining, or a feeder's list could fold events the handlers were told
// of. It holds in every kind, not only one keeping by partition (doc.go).
func (lw *ownedListWatch) ready(ns string) bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if _, ok := lw.phaseOf(ns); plantedReadyByPartitionOnly && !ok {
		return true
	}
	for s := range lw.sources {
		if s.feeds == nil && s.version == "" || s.joining[ns] != nil {
			return false
		}
	}
	return true
}

// partitionsDescribed lists the partitions kept by partition, each with
// its phase, for Waiting. Called with mu held.
func (lw *ownedListWatch) partitionsDescribed() []string {
	var out []string
	for p, phase := range lw.partitions {
		what := map[partitionPhase]string{partitionNaming: "naming", partitionKept: "kept", partitionLeaving: "leaving"}[phase]
		out = append(out, fmt.Sprintf("%d %s", p, what))
	}
	sort.Strings(out)
	return out
}

// holdEverywhere begins loading every partition for a singleton, before
// the gain names them. A selected trunk's watch resumes from its version
// with no selector, so the kind keeps by partition; partitions still
// leaving are kept again, their namespaces taken at their first event
// throughout.
func (lw *ownedListWatch) holdEverywhere() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.everywhere = true
	lw.letGoGen++
	lw.movePhase(partitionLeaving, partitionKept)
	if t, err := lw.target(); err == nil && lw.sharded && t.selectWatch && !plantedHoldKeepsSelector {
		if trunk := lw.trunk(); trunk != nil {
			trunk.supersedeWatch()
		}
	}
}

// leaveEverywhere ends holding every partition, once those not loaded are
// forgotten and their namespaces unloaded. An unselected kind still keeps
// by partition; a selected one must name its namespaces in its watch
// again, so its kept partitions become leaving. It returns the generation
// to hand letGoEverywhere after a consistent read of the namespaces;
// false when there is nothing to let go.
func (lw *ownedListWatch) leaveEverywhere() (uint64, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.everywhere = false
	if lw.keepsByPartition() {
		return 0, false
	}
	lw.letGoGen++
	lw.movePhase(partitionKept, partitionLeaving)
	return lw.letGoGen, true
}

// movePhase moves every partition in phase from to phase to. Called with
// mu held.
func (lw *ownedListWatch) movePhase(from, to partitionPhase) {
	for p, phase := range lw.partitions {
		if phase == from {
			lw.partitions[p] = to
		}
	}
}

// letGoEverywhere ends leaving, unless a hold or release came since
// leaveEverywhere returned gen. The trunk takes the leaving partitions'
// namespaces that names (a consistent read issued after leaving began)
// shows and it has not taken, forgets those partitions and watches naming
// its namespaces. A namespace not taken had no event handed over (it would
// have been taken at its first), so the watch resuming from the trunk's
// version delivers all of them; a listing trunk has no version, so they
// join it. One missing from names was created after leaving began and
// joins through a list.
func (lw *ownedListWatch) letGoEverywhere(gen uint64, names []string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if gen != lw.letGoGen {
		return
	}
	lw.ensureTrunk()
	trunk := lw.trunk()
	for _, ns := range names {
		if phase, ok := lw.partitions[lw.partitionOf(ns)]; ok && phase == partitionLeaving && !lw.loaded[ns] && trunk != nil {
			lw.loaded[ns] = true
			if trunk.version == "" && !plantedLetGoInsertsWhileListing {
				// Listing: its list may have been asked for without ns
				// and would move it past ns's first events; joining, ns
				// is covered by that list or a feeder's (newSources).
				trunk.join([]string{ns}, nil)
			} else {
				trunk.insert(ns)
			}
		}
	}
	for p, phase := range lw.partitions {
		if phase == partitionLeaving {
			delete(lw.partitions, p)
			delete(lw.noted, p)
		}
	}
	lw.letGoGen++
	if trunk != nil {
		trunk.supersedeWatch()
	}
}
