package informers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestScopeGatedNamespaces: in a gated scope a namespace of an owned
// partition stays hidden (no event, no lister entry, no Namespace) until
// it is reported held, and its objects and its Namespace are then
// delivered once, whichever of Gain and Held comes first; a namespace
// dropped stays hidden after its partition is gained again, until held
// again. Ungated, Gain shows every namespace of the partition.
func TestScopeGatedNamespaces(t *testing.T) {
	type step struct {
		gain, lose int // partition+1 (0: none)
		held       []string
		dropped    []string
	}
	for _, tc := range []struct {
		name    string
		ungated bool
		steps   []step
		// visible: namespaces of partition 1 the handlers see at the end,
		// each object added once.
		visible []string
		// adds: additions each visible namespace's objects got in all.
		adds int
	}{
		{name: "held, then gained", steps: []step{{held: []string{"ns1"}}, {gain: 2}}, visible: []string{"ns1"}, adds: 1},
		{name: "gained, then held", steps: []step{{gain: 2}, {held: []string{"ns1"}}}, visible: []string{"ns1"}, adds: 1},
		{name: "gained, held twice", steps: []step{{gain: 2}, {held: []string{"ns1"}}, {held: []string{"ns1", "ns3"}}}, visible: []string{"ns1", "ns3"}, adds: 1},
		{name: "not held", steps: []step{{gain: 2}}},
		{name: "dropped, gained again", steps: []step{{gain: 2}, {held: []string{"ns1", "ns3"}}, {lose: 2}, {dropped: []string{"ns1", "ns3"}}, {gain: 2}, {held: []string{"ns3"}}}, visible: []string{"ns3"}, adds: 2},
		{name: "ungated", ungated: true, steps: []step{{gain: 2}}, visible: []string{"ns1", "ns3"}, adds: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			partitionOf := func(ns string) int { n, _ := strconv.Atoi(strings.TrimPrefix(ns, "ns")); return n % 2 }
			var objects []runtime.Object
			for ns := range 4 {
				name := fmt.Sprintf("ns%d", ns)
				objects = append(objects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
				for i := range 3 {
					objects = append(objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: name}})
				}
			}
			client := fake.NewSimpleClientset(objects...)
			replica, stop := context.WithCancel(context.Background())
			defer stop()
			scope := NewScope(2, partitionOf)
			if !tc.ungated {
				scope.GateNamespaces()
			}
			f, err := NewPieceFactory(PieceConfig{Shared: NewPool(replica, PoolConfig{Client: client}), SharedStop: replica.Done(), Mapper: testMapper(), Scopes: MapperScopes{testMapper()}, Scope: scope})
			if err != nil {
				t.Fatal(err)
			}
			configMaps, namespaces := newRecorder(), newRecorder()
			cmInformer := f.Core().V1().ConfigMaps()
			if _, err := cmInformer.Informer().AddEventHandler(configMaps.handler()); err != nil {
				t.Fatal(err)
			}
			nsInformer := f.Core().V1().Namespaces()
			if _, err := nsInformer.Informer().AddEventHandler(namespaces.handler()); err != nil {
				t.Fatal(err)
			}
			f.Start(replica.Done())
			f.WaitForCacheSync(replica.Done())
			for _, s := range tc.steps {
				switch {
				case s.gain > 0:
					scope.Gain(s.gain - 1)
				case s.lose > 0:
					scope.Lose(s.lose - 1)
				case s.held != nil:
					scope.Held(s.held)
				case s.dropped != nil:
					scope.Dropped(s.dropped)
				}
			}
			// A handler call the informer queued before a step would
			// show here: give the queues time to drain.
			time.Sleep(100 * time.Millisecond)
			var wantCMs, wantNamespaces []string
			for _, ns := range tc.visible {
				wantNamespaces = append(wantNamespaces, "/"+ns)
				for i := range 3 {
					wantCMs = append(wantCMs, fmt.Sprintf("%s/cm-%d", ns, i))
				}
			}
			var gotNamespaces []string
			for _, key := range namespaces.liveKeys() {
				gotNamespaces = append(gotNamespaces, "/"+key)
			}
			if !equal(configMaps.liveKeys(), wantCMs) || !equal(gotNamespaces, wantNamespaces) {
				t.Errorf("handlers know %v and namespaces %v, want %v and %v", configMaps.liveKeys(), gotNamespaces, wantCMs, wantNamespaces)
			}
			for _, ns := range tc.visible {
				// Additions, and the deletions of a Lose in between.
				wantCalls := 3*tc.adds + 3*(tc.adds-1)
				if got := configMaps.callsIn(ns); got != wantCalls {
					t.Errorf("%s's objects got %d handler calls, want %d", ns, got, wantCalls)
				}
			}
			for _, ns := range []string{"ns0", "ns1", "ns2", "ns3"} {
				listed, err := cmInformer.Lister().ConfigMaps(ns).List(labels.Everything())
				if err != nil {
					t.Fatal(err)
				}
				if want := contains(tc.visible, ns); (len(listed) > 0) != want || scope.HasNamespace(ns) != want {
					t.Errorf("%s: the lister shows %d objects and HasNamespace is %v, want it visible: %v", ns, len(listed), scope.HasNamespace(ns), want)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
