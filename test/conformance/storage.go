package main

import (
	"context"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// featureGates are the gates both sides run with beyond their defaults,
// on the apiserver and on the controller manager, so that upstream's tests
// of a controller behind one run: MaxUnavailableStatefulSet (beta, off by
// default in 1.36) drops the field on the apiserver and is read by the
// StatefulSet controller.
const featureGates = "MaxUnavailableStatefulSet=true"

// controllerManagerArgs are the flags KCM and every fleet replica get
// beyond localcluster's: the gates above, and the host-path provisioner of
// the persistentvolume-binder controller, as upstream's local-up-cluster
// runs it, so that tests asking the default StorageClass for a volume get
// one (a folder under /tmp of the controller manager's machine, which the
// real node shares).
var controllerManagerArgs = []string{"--feature-gates=" + featureGates, "--enable-hostpath-provisioner=true"}

// createDefaultStorageClass creates the default StorageClass of
// local-up-cluster (cluster/addons/storage-class/local/default.yaml):
// upstream's StatefulSet tests with volume claims skip without one.
func createDefaultStorageClass(ctx context.Context, cluster *localcluster.Cluster) error {
	client, err := cluster.Client()
	if err != nil {
		return err
	}
	class := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "standard",
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "kubernetes.io/host-path",
	}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the default StorageClass: %w", err)
	}
	return nil
}
