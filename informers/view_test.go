package informers

import (
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPieceIndexer(t *testing.T) {
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	byNode := func(obj any) ([]string, error) { return []string{obj.(*corev1.Pod).Spec.NodeName}, nil }
	inPiece := func(ns string) bool { return ns == "a" || ns == "b" }
	for _, withNamespaceIndex := range []bool{true, false} {
		indexers := cache.Indexers{"node": byNode}
		if withNamespaceIndex {
			indexers[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
		}
		shared := cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
		for _, p := range []*corev1.Pod{pod("a", "1", "n1"), pod("b", "2", "n1"), pod("c", "3", "n1"), pod("c", "4", "n2")} {
			if err := shared.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		view := &pieceIndexer{Indexer: shared, inPiece: inPiece}
		keysOf := func(items []any) []string {
			var out []string
			for _, it := range items {
				k, _ := cache.MetaNamespaceKeyFunc(it)
				out = append(out, k)
			}
			sort.Strings(out)
			return out
		}
		sorted := func(s []string) []string { sort.Strings(s); return s }
		byNodeN1, _ := view.ByIndex("node", "n1")
		byNodeN2, _ := view.ByIndex("node", "n2")
		byNsC, _ := view.ByIndex(cache.NamespaceIndex, "c")
		indexN1, _ := view.Index("node", pod("x", "y", "n1"))
		keysN1, _ := view.IndexKeys("node", "n1")
		_, foreign, _ := view.GetByKey("c/3")
		_, own, _ := view.Get(pod("a", "1", ""))
		for _, tc := range []struct {
			name string
			got  any
			want any
		}{
			{"List", keysOf(view.List()), []string{"a/1", "b/2"}},
			{"ListKeys", sorted(view.ListKeys()), []string{"a/1", "b/2"}},
			{"ByIndex own node", keysOf(byNodeN1), []string{"a/1", "b/2"}},
			{"ByIndex node of others only", len(byNodeN2), 0},
			{"Index", keysOf(indexN1), []string{"a/1", "b/2"}},
			{"IndexKeys", sorted(keysN1), []string{"a/1", "b/2"}},
			{"GetByKey of another namespace", foreign, false},
			{"Get own", own, true},
		} {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("namespace index %v: %s = %v, want %v", withNamespaceIndex, tc.name, tc.got, tc.want)
			}
		}
		if withNamespaceIndex && len(byNsC) != 0 {
			t.Errorf("ByIndex(namespace, c) = %d items, want none", len(byNsC))
		}
		if err := view.Add(pod("a", "5", "")); err == nil {
			t.Error("a piece's view must refuse writes")
		}
		if err := view.AddIndexers(cache.Indexers{"node": byNode}); err != nil {
			t.Errorf("adding an index the shared indexer has: %v", err)
		}
	}
}

// TestClusterWideViewAddsIndexersOnce: a controller built again on a
// replica that ran it before adds its indexers again, on the informer or
// on its indexer (resourceclaim's way, on the Pods held everywhere); both
// take an index already there as the same, as the shared informer
// outlives the piece.
func TestClusterWideViewAddsIndexersOnce(t *testing.T) {
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{})
	byNode := func(obj any) ([]string, error) { return []string{obj.(*corev1.Pod).Spec.NodeName}, nil }
	for run := range 2 {
		view := &sharedView{SharedIndexInformer: informer}
		for _, add := range []struct {
			name string
			add  func(cache.Indexers) error
		}{
			{"informer", view.AddIndexers},
			{"indexer", view.GetIndexer().AddIndexers},
		} {
			if err := add.add(cache.Indexers{"node-" + add.name: byNode}); err != nil {
				t.Errorf("run %d: adding an index on the %s: %v", run+1, add.name, err)
			}
		}
	}
	if got := len(informer.GetIndexer().GetIndexers()); got != 2 {
		t.Errorf("%d indexers, want 2", got)
	}
}
