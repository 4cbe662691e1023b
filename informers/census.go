package informers

import (
	"sort"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// Where a piece's informer comes from, and so what it holds.
const (
	// SourceClusterWide: the pool's informer of every object, as in KCM.
	SourceClusterWide = "cluster-wide"
	// SourceScopedView: the pool's informer, seen through the Scope.
	SourceScopedView = "cluster-wide, scoped view"
	// SourceHeldEverywhere: the owned cache's informer, held everywhere.
	SourceHeldEverywhere = "owned cache, every namespace"
	// SourceOwnedPartitions: the owned cache, the owned partitions only.
	SourceOwnedPartitions = "owned cache, owned partitions"
)

// InformerRecord is one informer a piece's controllers were given: what it
// holds and whether it has synced (an informer never started never does).
type InformerRecord struct {
	// Controller that asked for it; "" when asked at run time.
	Controller string `json:"controller,omitempty"`
	Group      string `json:"group,omitempty"`
	// Resource, or the kind where the RESTMapper did not know it.
	Resource string `json:"resource"`
	// Typed: whole objects; else metadata only.
	Typed  bool   `json:"typed"`
	Source string `json:"source"`
	// FieldSelector narrows what the informer holds ("" none).
	FieldSelector string `json:"fieldSelector,omitempty"`
	Synced        bool   `json:"synced"`
}

type censusEntry struct {
	InformerRecord
	informer cache.SharedIndexInformer
}

// Building names the controller the next informers are for ("" at run time).
func (f *PieceFactory) Building(controller string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.building = controller
}

// record notes an informer handed out, named by gvr or else obj's kind.
func (f *PieceFactory) record(obj runtime.Object, gvr schema.GroupVersionResource, typed bool, source, fieldSelector string, informer cache.SharedIndexInformer) {
	group, resource := gvr.Group, gvr.Resource
	if obj != nil && resource == "" {
		if gvks, _, err := scheme.Scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
			group, resource = gvks[0].Group, gvks[0].Kind
			if mapping, err := f.Mapper.RESTMapping(gvks[0].GroupKind(), gvks[0].Version); err == nil {
				resource = mapping.Resource.Resource
			}
		}
	}
	if v, ok := informer.(*sharedView); ok {
		informer = v.SharedIndexInformer
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := InformerRecord{Controller: f.building, Group: group, Resource: resource, Typed: typed, Source: source, FieldSelector: fieldSelector}
	for _, e := range f.census {
		if e.informer == informer && e.Controller == r.Controller {
			return
		}
	}
	f.census = append(f.census, censusEntry{InformerRecord: r, informer: informer})
}

// Census lists the informers handed out, one per controller and informer.
func (f *PieceFactory) Census() []InformerRecord {
	f.mu.Lock()
	entries := append([]censusEntry(nil), f.census...)
	f.mu.Unlock()
	out := make([]InformerRecord, 0, len(entries))
	for _, e := range entries {
		r := e.InformerRecord
		r.Synced = e.informer.HasSynced()
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Controller != b.Controller {
			return a.Controller < b.Controller
		}
		if a.Group+"/"+a.Resource != b.Group+"/"+b.Resource {
			return a.Group+"/"+a.Resource < b.Group+"/"+b.Resource
		}
		return a.Typed && !b.Typed
	})
	return out
}
