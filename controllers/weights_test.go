package controllers

import (
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// TestPodsToCome: the Pods each kind of workload wants and does not have
// available, as the keeper weighs a young namespace's work to come.
func TestPodsToCome(t *testing.T) {
	owned := metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", Controller: ptr.To(true)}}}
	done := func(c batchv1.JobConditionType) batchv1.JobStatus {
		return batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: c, Status: corev1.ConditionTrue}}}
	}
	for _, tc := range []struct {
		name string
		obj  any
		want uint64
	}{
		{"a new Deployment", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10)}}, 10},
		{"a Deployment part available", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10)}, Status: appsv1.DeploymentStatus{AvailableReplicas: 4}}, 6},
		{"a Deployment with more available than wanted (scaling down)", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}, Status: appsv1.DeploymentStatus{AvailableReplicas: 5}}, 0},
		{"a Deployment of unset replicas", &appsv1.Deployment{}, 1},
		{"a Deployment's ReplicaSet: its Deployment counts", &appsv1.ReplicaSet{ObjectMeta: owned, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](10)}}, 0},
		{"a bare ReplicaSet", &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](3)}, Status: appsv1.ReplicaSetStatus{AvailableReplicas: 1}}, 2},
		{"a StatefulSet", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}}, 3},
		{"a Job of completions", &batchv1.Job{Spec: batchv1.JobSpec{Completions: ptr.To[int32](5), Parallelism: ptr.To[int32](2)}, Status: batchv1.JobStatus{Succeeded: 1}}, 4},
		{"a Job of parallelism only", &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](3)}}, 3},
		{"a completed Job", &batchv1.Job{Spec: batchv1.JobSpec{Completions: ptr.To[int32](5)}, Status: done(batchv1.JobComplete)}, 0},
		{"a failed Job", &batchv1.Job{Spec: batchv1.JobSpec{Completions: ptr.To[int32](5)}, Status: done(batchv1.JobFailed)}, 0},
		{"a ConfigMap", &corev1.ConfigMap{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podsToCome(tc.obj); got != tc.want {
				t.Errorf("podsToCome = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestYoungWork: a young namespace's work to come sums its workloads'
// Pods to come; one whose workloads are all available is published as 0
// (done), and one with no workload in the cache is left out (a partition
// still loading holds none yet), whatever else it holds.
func TestYoungWork(t *testing.T) {
	deployment := func(ns string, want, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(want)}, Status: appsv1.DeploymentStatus{AvailableReplicas: available}}
	}
	held := map[string][]any{
		"busy":    {deployment("busy", 10, 2), deployment("busy", 10, 0)},
		"done":    {deployment("done", 10, 10)},
		"loading": nil,
		"jobs":    {&batchv1.Job{Spec: batchv1.JobSpec{Completions: ptr.To[int32](3)}}},
		"configs": nil,
		"mixed":   {deployment("mixed", 4, 1)},
	}
	jobs := map[string][]any{"jobs": held["jobs"], "mixed": {&batchv1.Job{Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2)}}}}
	itemsOf := func(kind runtime.Object, namespaces []string) map[string][]any {
		out := map[string][]any{}
		for _, ns := range namespaces {
			switch kind.(type) {
			case *appsv1.Deployment:
				for _, item := range held[ns] {
					if _, ok := item.(*appsv1.Deployment); ok {
						out[ns] = append(out[ns], item)
					}
				}
			case *batchv1.Job:
				out[ns] = jobs[ns]
			default:
				out[ns] = nil
			}
		}
		return out
	}
	got := youngWork(itemsOf, []string{"busy", "done", "loading", "jobs", "configs", "mixed"})
	want := map[string]uint64{"busy": 18, "done": 0, "jobs": 3, "mixed": 5}
	if !maps.Equal(got, want) {
		t.Errorf("youngWork = %v, want %v", got, want)
	}
}
