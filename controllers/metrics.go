package controllers

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	informerSync = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "fleet", Name: "piece_informer_sync_duration_seconds",
		Help:           "From starting a piece's informers to all of them synced, by piece kind (partition, or the singleton's controller).",
		Buckets:        []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		StabilityLevel: metrics.ALPHA,
	}, []string{"piece_kind"})
	partitionsLoading = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "partitions_loading",
		Help:           "Partitions of the load into the owned cache in progress (their controllers do not serve them until it ends); 0 when none.",
		StabilityLevel: metrics.ALPHA,
	})
	partitionLoadSeconds = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "partition_load_seconds",
		Help:           "How long the load of partitions into the owned cache in progress has gone on; 0 when none.",
		StabilityLevel: metrics.ALPHA,
	})
	partitionLoadsStuck = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "partition_loads_stuck",
		Help:           "1 while the load of partitions in progress has gone on for longer than a lease duration (/debug/fleet/cache says what it waits for), else 0.",
		StabilityLevel: metrics.ALPHA,
	})
	memberInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "member_info",
		Help:           "1, labelled with this replica's identity and the informer mode of its partition pieces.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"identity", "informer_mode"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(informerSync, partitionsLoading, partitionLoadSeconds, partitionLoadsStuck, memberInfo, partitionObjects, replicaObjects, refusalEventsDropped)
	})
}
