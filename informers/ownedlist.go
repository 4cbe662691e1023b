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

// How an ownedListWatch lists: the requests of a feeder and of the trunk.

// listSource lists the objects of src's namespaces, as they are when it
// is called, and says which namespaces it covered, each with the version
// its list was read at. A feeder lists with shard selectors (one request
// per maxTerms namespaces), else one request per namespace, or past
// wideAbove namespaces one cluster-wide request. The trunk lists with one
// selector naming its namespaces when they fit, else cluster-wide, and
// when it has none reads only the current version. Objects of other
// namespaces are dropped here. A trunk
// listing again first takes the namespaces created in kept partitions
// since it last watched (takeUncarried); at the informer's first list
// (first) none was taken at an event yet, and the read after the list
// joins those the informer was made without.
func (lw *ownedListWatch) listSource(ctx context.Context, t *listWatchTarget, src *source, first bool) ([]runtime.Object, map[string]string, error) {
	if src.feeds == nil && !first && !lw.takeUncarried(ctx, src, false) {
		return nil, nil, fmt.Errorf("reading the namespaces before listing %s", t.resource)
	}
	lw.mu.Lock()
	namespaces := slices.Clone(src.namespaces)
	var since string
	if src.created {
		since = src.feeds.version
	}
	lw.mu.Unlock()
	if src.feeds != nil {
		return lw.listNamespaces(ctx, t, namespaces, since)
	}
	kind := wideList
	switch {
	case len(namespaces) == 0:
		kind = versionOnly
	case lw.sharded && len(namespaces) <= lw.maxTerms:
		kind = selectorList
	}
	items, version, err := lw.listRequest(ctx, t, namespaces, kind, "")
	if err != nil {
		return nil, nil, err
	}
	versions := map[string]string{"": version}
	for _, ns := range namespaces {
		versions[ns] = version
	}
	return items, versions, nil
}

// listNamespaces lists the objects of namespaces as a feeder does, as
// they are when it is called, with the version each namespace was read
// at: with shard selectors one request per maxTerms namespaces, else one
// request per namespace, or past wideAbove namespaces one cluster-wide
// request. With since, as they are at a version no older than since
// instead (sinceTrunk).
func (lw *ownedListWatch) listNamespaces(ctx context.Context, t *listWatchTarget, namespaces []string, since string) ([]runtime.Object, map[string]string, error) {
	versions := map[string]string{}
	var out []runtime.Object
	lw.mu.Lock()
	// Held everywhere, the kind loads nearly every namespace: one
	// cluster-wide list, as its unselected watch reads them, rather than
	// one per selector's worth.
	wide := lw.everywhere && len(namespaces) > lw.maxTerms
	lw.mu.Unlock()
	switch {
	case lw.sharded && !wide:
		for _, group := range chunks(namespaces, lw.maxTerms) {
			items, version, err := lw.listRequest(ctx, t, group, selectorList, since)
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
			items, version, err := t.listNamespace(ctx, ns, sinceTrunk(metav1.ListOptions{}, since))
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			versions[ns] = version
		}
	default:
		items, version, err := lw.listRequest(ctx, t, namespaces, wideList, since)
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

// listRequest makes one paged cluster-wide list of t and returns the
// objects in namespaces and the list's
// version; with since, at a version no older than since (sinceTrunk).
func (lw *ownedListWatch) listRequest(ctx context.Context, t *listWatchTarget, namespaces []string, kind listKind, since string) ([]runtime.Object, string, error) {
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	var out []runtime.Object
	options := sinceTrunk(metav1.ListOptions{Limit: 500, FieldSelector: t.fieldSelector}, since)
	switch kind {
	case selectorList:
		options.ShardSelector = namespaceSelector(namespaces)
	case versionOnly:
		options.Limit = 1
	}
	for {
		list, err := t.client.Get().Resource(t.resource).VersionedParams(&options, scheme.ParameterCodec).Do(ctx).Get()
		if err != nil {
			return nil, "", fmt.Errorf("listing %s in %d namespaces: %w", t.resource, len(namespaces), err)
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
		for _, item := range items {
			if m, err := meta.Accessor(item); err == nil && want[m.GetNamespace()] {
				out = append(out, item)
			}
		}
		if listMeta.GetContinue() == "" || kind == versionOnly {
			return out, listMeta.GetResourceVersion(), nil
		}
		options.Continue = listMeta.GetContinue()
	}
}

// sinceTrunk asks a feeder's list of namespaces created in loaded
// partitions for a version no older than since, its trunk's version,
// rather than a consistent read: kube-apiserver's watch cache answers it
// at once, where a consistent list waits until the cache is as new as
// etcd (about 80 ms on a quiet server, measured as the time a new
// namespace's Pods list took). It is whole: the trunk's watch resumes
// from since and hands over every event of those namespaces newer than
// the list (feed); no other replica wrote into them, and this one's
// controllers are shown them only once the list is handed over.
func sinceTrunk(options metav1.ListOptions, since string) metav1.ListOptions {
	if since != "" {
		options.ResourceVersion = since
		options.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	return options
}
