package informers

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// listSource lists the objects of src's namespaces, as they are now, and
// says which namespaces it covered, each with the version it was read at:
// a feeder as listNamespaces does; the trunk with one selector naming its
// namespaces when they fit, else cluster-wide, or, with none, only the
// current version. Around the trunk's list the namespaces are read
// (takeUncarried): not before the informer's first list (first), when
// none was taken at an event yet, and not around a relist of a kind
// keeping by partition (listByPartition).
func (lw *ownedListWatch) listSource(ctx context.Context, t *listWatchTarget, src *source, first bool) (items []runtime.Object, versions map[string]string, err error) {
	lw.mu.Lock()
	// Only where it would list cluster-wide anyway: a shard selector can
	// name only namespaces known before the list.
	byPartition := src.feeds == nil && !first && lw.keepsByPartition() && len(lw.partitions) > 0 &&
		!(lw.sharded && len(src.namespaces) <= lw.maxTerms) && !plantedRelistReadsNamespaces
	lw.mu.Unlock()
	if src.feeds == nil && !first && !byPartition && !lw.takeUncarried(ctx, src, false) {
		return nil, nil, fmt.Errorf("reading the namespaces before listing %s", t.resource)
	}
	lw.mu.Lock()
	namespaces := slices.Clone(src.namespaces)
	lw.mu.Unlock()
	if src.feeds != nil {
		return lw.listNamespaces(ctx, t, namespaces)
	}
	kind := wideList
	switch {
	case byPartition:
	case len(namespaces) == 0:
		kind = versionOnly
	case lw.sharded && len(namespaces) <= lw.maxTerms:
		kind = selectorList
	}
	var version string
	if byPartition {
		items, version, err = lw.listByPartition(ctx, t, src, namespaces)
	} else {
		items, version, err = lw.listRequest(ctx, t, namespaces, kind)
	}
	if err != nil {
		return nil, nil, err
	}
	if !byPartition && !lw.takeUncarried(ctx, src, true) {
		return nil, nil, fmt.Errorf("reading the namespaces after listing %s", t.resource)
	}
	versions = map[string]string{"": version}
	for _, ns := range namespaces {
		versions[ns] = version
	}
	return items, versions, nil
}

// listByPartition lists the trunk src again cluster-wide, at once, as a
// plain informer does, with no read of the namespaces first (doc.go,
// relist-reads-namespaces). It keeps the objects of src's namespaces and
// takes those of kept partitions no source carries: their events up to
// the list's version are in it, later ones reach src's watch, which
// resumes from it. A namespace a feeder loads meanwhile is left to its
// own list.
func (lw *ownedListWatch) listByPartition(ctx context.Context, t *listWatchTarget, src *source, namespaces []string) ([]runtime.Object, string, error) {
	carried := make(map[string]bool, len(namespaces))
	for _, ns := range namespaces {
		carried[ns] = true
	}
	// Decided page by page, as the page arrives, so that no more than a
	// page of other namespaces' objects is held.
	keep := func(pageNamespaces []string) func(ns string) bool {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		var uncarried []string
		for _, ns := range pageNamespaces {
			if !carried[ns] {
				uncarried = append(uncarried, ns)
			}
		}
		// Leaving partitions' too: letGoEverywhere leaves one taken.
		for _, ns := range uncarried {
			if lw.take(src, ns) {
				carried[ns] = true
			}
		}
		return func(ns string) bool { return carried[ns] }
	}
	return lw.pagedList(ctx, t, metav1.ListOptions{Limit: 500, FieldSelector: t.fieldSelector}, wideList, keep)
}

// listNamespaces lists the objects of namespaces as a feeder does, with
// the version each was read at: with shard selectors one request per
// maxTerms namespaces, else one per namespace, or past wideAbove
// namespaces one cluster-wide request.
func (lw *ownedListWatch) listNamespaces(ctx context.Context, t *listWatchTarget, namespaces []string) ([]runtime.Object, map[string]string, error) {
	versions := map[string]string{}
	var out []runtime.Object
	lw.mu.Lock()
	// Held everywhere, the kind loads nearly every namespace: one wide list,
	// as its unselected watch reads them, beats one per selector's worth.
	wide := lw.everywhere && len(namespaces) > lw.maxTerms
	lw.mu.Unlock()
	switch {
	case lw.sharded && !wide:
		for _, group := range chunks(namespaces, lw.maxTerms) {
			items, version, err := lw.listRequest(ctx, t, group, selectorList)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			for _, ns := range group {
				versions[ns] = version
			}
		}
	case !wide && (lw.wideAbove == 0 || len(namespaces) <= lw.wideAbove):
		for _, ns := range namespaces {
			items, version, err := t.listNamespace(ctx, ns, metav1.ListOptions{})
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			versions[ns] = version
		}
	default:
		items, version, err := lw.listRequest(ctx, t, namespaces, wideList)
		if err != nil {
			return nil, nil, err
		}
		out = items
		for _, ns := range namespaces {
			versions[ns] = version
		}
		versions[""] = version
	}
	return out, versions, nil
}

// listKind is how listRequest asks.
type listKind int

const (
	wideList     listKind = iota // every namespace, keeping only namespaces'
	selectorList                 // a shard selector naming namespaces
	versionOnly                  // only the current version
)

// listRequest makes one paged list of t, as kind asks, and returns the
// objects in namespaces and the list's version.
func (lw *ownedListWatch) listRequest(ctx context.Context, t *listWatchTarget, namespaces []string, kind listKind) ([]runtime.Object, string, error) {
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	options := metav1.ListOptions{Limit: 500, FieldSelector: t.fieldSelector}
	switch kind {
	case selectorList:
		options.ShardSelector = namespaceSelector(namespaces)
	case versionOnly:
		options.Limit = 1
	}
	keep := func([]string) func(string) bool { return func(ns string) bool { return want[ns] } }
	return lw.pagedList(ctx, t, options, kind, keep)
}

// pagedList lists t with options, page after page; it keeps the objects
// whose namespaces keep (given each page's) says yes to.
func (lw *ownedListWatch) pagedList(ctx context.Context, t *listWatchTarget, options metav1.ListOptions, kind listKind, keep func(pageNamespaces []string) func(ns string) bool) ([]runtime.Object, string, error) {
	var out []runtime.Object
	for {
		list, err := t.client.Get().Resource(t.resource).VersionedParams(&options, scheme.ParameterCodec).Do(ctx).Get()
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		listMeta, err := meta.ListAccessor(list)
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		if sharded, ok := listMeta.(metav1.ShardedListInterface); kind == selectorList && (!ok || sharded.GetShardInfo() == nil) {
			selectorIgnored.WithLabelValues(t.resource).Inc()
		}
		items, err := meta.ExtractListWithAlloc(list)
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		namespaces := make([]string, 0, len(items))
		accessors := make([]metav1.Object, len(items))
		for i, item := range items {
			if m, err := meta.Accessor(item); err == nil {
				accessors[i] = m
				namespaces = append(namespaces, m.GetNamespace())
			}
		}
		kept := keep(namespaces)
		for i, item := range items {
			if accessors[i] != nil && kept(accessors[i].GetNamespace()) {
				out = append(out, item)
			}
		}
		if listMeta.GetContinue() == "" || kind == versionOnly {
			return out, listMeta.GetResourceVersion(), nil
		}
		options.Continue = listMeta.GetContinue()
	}
}
