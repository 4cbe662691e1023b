package informers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
)

// Metadata is the piece's view of the replica's metadata-only informers
// (in f.Shared, held until f.Shutdown): handlers are recorded in f and
// removed by f.Shutdown, and namespaced resources are filtered as f's typed
// ones are.
func (f *PieceFactory) Metadata() metadatainformer.SharedInformerFactory {
	return &metadataView{factory: f}
}

type metadataView struct {
	factory *PieceFactory
}

func (m *metadataView) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	informer := m.factory.Shared.MetadataFor(m.factory, gvr)
	namespaces := gvr.Group == "" && gvr.Resource == "namespaces"
	if !namespaces && m.clusterScoped(gvr) {
		m.factory.record(nil, gvr, false, SourceClusterWide, "", informer)
		return genericInformer{informer: &sharedView{SharedIndexInformer: informer, factory: m.factory}, resource: gvr.GroupResource()}
	}
	m.factory.record(nil, gvr, false, SourceScopedView, "", informer)
	return genericInformer{informer: m.factory.view(informer, namespaces), resource: gvr.GroupResource()}
}

// clusterScoped: a resource the apiserver does not serve counts as
// namespaced, so a partition view filters it rather than leak other
// namespaces; a failed discovery decides nothing (clusterScopedResource).
func (m *metadataView) clusterScoped(gvr schema.GroupVersionResource) bool {
	if m.factory.Scope == nil {
		return true
	}
	return clusterScopedResource(m.factory.Logger, m.factory.Scopes, gvr, m.factory.stop())
}

// Start starts the piece's shared informers and puts its handlers live
// (as PieceFactory.Start).
func (m *metadataView) Start(<-chan struct{}) {
	m.factory.Shared.Start(m.factory)
	m.factory.goLiveOnce()
}

func (m *metadataView) WaitForCacheSync(stopCh <-chan struct{}) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	for key, ok := range m.factory.Shared.WaitForCacheSync(m.factory, stopCh) {
		if key.typed == nil {
			out[key.metadata] = ok
		}
	}
	return out
}

// Shutdown does nothing: the shared informers are the replica's, and the
// piece's handlers go with PieceFactory.Shutdown.
func (m *metadataView) Shutdown() {}

// typedWhereNeeded is a typed factory whose ForResource serves only
// cluster-scoped resources and the namespaced ones listed, so that an
// ObjectOrMetadataInformerFactory over it (which tries typed first) caches
// every other namespaced resource as metadata only.
type typedWhereNeeded struct {
	*PieceFactory
	typed map[schema.GroupResource]bool
}

// TypedWhereNeeded is f for the garbage collector's and resourcequota's
// informers of every resource: KCM gives them its typed informers, which
// it holds anyway; a fleet replica running them would otherwise cache
// every ConfigMap and Secret in full for controllers that read only
// metadata. typed lists the namespaced resources whose handlers need the
// objects (resourcequota's Pods and Services).
func (f *PieceFactory) TypedWhereNeeded(typed ...schema.GroupResource) informers.SharedInformerFactory {
	t := &typedWhereNeeded{PieceFactory: f, typed: map[schema.GroupResource]bool{}}
	for _, gr := range typed {
		t.typed[gr] = true
	}
	return t
}

func (t *typedWhereNeeded) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	if !t.typed[gvr.GroupResource()] {
		gvk, err := t.Mapper.KindFor(gvr)
		if err != nil {
			return nil, fmt.Errorf("kind of %s: %w", gvr, err)
		}
		mapping, err := t.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("scope of %s: %w", gvr, err)
		}
		if mapping.Scope.Name() != meta.RESTScopeNameRoot {
			return nil, fmt.Errorf("%s is cached as metadata only", gvr)
		}
	}
	return t.PieceFactory.ForResource(gvr)
}
