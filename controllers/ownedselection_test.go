package controllers

import (
	"k8s.io/klog/v2"
	"maps"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	restclient "k8s.io/client-go/rest"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
)

// TestOwnedSelectionReaders builds every partition controller through its
// upstream descriptor, alone, and lists the informers it took: the
// partition controllers taking a narrowed kind must be exactly that
// selection's readers, whose reads were checked against the selector. A
// new reader (a Kubernetes upgrade) fails here until someone reads it.
func TestOwnedSelectionReaders(t *testing.T) {
	got := map[reflect.Type][]string{}
	for _, s := range ownedSelections {
		got[reflect.TypeOf(s.object)] = nil
	}
	// Built by hand (newTokensController) with the Secret informer.
	got[reflect.TypeOf(&corev1.Secret{})] = []string{names.ServiceAccountTokenController}
	for name, entry := range Catalog {
		if entry.Kind != Partition || name == names.ServiceAccountTokenController {
			continue
		}
		t.Run(name, func(t *testing.T) {
			descriptor := Descriptors()[name]
			for _, gate := range descriptor.GetRequiredFeatureGates() {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, gate, true)
			}
			builder := newSharedLimiterBuilder(klog.Background(), clientbuilder.SimpleControllerClientBuilder{
				ClientConfig: &restclient.Config{Host: discoveryServer(t)},
			}, "test", nil).forSingletons()
			cc := testControllerContext(t, builder)
			c, err := descriptor.BuildController(t.Context(), cc)
			if err != nil || c == nil {
				t.Fatalf("building %s: %v, %v", name, c, err)
			}
			stop := make(chan struct{})
			cc.InformerFactory.Start(stop)
			taken := cc.InformerFactory.WaitForCacheSync(stop)
			close(stop)
			if len(taken) == 0 {
				t.Logf("%s took no typed informer", name)
			}
			for typ := range taken {
				if readers, ok := got[typ]; ok {
					got[typ] = append(readers, name)
				}
			}
		})
	}
	for _, s := range ownedSelections {
		typ := reflect.TypeOf(s.object)
		want := slices.Sorted(maps.Keys(s.readers))
		slices.Sort(got[typ])
		if !slices.Equal(got[typ], want) {
			t.Errorf("partition controllers taking the %v informer: %v; the selector %q was checked against %v", typ, got[typ], s.selector, want)
		}
	}
}

// TestNarrowedKindsAreNotHeldEverywhere: the owned cache refuses to hold a
// narrowed kind in every namespace, so a kind the colocated singletons
// hold must not be narrowed (they would fail to start).
func TestNarrowedKindsAreNotHeldEverywhere(t *testing.T) {
	narrowed := ownedFieldSelectors()
	for _, kind := range heldEverywhere {
		if selector, ok := narrowed[reflect.TypeOf(kind.obj)]; ok {
			t.Errorf("%T is held everywhere for the colocated singletons and narrowed by %q", kind.obj, selector)
		}
	}
}
