package informers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
)

// Metadata is the piece's view of the pool's metadata-only informers,
// which records handlers and filters namespaces as f's typed views do.
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

// clusterScoped says whether gvr goes unfiltered: always without a Scope,
// else as discovery says (clusterScopedResource).
func (m *metadataView) clusterScoped(gvr schema.GroupVersionResource) bool {
	if m.factory.Scope == nil {
		return true
	}
	return clusterScopedResource(m.factory.Logger, m.factory.Scopes, gvr, m.factory.stop())
}

// Start starts the piece's shared informers and puts its handlers live.
func (m *metadataView) Start(<-chan struct{}) {
	m.factory.Shared.Start(m.factory)
	m.factory.goLiveOnce()
}

func (m *metadataView) WaitForCacheSync(stopCh <-chan struct{}) map[schema.GroupVersionResource]bool {
	return poolSynced(m.factory, stopCh, func(k poolKey) (schema.GroupVersionResource, bool) { return k.metadata, k.typed == nil })
}

// Shutdown does nothing: the piece's handlers go with PieceFactory.Shutdown.
func (m *metadataView) Shutdown() {}

// typedWhereNeeded's ForResource serves only cluster-scoped resources and
// the namespaced ones listed, so an ObjectOrMetadataInformerFactory over it
// (typed first) caches every other namespaced resource as metadata only.
type typedWhereNeeded struct {
	*PieceFactory
	typed map[schema.GroupResource]bool
}

// TypedWhereNeeded is f for the garbage collector's and resourcequota's
// informers of every resource: KCM gives them typed informers it holds
// anyway, but a replica would cache every ConfigMap and Secret in full for
// controllers reading metadata only. typed lists the namespaced resources
// whose handlers need objects (resourcequota's Pods and Services).
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
