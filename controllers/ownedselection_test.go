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

// TestOwnedSelectionReaders: the partition controllers taking a
// narrowed kind must be exactly that selection's readers, whose reads
// were checked against the selector. A new reader (a Kubernetes upgrade)
// fails here until someone reads it.
func TestOwnedSelectionReaders(t *testing.T) {
	taken := partitionControllerKinds(t)
	// Built by hand (newTokensController) with the Secret informer.
	secrets := reflect.TypeOf(&corev1.Secret{})
	taken[secrets] = append(taken[secrets], names.ServiceAccountTokenController)
	for _, s := range ownedSelections {
		typ := reflect.TypeOf(s.object)
		want := slices.Sorted(maps.Keys(s.readers))
		got := slices.Sorted(slices.Values(taken[typ]))
		if !slices.Equal(got, want) {
			t.Errorf("partition controllers taking the %v informer: %v; the selector %q was checked against %v", typ, got, s.selector, want)
		}
	}
}

// TestHeldEverywhereArePartitionKinds: the kinds held in every namespace
// for the garbage collector and resourcequota are the namespaced kinds
// the partition controllers read from the owned cache, but the narrowed
// ones: a kind left out is watched twice on the replica running them
// (the owned cache's watch, and a cluster-wide metadata watch), one too
// many caches every object in full there with no watch saved.
func TestHeldEverywhereArePartitionKinds(t *testing.T) {
	want := map[reflect.Type]bool{}
	for typ := range partitionControllerKinds(t) {
		if _, narrowed := ownedFieldSelectors()[typ]; narrowed || !namespacedKind(typ) {
			continue
		}
		want[typ] = true
	}
	got := map[reflect.Type]bool{}
	for _, kind := range heldEverywhere {
		got[reflect.TypeOf(kind.obj)] = true
	}
	for typ := range want {
		if !got[typ] {
			t.Errorf("the partition controllers read %v from the owned cache, and it is not held everywhere for the garbage collector and resourcequota", typ)
		}
	}
	for typ := range got {
		if !want[typ] {
			t.Errorf("%v is held everywhere, and no partition controller reads it", typ)
		}
	}
}

// namespacedKind says whether the owned cache holds objects of typ: the
// cluster-scoped kinds the partition controllers read (Nodes,
// Namespaces) come from the pool.
func namespacedKind(typ reflect.Type) bool {
	switch typ {
	case reflect.TypeOf(&corev1.Node{}), reflect.TypeOf(&corev1.Namespace{}):
		return false
	}
	return true
}

// partitionControllerKinds builds every partition controller through its
// upstream descriptor, alone, and lists the typed informers each took.
func partitionControllerKinds(t *testing.T) map[reflect.Type][]string {
	t.Helper()
	got := map[reflect.Type][]string{}
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
				got[typ] = append(got[typ], name)
			}
		})
	}
	return got
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
