package controllers

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
)

// heldKind is a kind the owned cache holds in every namespace for the
// colocated singletons that read it cluster-wide, while the partition
// controllers read it in their namespaces: one informer, one watch,
// serves both on the replica running them.
type heldKind struct {
	obj      runtime.Object
	resource schema.GroupResource
	// everyColocated: every colocated singleton holds it; else those
	// that watch every resource (NeedsMetadataInformers) and readers.
	everyColocated bool
	readers        []string
}

// heldEverywhere are the kinds the colocated singletons read in every
// namespace and the partition controllers read in theirs.
//
// Every Pod and PVC, typed, for the singletons that cache them
// (NeedsClusterWidePods): from the pool's cluster-wide informers, the
// replica running them cached its partitions' Pods twice.
//
// The others for the garbage collector and resourcequota, which watch
// every resource (NeedsMetadataInformers), and for the colocated
// singletons named as reading them (node-lifecycle's DaemonSets): each
// is typed, as KCM's typed-first factory gives it, rather than from the
// pool, whose cluster-wide watch would be the replica's second of the
// kind, beside the owned cache's. TestHeldEverywhereArePartitionKinds
// keeps the list equal to the partition controllers' kinds but the
// narrowed ones (ownedSelections), which stay metadata, a selection of
// their own; TestInformersLikeKubeControllerManager finds a reader
// missing.
var heldEverywhere = []heldKind{
	{&corev1.Pod{}, schema.GroupResource{Resource: "pods"}, true, nil},
	{&corev1.PersistentVolumeClaim{}, schema.GroupResource{Resource: "persistentvolumeclaims"}, true, nil},
	{&appsv1.ControllerRevision{}, schema.GroupResource{Group: "apps", Resource: "controllerrevisions"}, false, nil},
	{&appsv1.DaemonSet{}, schema.GroupResource{Group: "apps", Resource: "daemonsets"}, false, []string{names.NodeLifecycleController}},
	{&appsv1.Deployment{}, schema.GroupResource{Group: "apps", Resource: "deployments"}, false, nil},
	{&appsv1.ReplicaSet{}, schema.GroupResource{Group: "apps", Resource: "replicasets"}, false, nil},
	{&appsv1.StatefulSet{}, schema.GroupResource{Group: "apps", Resource: "statefulsets"}, false, nil},
	{&autoscalingv2.HorizontalPodAutoscaler{}, schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}, false, nil},
	{&batchv1.CronJob{}, schema.GroupResource{Group: "batch", Resource: "cronjobs"}, false, nil},
	{&batchv1.Job{}, schema.GroupResource{Group: "batch", Resource: "jobs"}, false, nil},
	{&corev1.Endpoints{}, schema.GroupResource{Resource: "endpoints"}, false, nil},
	{&corev1.ReplicationController{}, schema.GroupResource{Resource: "replicationcontrollers"}, false, nil},
	{&corev1.Service{}, schema.GroupResource{Resource: "services"}, false, nil},
	{&corev1.ServiceAccount{}, schema.GroupResource{Resource: "serviceaccounts"}, false, nil},
	{&discoveryv1.EndpointSlice{}, schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, false, nil},
	{&policyv1.PodDisruptionBudget{}, schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, false, nil},
}

// heldFor are the kinds singleton name holds in every namespace: none
// but for a colocated singleton on a replica with an owned cache.
func (r *Runtime) heldFor(name string) []heldKind {
	entry := Catalog[name]
	if r.owned == nil || !entry.Has(NeedsClusterWidePods) {
		return nil
	}
	var kinds []heldKind
	for _, kind := range heldEverywhere {
		if kind.everyColocated || entry.Has(NeedsMetadataInformers) || slices.Contains(kind.readers, name) {
			kinds = append(kinds, kind)
		}
	}
	return kinds
}

// holdEverywhere makes the owned cache hold every namespace of the kinds
// singleton name reads cluster-wide (heldFor) and gives those informers,
// once each holds them. The kinds are held together, so that a singleton
// starting on a large cluster waits for their lists side by side, as
// KCM's informers list. Nil without an owned cache, or for other
// singletons.
func (r *Runtime) holdEverywhere(ctx context.Context, name string) (map[reflect.Type]cache.SharedIndexInformer, error) {
	kinds := r.heldFor(name)
	if len(kinds) == 0 {
		return nil, nil
	}
	r.owned.Start(r.sharedStop)
	var mu sync.Mutex
	held := map[reflect.Type]cache.SharedIndexInformer{}
	g, holdCtx := errgroup.WithContext(ctx)
	for _, kind := range kinds {
		g.Go(func() error {
			done := r.watchHold(holdCtx, name, kind.resource.String())
			informer, err := r.owned.HoldEverywhere(holdCtx, kind.obj)
			done()
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			held[reflect.TypeOf(kind.obj)] = informer
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		r.releaseEverywhere(held)
		return nil, err
	}
	return held, nil
}

// watchHold logs a singleton's hold of every namespace of resource once
// it has gone on for longer than a lease duration, with what the owned
// cache waits for: the singleton does not start until it ends. It
// returns what ends the watch.
func (r *Runtime) watchHold(ctx context.Context, name, resource string) (done func()) {
	if r.table.stuckAfter <= 0 {
		return func() {}
	}
	start := time.Now()
	timer := time.AfterFunc(r.table.stuckAfter, func() {
		var waits []string
		for _, w := range r.owned.Waiting() {
			waits = append(waits, w.String())
		}
		klog.FromContext(ctx).Error(nil, "A singleton's hold of every namespace has gone on for longer than a lease duration: the singleton does not start until it ends", "singleton", name, "resource", resource, "took", time.Since(start).Round(time.Second), "waitingFor", waits)
	})
	return func() { timer.Stop() }
}

// releaseEverywhere ends holdEverywhere, once the singleton's handlers
// are gone.
func (r *Runtime) releaseEverywhere(held map[reflect.Type]cache.SharedIndexInformer) {
	for _, kind := range heldEverywhere {
		if _, ok := held[reflect.TypeOf(kind.obj)]; ok {
			r.owned.ReleaseEverywhere(kind.obj)
		}
	}
}
