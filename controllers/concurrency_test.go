package controllers

import (
	"testing"

	kubectrlmgrconfig "k8s.io/kubernetes/pkg/controller/apis/config"
)

func TestPieceConcurrency(t *testing.T) {
	var c kubectrlmgrconfig.KubeControllerManagerConfiguration
	c.DeploymentController.ConcurrentDeploymentSyncs = 5
	c.EndpointSliceController.ConcurrentServiceEndpointSyncs = 130
	c.EndpointSliceMirroringController.MirroringConcurrentServiceEndpointSyncs = 64
	c.GarbageCollectorController.ConcurrentGCSyncs = 0
	c.DeploymentController.ConcurrentDeploymentSyncs = 5
	got := pieceConcurrency(c, 64)
	for _, tc := range []struct {
		name      string
		got, want int32
	}{
		{"5 workers over 64 partitions: one each", got.DeploymentController.ConcurrentDeploymentSyncs, 1},
		{"130 over 64: three each", got.EndpointSliceController.ConcurrentServiceEndpointSyncs, 3},
		{"a name with a prefix", got.EndpointSliceMirroringController.MirroringConcurrentServiceEndpointSyncs, 1},
		{"0 stays 0 (the controller's own default)", got.GarbageCollectorController.ConcurrentGCSyncs, 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if c.DeploymentController.ConcurrentDeploymentSyncs != 5 {
		t.Error("the replica's own configuration was changed")
	}
}
