package informers

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// How an ownedListWatch keeps the namespaces of loaded partitions by
// partition, not by name: the states of a partition, the rules and why
// they are whole are in doc.go ("A partition, per kind").

// partitionPhase is where a loaded partition's gain is.
type partitionPhase int

const (
	partitionNaming partitionPhase = iota // the gain reads its namespaces
	partitionKept                         // its namespaces are taken at their first event
	// partitionLeaving: a selected kind let go everywhere: its namespaces
	// are still taken at their first event, but a namespace created now
	// joins through a list, until the trunk takes the ones left and
	// names them in its watch (letGoEverywhere).
	partitionLeaving
)

// keepsByPartition says whether the trunk keeps namespaces by partition:
// its watch carries every namespace (no shard selector naming them, as
// while a selected kind is held everywhere). Called with mu held.
func (lw *ownedListWatch) keepsByPartition() bool {
	if lw.partitionOf == nil {
		return false
	}
	t, err := lw.target()
	return err == nil && (!(lw.sharded && t.selectWatch) || lw.everywhere)
}

// nameGain marks partitions naming, for a kind kept by partition: from
// now on the trunk decodes the events of their namespaces. It returns
// the gain's token for keepGain: a partition named after it (by another
// gain, a hold of every namespace beginning meanwhile) is kept only by a
// gain whose read of the namespaces followed that naming.
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

// keepGain marks partitions kept and loads namespaces (theirs, read by a
// consistent list after nameGain) with the ones the trunk noted while
// they were naming, up to the moment they are kept: a namespace noted
// while the first ones load (its first event dropped) is loaded too, or
// the kept partition would take it at its next event, without the first;
// it returns what load returns and the namespaces loaded, for the gain to
// wait on.
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
			// Named after this gain's read was asked for: a namespace
			// created before that naming and missing from the read
			// had events the trunk never decoded. The later gain's
			// read keeps it.
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

// claims says whether the trunk takes ns, not loaded, when an event or a
// read shows it: its partition is kept or leaving. A naming partition's
// namespace is noted for its gain instead. Called with mu held.
func (lw *ownedListWatch) claims(ns string) bool {
	phase, ok := lw.phaseOf(ns)
	if ok && phase == partitionNaming && !plantedNoNote {
		lw.note(lw.partitionOf(ns), ns)
	}
	return ok && phase != partitionNaming
}

// note records that the trunk dropped an event of ns, of naming
// partition p. Called with mu held.
func (lw *ownedListWatch) note(p int, ns string) {
	if lw.noted[p] == nil {
		lw.noted[p] = map[string]bool{}
	}
	lw.noted[p][ns] = true
}

// ensureTrunk starts an empty trunk when none watches, so that the
// namespaces created in kept partitions reach the informer. Called with
// mu held.
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

// takeUncarried reads the namespaces around a list of the trunk src and
// makes it take those of kept partitions no source carries; those of
// naming partitions are noted. Before the list (join false) src carries
// them, so that its list covers them: a trunk that lists again (its
// version expired) missed their events since it last watched, and its
// list folds no more of them than a plain informer's relist would. After
// it (join true) they join src through a feeder (feedJoining): created
// while the list was on its way, their events older than its version may
// be in neither it nor src's watch; those created after the read are
// newer than the list and reach src's watch. False if the read failed
// (list again).
func (lw *ownedListWatch) takeUncarried(ctx context.Context, src *source, join bool) bool {
	lw.mu.Lock()
	skip := len(lw.partitions) == 0 || lw.listNamespaceNames == nil || plantedNoReadAfterList
	lw.mu.Unlock()
	if skip {
		// No partition kept: nothing to take.
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
// list, and the read after it, may yet make ns join through a feeder)
// and no source has ns joining. A namespace shown while either holds
// could have events its handlers were told of folded into a feeder's
// list. It holds however the kind keeps ns: a selected kind let go
// everywhere joins a leaving partition's namespaces through its trunk's
// list (letGoEverywhere) with no partition kept and nothing awaited.
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

// holdEverywhere says that every partition is being loaded for a
// singleton, before the gain names them. A selected trunk watches again,
// from its version, with no selector: from now on its watch carries
// every namespace, so the kind keeps every partition by partition as an
// unselected one does. Partitions still leaving from the last hold are
// kept again: their namespaces have been taken at their first event
// throughout.
func (lw *ownedListWatch) holdEverywhere() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.everywhere = true
	lw.letGoGen++
	for p, phase := range lw.partitions {
		if phase == partitionLeaving {
			lw.partitions[p] = partitionKept
		}
	}
	if t, err := lw.target(); err == nil && lw.sharded && t.selectWatch && !plantedHoldKeepsSelector {
		if trunk := lw.trunk(); trunk != nil {
			trunk.supersedeWatch()
		}
	}
}

// leaveEverywhere ends holding every partition, once the partitions not
// loaded are forgotten and their namespaces unloaded. An unselected kind
// keeps its loaded partitions by partition still. A selected one must
// name its namespaces in its watch again, so it stops keeping them:
// its kept partitions become leaving, where a namespace created from
// now on joins through a list (OwnedCache.join) while the trunk still
// takes the others at their first event; it returns the generation to
// hand letGoEverywhere after a consistent read of the namespaces, and
// false when there is nothing to let go.
func (lw *ownedListWatch) leaveEverywhere() (uint64, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.everywhere = false
	if lw.keepsByPartition() {
		return 0, false
	}
	lw.letGoGen++
	for p, phase := range lw.partitions {
		if phase == partitionKept {
			lw.partitions[p] = partitionLeaving
		}
	}
	return lw.letGoGen, true
}

// letGoEverywhere ends leaving, unless a hold or another release came
// since leaveEverywhere returned gen: the trunk takes the namespaces of
// leaving partitions that a consistent read issued after it (names)
// shows and it has not taken yet, forgets those partitions and watches
// naming its namespaces. No event of a namespace not taken has been
// handed over (the trunk takes one of a leaving partition at its first),
// so the watch resuming from the trunk's version delivers all of them,
// but a trunk listing now has no version to resume from, so they join
// it; a namespace missing from the read was created after leaving began,
// and joins through a list.
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
				// and, handed over, would move it past ns's first
				// events. Joining, ns is covered by that list or listed
				// by a feeder after it, as newSources does.
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
