package controllers

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// weightInterval is how often the replica measures what its partitions
// hold. The weights reach its Lease with its next write (a renewal at
// the latest), and a placement by weight acts on them only once they
// have stayed uneven for far longer.
const weightInterval = 10 * time.Second

// youngInterval is how often the replica measures what its young
// namespaces hold: a renewal's period, so that the keeper deals a busy
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

// measureYoung hands publish what each young namespace (created within
// shard.YoungWindow) of the loaded partitions holds, Pods left out, every
// youngInterval until ctx ends. A namespace's Pods come as fast as its
// replica's controllers make them, so they would weigh the replica's
// progress; its Deployments, Jobs and the rest are the work it brings.
func (r *Runtime) measureYoung(ctx context.Context, publish func(map[string]uint64)) {
	wait.UntilWithContext(ctx, func(context.Context) {
		young := r.NewNamespaces(shard.YoungWindow).Fresh
		publish(r.owned.NamespaceObjects(slices.Collect(maps.Keys(young)), &corev1.Pod{}))
	}, youngInterval)
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
