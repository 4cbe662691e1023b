package controllers

import (
	"reflect"
	"strings"
	"testing"

	ctrlconfig "k8s.io/kubernetes/pkg/controller/apis/config"
)

// singletonWorkers are the worker counts in KCM's configuration that
// belong to singleton controllers: one instance runs, with KCM's count.
var singletonWorkers = map[string]bool{
	"GarbageCollectorController.ConcurrentGCSyncs":                    true,
	"NamespaceController.ConcurrentNamespaceSyncs":                    true,
	"ResourceQuotaController.ConcurrentResourceQuotaSyncs":            true,
	"ValidatingAdmissionPolicyStatusController.ConcurrentPolicySyncs": true,
	"ResourceClaimController.ConcurrentSyncs":                         true,
	"DeviceTaintEvictionController.ConcurrentSyncs":                   true,
	"ServiceController.ConcurrentServiceSyncs":                        true,
}

// workerCounts lists every int32 field of KCM's configuration whose name
// says it is a worker count ("Concurrent"), by "Controller.Field".
func workerCounts(cfg *ctrlconfig.KubeControllerManagerConfiguration) map[string]*int32 {
	out := map[string]*int32{}
	top := reflect.ValueOf(cfg).Elem()
	for i := range top.NumField() {
		section := top.Field(i)
		if section.Kind() != reflect.Struct {
			continue
		}
		for j := range section.NumField() {
			f := section.Type().Field(j)
			if f.Type.Kind() == reflect.Int32 && strings.Contains(f.Name, "Concurrent") {
				out[top.Type().Field(i).Name+"."+f.Name] = section.Field(j).Addr().Interface().(*int32)
			}
		}
	}
	return out
}

// TestEveryWorkerCountIsPlaced fails when KCM's configuration has a worker
// count that is neither a partition controller's (shared among replicas)
// nor a singleton's, and when a shared count is not a partition
// controller's.
func TestEveryWorkerCountIsPlaced(t *testing.T) {
	var cfg ctrlconfig.KubeControllerManagerConfiguration
	counts := workerCounts(&cfg)
	if len(counts) < 15 {
		t.Fatalf("found %d worker counts in KCM's configuration; expected every --concurrent-*-syncs", len(counts))
	}
	shared := map[*int32]string{}
	for name, count := range partitionWorkers {
		if e, ok := Catalog[name]; !ok || e.Kind != Partition {
			t.Errorf("%s: worker count shared among replicas, but not a partition controller", name)
		}
		shared[count(&cfg)] = name
	}
	for field, p := range counts {
		_, isShared := shared[p]
		if isShared == singletonWorkers[field] {
			t.Errorf("%s: in both or neither of partitionWorkers and singletonWorkers", field)
		}
	}
}

func TestShareWorkers(t *testing.T) {
	tests := []struct {
		name       string
		kcm        int32
		replicas   int
		wantShared int32
	}{
		{name: "a fleet of one keeps KCM's count", kcm: 5, replicas: 1, wantShared: 5},
		{name: "three replicas: rounded up", kcm: 5, replicas: 3, wantShared: 2},
		{name: "five replicas: one each", kcm: 5, replicas: 5, wantShared: 1},
		{name: "never below one", kcm: 2, replicas: 5, wantShared: 1},
		{name: "an unset count stays unset", kcm: 0, replicas: 3, wantShared: 0},
		{name: "no replicas known: KCM's count", kcm: 5, replicas: 0, wantShared: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg ctrlconfig.KubeControllerManagerConfiguration
			for _, p := range workerCounts(&cfg) {
				*p = tt.kcm
			}
			got := shareWorkers(cfg, tt.replicas)
			for field, p := range workerCounts(&got) {
				want := tt.kcm
				if !singletonWorkers[field] {
					want = tt.wantShared
				}
				if *p != want {
					t.Errorf("%s = %d, want %d", field, *p, want)
				}
			}
			for _, p := range workerCounts(&cfg) {
				if *p != tt.kcm {
					t.Fatalf("shareWorkers changed its argument")
				}
			}
		})
	}
}

func TestWorkerSharing(t *testing.T) {
	const kcmDefault = 20
	tests := []struct {
		value   WorkerSharing
		qps     float32
		want    bool
		wantErr bool
	}{
		{value: ShareWorkersAuto, qps: kcmDefault, want: false},
		{value: ShareWorkersAuto, qps: 1000, want: true},
		{value: ShareWorkersAuto, qps: 5, want: false},
		{value: ShareWorkersTrue, qps: kcmDefault, want: true},
		{value: ShareWorkersFalse, qps: 1000, want: false},
		{value: "yes", wantErr: true},
		{value: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(string(tt.value), func(t *testing.T) {
			if err := tt.value.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got := tt.value.Shares(tt.qps, kcmDefault); got != tt.want {
				t.Errorf("Shares(%v, %v) = %v, want %v", tt.qps, kcmDefault, got, tt.want)
			}
		})
	}
}
