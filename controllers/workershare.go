package controllers

import (
	"fmt"
	"slices"

	ctrlconfig "k8s.io/kubernetes/pkg/controller/apis/config"
)

// WorkerSharing is --share-workers: whether the partition controllers'
// worker counts are divided among the fleet's replicas (shareWorkers).
type WorkerSharing string

const (
	ShareWorkersTrue  WorkerSharing = "true"
	ShareWorkersFalse WorkerSharing = "false"
	// ShareWorkersAuto shares them when the client limits are raised
	// above KCM's default QPS.
	ShareWorkersAuto WorkerSharing = "auto"
)

var workerSharings = []WorkerSharing{ShareWorkersAuto, ShareWorkersTrue, ShareWorkersFalse}

// Validate says whether w is one of the values.
func (w WorkerSharing) Validate() error {
	if !slices.Contains(workerSharings, w) {
		return fmt.Errorf("must be one of %v, got %q", workerSharings, w)
	}
	return nil
}

// Shares says whether the workers are shared, for controllers whose
// clients have qps against KCM's default defaultQPS. auto shares them
// only above the default. At or below it a replica's client rate limiter
// holds its workers back, so sharing saves few writes and slows the
// fleet; above it KCM's counts on every replica would write more status
// updates than KCM, and the apiserver, busy with them, closes watchers
// for falling behind.
func (w WorkerSharing) Shares(qps, defaultQPS float32) bool {
	switch w {
	case ShareWorkersTrue:
		return true
	case ShareWorkersFalse:
		return false
	}
	return qps > defaultQPS
}

// partitionWorkers points at each partition controller's worker count in
// KCM's configuration (its --concurrent-*-syncs flag). The partition
// controllers whose worker count is fixed in their code (disruption,
// taint-eviction, serviceaccount, root-ca publisher, PVC protection) are
// not here. TestEveryWorkerCountIsPlaced fails when KCM adds a count that
// is in neither this table nor singletonWorkers.
var partitionWorkers = map[string]func(*ctrlconfig.KubeControllerManagerConfiguration) *int32{
	"deployment-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.DeploymentController.ConcurrentDeploymentSyncs
	},
	"replicaset-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.ReplicaSetController.ConcurrentRSSyncs
	},
	"replicationcontroller-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.ReplicationController.ConcurrentRCSyncs
	},
	"statefulset-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.StatefulSetController.ConcurrentStatefulSetSyncs
	},
	"daemonset-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.DaemonSetController.ConcurrentDaemonSetSyncs
	},
	"job-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.JobController.ConcurrentJobSyncs
	},
	"cronjob-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.CronJobController.ConcurrentCronJobSyncs
	},
	"ttl-after-finished-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.TTLAfterFinishedController.ConcurrentTTLSyncs
	},
	"horizontal-pod-autoscaler-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.HPAController.ConcurrentHorizontalPodAutoscalerSyncs
	},
	"endpoints-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.EndpointController.ConcurrentEndpointSyncs
	},
	"endpointslice-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.EndpointSliceController.ConcurrentServiceEndpointSyncs
	},
	"endpointslice-mirroring-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.EndpointSliceMirroringController.MirroringConcurrentServiceEndpointSyncs
	},
	"ephemeral-volume-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.EphemeralVolumeController.ConcurrentEphemeralVolumeSyncs
	},
	"serviceaccount-token-controller": func(c *ctrlconfig.KubeControllerManagerConfiguration) *int32 {
		return &c.SAController.ConcurrentSATokenSyncs
	},
}

// shareWorkers returns cfg with every partition controller's worker count
// divided among replicas, rounded up: the fleet runs, in total, about the
// workers KCM's flags give one KCM. A replica with a third of the
// namespaces and all of KCM's workers syncs each object as soon as it
// changes, where KCM's busier queue folds several changes into one sync,
// so KCM's counts on every replica write more updates than KCM does.
// Singleton controllers keep KCM's counts: one of each runs.
func shareWorkers(cfg ctrlconfig.KubeControllerManagerConfiguration, replicas int) ctrlconfig.KubeControllerManagerConfiguration {
	if replicas <= 1 {
		return cfg
	}
	for _, count := range partitionWorkers {
		if n := count(&cfg); *n > 0 {
			*n = (*n + int32(replicas) - 1) / int32(replicas)
		}
	}
	return cfg
}
