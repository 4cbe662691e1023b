//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// firstMomentTries is how many namespaces each side creates per object
// (20 with the long tag: make test-long).
var firstMomentTries = 10

// firstMomentObject is an object a controller writes into every new
// namespace and writes again when it is deleted.
type firstMomentObject struct {
	what   string
	get    func(ctx context.Context, client kubernetes.Interface, ns string) error
	delete func(ctx context.Context, client kubernetes.Interface, ns string) error
}

var firstMomentObjects = []firstMomentObject{
	{
		what: "ConfigMap kube-root-ca.crt (root-ca-certificate-publisher)",
		get: func(ctx context.Context, client kubernetes.Interface, ns string) error {
			_, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err
		},
		delete: func(ctx context.Context, client kubernetes.Interface, ns string) error {
			return client.CoreV1().ConfigMaps(ns).Delete(ctx, "kube-root-ca.crt", metav1.DeleteOptions{})
		},
	},
	{
		what: "ServiceAccount default (serviceaccount)",
		get: func(ctx context.Context, client kubernetes.Interface, ns string) error {
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err
		},
		delete: func(ctx context.Context, client kubernetes.Interface, ns string) error {
			return client.CoreV1().ServiceAccounts(ns).Delete(ctx, "default", metav1.DeleteOptions{})
		},
	},
}

// TestNamespaceFirstMoments is upstream's conformance test "ServiceAccounts
// should guarantee kube-root-ca.crt exist in any namespace", at no delay
// and 10 times per side (20 in make test-long): a namespace is created, the object a controller
// writes into it is deleted the moment it appears (polled every 5 ms),
// and it must be written again, under a fleet of one and of three as
// under kube-controller-manager. The same for the default
// ServiceAccount. The fleet used to show its partition controllers a new
// namespace before the owned cache held it: the root-CA publisher created
// the ConfigMap, the deletion came before the namespace's first list, and
// neither reached the publisher, so it never wrote it again.
func TestNamespaceFirstMoments(t *testing.T) {
	sidesAtOnce(t, laneLight, []string{"kube-controller-manager", "fleet of one", "fleet of three"}, func(t *testing.T, side string) struct{} {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		opts := localcluster.Options{KubeControllerManager: side == "kube-controller-manager"}
		cluster := startClusterIn(ctx, t, side, opts)
		client, err := cluster.Client()
		if err != nil {
			t.Fatal(err)
		}
		var replicas []string
		switch side {
		case "fleet of one":
			replicas = []string{"fcm-0"}
		case "fleet of three":
			replicas = []string{"fcm-0", "fcm-1", "fcm-2"}
		}
		for _, r := range replicas {
			if _, _, err := cluster.StartFleetReplica(ctx, filepath.Join(binDir(t), "fleet-controller-manager"), r); err != nil {
				t.Fatal(err)
			}
		}
		if len(replicas) > 0 {
			waitFleetRunning(ctx, t, client, replicas)
		}
		for _, o := range firstMomentObjects {
			var gone []string
			var appeared []time.Duration
			var slowest string
			for i := range firstMomentTries {
				ns := fmt.Sprintf("first-%s-%d", map[bool]string{true: "ca", false: "sa"}[o.what[0] == 'C'], i)
				if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				created := time.Now()
				if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					return o.get(ctx, client, ns) == nil, nil
				}); err != nil {
					t.Fatalf("%s never appeared in namespace %s: %v", o.what, ns, err)
				}
				took := time.Since(created)
				if len(appeared) == 0 || took > slices.Max(appeared) {
					slowest = ns
				}
				appeared = append(appeared, took)
				if err := o.delete(ctx, client, ns); err != nil {
					t.Fatalf("deleting %s in %s: %v", o.what, ns, err)
				}
				gone = append(gone, ns)
			}
			// Written again within a lease's time; the fleet's resync
			// (12-24 h) would be far later.
			var missing []string
			deadline := time.Now().Add(30 * time.Second)
			for _, ns := range gone {
				err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, max(time.Until(deadline), time.Second), true, func(ctx context.Context) (bool, error) {
					err := o.get(ctx, client, ns)
					if err != nil && !apierrors.IsNotFound(err) {
						return false, err
					}
					return err == nil, nil
				})
				if err != nil {
					missing = append(missing, ns)
				}
			}
			slices.Sort(appeared)
			t.Logf("%s, %s: deleted as it appeared (after its namespace: median %v, max %v in %s) in %d namespaces; written again in %d", side, o.what,
				appeared[len(appeared)/2].Round(time.Millisecond), appeared[len(appeared)-1].Round(time.Millisecond), slowest, len(gone), len(gone)-len(missing))
			if len(missing) > 0 {
				t.Errorf("%s deleted the moment it appeared was never written again in %d of %d namespaces: %v", o.what, len(missing), len(gone), missing)
			}
		}
		return struct{}{}
	})
}
