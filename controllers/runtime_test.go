package controllers

import (
	"slices"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/features"
)

// TestStorageVersionMigratorNotRunWithoutTheGraph: with its gate on, the
// storage-version-migrator would need the garbage collector's graph, which
// a piece of its own cannot have: it is not made a piece (with the gate
// off its constructor builds nothing and the piece stays, as in KCM).
func TestStorageVersionMigratorNotRunWithoutTheGraph(t *testing.T) {
	componentConfig, err := options.NewDefaultComponentConfig()
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{config: (&kcmconfig.Config{ComponentConfig: componentConfig}).Complete(), descriptors: Descriptors(), ctx: t.Context()}
	for _, gate := range []bool{false, true} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.StorageVersionMigrator, gate)
		if got := slices.Contains(r.Singletons(), names.StorageVersionMigratorController); got == gate {
			t.Errorf("gate %v: storage-version-migrator a piece: %v", gate, got)
		}
	}
}
