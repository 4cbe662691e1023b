package informers

import (
	"context"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// feed hands over feeder f's list (takeFeed) and ends f. The trunk's
// events are held back from before f's list was asked for, so together
// they miss nothing.
func (s *ownedStream) feed(ctx context.Context, f *source, items []runtime.Object, versions map[string]string) {
	lw := s.lw
	lw.sendMu.Lock()
	defer lw.sendMu.Unlock()
	lw.mu.Lock()
	namespaces, events, listedCount, ok := s.takeFeed(ctx, f, items, versions)
	lw.countSources()
	lw.mu.Unlock()
	if !ok {
		return
	}
	var added []runtime.Object
	for i, e := range events {
		m, err := meta.Accessor(e.Object)
		if err != nil {
			continue
		}
		if !s.send(e) {
			return
		}
		lw.recordSent(e, m.GetNamespace(), m.GetName())
		if i < listedCount && e.Type == watch.Added {
			added = append(added, e.Object)
		}
	}
	lw.mu.Lock()
	lw.noteListed(namespaces, added)
	lw.mu.Unlock()
	for _, ns := range namespaces {
		if newerVersion(versions[ns], lw.highest) {
			lw.highest = versions[ns]
		}
	}
	s.bookmark()
}

// takeFeed ends feeder f and returns the namespaces still joining its
// trunk through it, now the trunk's, and the events that bring them into
// the store: first listedCount from f's list (its objects and the
// deletions of what it lacks), then the backlog newer than the list. False
// if f or its trunk was stopped, or ctx ended. Called with lw.mu held.
func (s *ownedStream) takeFeed(ctx context.Context, f *source, items []runtime.Object, versions map[string]string) (namespaces []string, events []watch.Event, listedCount int, ok bool) {
	lw := s.lw
	// Read first: stopping f ends ctx, its producer's.
	stopped := ctx.Err() != nil
	_, current := lw.sources[f]
	delete(lw.sources, f)
	s.stop(f)
	trunk := f.feeds
	if _, trunkCurrent := lw.sources[trunk]; !current || !trunkCurrent || stopped {
		return nil, nil, 0, false
	}
	backlogs := map[string][]watch.Event{}
	for ns := range versions {
		if j := trunk.joining[ns]; j != nil && j.feeder == f {
			namespaces = append(namespaces, ns)
			backlogs[ns] = j.backlog
			delete(trunk.joining, ns)
			trunk.raiseFloor(ns, versions[ns])
		}
	}
	sort.Strings(namespaces)
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil {
			if _, taken := backlogs[m.GetNamespace()]; taken {
				events = append(events, watch.Event{Type: watch.Added, Object: item})
			}
		}
	}
	events = append(events, lw.deletionsAbsent(namespaces, events)...)
	listedCount = len(events)
	for _, ns := range namespaces {
		for _, e := range backlogs[ns] {
			if m, err := meta.Accessor(e.Object); err == nil && newerVersion(m.GetResourceVersion(), versions[ns]) {
				events = append(events, e)
			}
		}
	}
	return namespaces, events, listedCount, true
}
