package informers

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// drop counts the loaded namespaces of the partitions gone picks (of
// 0..partitions-1) and, with unload, unloads them. The partitions are
// forgotten first, in the same hold of mu as the count, so no namespace
// the trunk takes meanwhile escapes the unload.
func (lw *ownedListWatch) drop(gone func(p int) bool, partitions int, unload bool) int {
	lw.mu.Lock()
	if unload {
		for p := range partitions {
			if gone(p) {
				delete(lw.partitions, p)
				delete(lw.noted, p)
			}
		}
	}
	var namespaces []string
	for ns := range lw.loaded {
		if gone(lw.partitionOf(ns)) {
			namespaces = append(namespaces, ns)
		}
	}
	lw.mu.Unlock()
	if unload {
		lw.unload(namespaces)
	}
	return len(namespaces)
}

// unload removes namespaces: their sources stop or narrow (resuming from
// their own version, a subset of the same stream), then every object the
// informer holds of them is deleted from it.
func (lw *ownedListWatch) unload(namespaces []string) {
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	gone := map[string]bool{}
	for _, ns := range namespaces {
		if lw.loaded[ns] {
			gone[ns] = true
			delete(lw.loaded, ns)
		}
		delete(lw.awaited, ns)
	}
	if len(gone) == 0 {
		lw.mu.Unlock()
		return
	}
	// The trunk's watch drops their events from now on. A feeder left with
	// nothing to list stops; one still listing hands over only what joins.
	for s := range lw.sources {
		for ns := range gone {
			s.remove(ns)
		}
		if s.feeds != nil && len(s.namespaces) == 0 {
			delete(lw.sources, s)
			if lw.stream != nil {
				lw.stream.stop(s)
			}
		}
	}
	lw.countSources()
	deletions := lw.deletionsAbsent(slices.Sorted(maps.Keys(gone)), nil)
	for ns := range gone {
		delete(lw.ledger, ns)
	}
	stream := lw.stream
	lw.mu.Unlock()
	lw.sendPurge(stream, deletions)
}

// placeholder is an object with only the key and version: for deleting
// one the informer has not stored yet (its addition is still queued), or,
// keyless, for a bookmark.
func (lw *ownedListWatch) placeholder(ns, name, version string) runtime.Object {
	t, err := lw.target()
	if err != nil {
		return nil
	}
	obj, err := scheme.Scheme.New(t.listKind.GroupVersion().WithKind(t.listKind.Kind[:len(t.listKind.Kind)-len("List")]))
	if err != nil {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	m.SetNamespace(ns)
	m.SetName(name)
	m.SetResourceVersion(version)
	return obj
}

// sendPurge sends deletions on stream, or keeps what it could not send
// for the next one. Called with sendMu held.
func (lw *ownedListWatch) sendPurge(stream *ownedStream, deletions []watch.Event) {
	for i, e := range deletions {
		if stream == nil || !stream.send(e) {
			lw.mu.Lock()
			lw.purge = append(lw.purge, deletions[i:]...)
			lw.mu.Unlock()
			return
		}
	}
	if stream != nil {
		stream.bookmark()
	}
}
