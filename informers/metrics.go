package informers

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	ownedNamespaces = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "owned_cache_namespaces",
		Help:           "Namespaces whose objects the replica's owned cache holds (those of the partitions it has loaded).",
		StabilityLevel: metrics.ALPHA,
	})
	namespacesHeldLate = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_namespaces_held_late_total",
		Help:           "Namespaces shown to the partition controllers before every informer of the owned cache held their first list, after waiting a minute for it (each is logged with the resources missing).",
		StabilityLevel: metrics.ALPHA,
	})
	namespacesTakenFromCreation = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_namespaces_taken_from_creation_total",
		Help:           "Namespaces created in a loaded partition that a selected watch took from their creation version, with no list, per resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	ownedPartitions = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "owned_cache_partitions",
		Help:           "Partitions loaded into the replica's owned cache.",
		StabilityLevel: metrics.ALPHA,
	})
	ownedSources = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "owned_cache_sources",
		Help:           "Sources of the owned cache per resource: its one cluster-wide watch, and the lists of namespaces being loaded into it.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	ownedWideSources = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "owned_cache_wide_sources",
		Help:           "Owned cache sources per resource that watch every namespace and keep only the replica's: 1 once started.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	selectorIgnored = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_selector_ignored_total",
		Help:           "Sharded list pages the apiserver answered without applying the shard selector (the client filtered them).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	sourceRelists = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_source_relists_total",
		Help:           "Sources of the owned cache that listed their namespaces again because their resourceVersion expired.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	watchesClosedEarly = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_watches_closed_early_total",
		Help:           "Watches of the owned cache that kube-apiserver ended before their timeout (most often for falling behind); the source waits before resuming.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	eventsSkipped = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_events_skipped_total",
		Help:           "Events of the owned cache's cluster-wide watch dropped before decoding, their namespace not loaded by this replica.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	selectedWatchOpens = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_selected_watch_opens_total",
		Help:           "Watches the owned cache opened with a shard selector naming its namespaces: at the first watch, after every close, and when namespaces join it.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	catchUpWaits = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "fleet", Name: "owned_cache_catch_up_seconds",
		Help:           "How long a gain waited for the owned cache to hold, per resource, namespaces it gained without listing them (held everywhere for a singleton) at least as the server had them after the gain.",
		Buckets:        []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	catchUpRelists = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "fleet", Name: "owned_cache_catch_up_relists_total",
		Help:           "Sources of the owned cache made to list again because a gain found them behind the server for 5 s.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	sharedInformers = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "fleet", Name: "shared_informers",
		Help:           "Cluster-wide informers (typed and metadata-only) the replica runs for its pieces; one stops when the last piece using it stops.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(ownedNamespaces, namespacesHeldLate, namespacesTakenFromCreation, ownedPartitions, ownedSources, ownedWideSources, selectorIgnored, sourceRelists, watchesClosedEarly, eventsSkipped, selectedWatchOpens, catchUpWaits, catchUpRelists, sharedInformers)
	})
}
