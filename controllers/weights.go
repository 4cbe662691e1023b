package controllers

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// weightInterval is how often the replica measures what its partitions
// hold. The weights reach its Lease with its next write (a renewal at
// the latest), and a placement by weight acts on them only once they
// have stayed uneven for far longer.
const weightInterval = 10 * time.Second

// youngInterval is how often the replica measures the work its young
// namespaces have still to come: a renewal's period, so that the keeper deals a busy
// new tenant's neighbours off its replica within seconds of its work
// arriving (shard's weightdeal.go).
const youngInterval = 2 * time.Second

var (
	partitionObjects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "partition_objects",
		Help:           "Objects the owned cache holds in each partition this replica has loaded: the partition's weight, published in the replica's Lease.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"partition"})
	replicaObjects = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "replica_objects",
		Help:           "Objects the owned cache holds in the partitions this replica has loaded; its share of the fleet's is this over the sum of every replica's.",
		StabilityLevel: metrics.ALPHA,
	})
)

// measureWeights hands publish what each loaded partition holds, every
// weightInterval until ctx ends, and records it on /metrics.
func (r *Runtime) measureWeights(ctx context.Context, publish func(map[int]uint64)) {
	wait.UntilWithContext(ctx, func(context.Context) {
		weights := r.owned.PartitionObjects()
		publish(weights)
		partitionObjects.Reset()
		var sum uint64
		for p, w := range weights {
			partitionObjects.WithLabelValues(strconv.Itoa(p)).Set(float64(w))
			sum += w
		}
		replicaObjects.Set(float64(sum))
	}, weightInterval)
}

// measureYoung hands publish the work each young namespace (created
// within shard.YoungWindow) of the loaded partitions has still to come
// (youngWork), every youngInterval until ctx ends.
func (r *Runtime) measureYoung(ctx context.Context, publish func(map[string]uint64)) {
	wait.UntilWithContext(ctx, func(context.Context) {
		young := r.NewNamespaces(shard.YoungWindow).Fresh
		publish(youngWork(r.owned.NamespaceItems, slices.Collect(maps.Keys(young))))
	}, youngInterval)
}

// workKinds are the kinds whose objects ask for Pods.
var workKinds = []runtime.Object{&appsv1.Deployment{}, &appsv1.ReplicaSet{}, &appsv1.StatefulSet{}, &batchv1.Job{}}

// youngWork is, for each of namespaces in a loaded partition whose
// workloads the cache holds (itemsOf: OwnedCache.NamespaceItems), the
// Pods they want and do not have available yet (podsToCome). That is the
// work a young namespace brings and its replica has not done: a tenant's
// replica that falls behind keeps it high, so the keeper deals the
// tenant's neighbours off it, and a namespace whose work is done counts
// for nothing, however new (shard's weightdeal.go). What a namespace
// holds would say neither: its ReplicaSets come as fast as its replica
// makes them, and a finished namespace holds the most. A namespace with
// no workload in the cache is left out, not published as done: a
// partition still loading holds none yet (bench (a) with five replicas:
// a namespace a deal had just moved read as finished, the deal counted it
// as nothing, and five of the 20 ended on one replica).
func youngWork(itemsOf func(runtime.Object, []string) map[string][]any, namespaces []string) map[string]uint64 {
	out := map[string]uint64{}
	for _, kind := range workKinds {
		for ns, items := range itemsOf(kind, namespaces) {
			if len(items) == 0 {
				continue
			}
			var pods uint64
			for _, item := range items {
				pods += podsToCome(item)
			}
			out[ns] += pods
		}
	}
	return out
}

// podsToCome is how many Pods obj wants and does not have available: a
// Deployment's, a StatefulSet's or a ReplicaSet's no controller owns
// (a Deployment's are its Deployment's) replicas short of available, a
// Job's completions (its parallelism if unset) short of succeeded until
// it has finished.
func podsToCome(obj any) uint64 {
	short := func(want *int32, have int32) uint64 {
		w := int32(1)
		if want != nil {
			w = *want
		}
		return uint64(max(0, w-have))
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return short(o.Spec.Replicas, o.Status.AvailableReplicas)
	case *appsv1.StatefulSet:
		return short(o.Spec.Replicas, o.Status.AvailableReplicas)
	case *appsv1.ReplicaSet:
		if metav1.GetControllerOf(o) != nil {
			return 0
		}
		return short(o.Spec.Replicas, o.Status.AvailableReplicas)
	case *batchv1.Job:
		for _, c := range o.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				return 0
			}
		}
		want := o.Spec.Completions
		if want == nil {
			want = o.Spec.Parallelism
		}
		return short(want, o.Status.Succeeded)
	}
	return 0
}

// startMeasuring starts measuring what the owned cache holds for the
// publishers cfg sets (the modes without an owned cache measure nothing).
func (r *Runtime) startMeasuring(ctx context.Context, cfg RuntimeConfig) {
	if r.owned == nil {
		return
	}
	if cfg.Weights != nil {
		go r.measureWeights(ctx, cfg.Weights)
	}
	if cfg.Young != nil {
		go r.measureYoung(ctx, cfg.Young)
	}
}
