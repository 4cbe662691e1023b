package controllers

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
