//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestNamespaceDeletionLikeKubeControllerManager deletes a namespace
// holding 200 objects (a Deployment's ReplicaSet and pods, ConfigMaps,
// Secrets, Services) under upstream kube-controller-manager and under a
// fleet of one, each on a fresh control plane, checks that both namespaces
// and everything in them are gone, and prints both times. Speed is judged
// by the benchmark (`make bench`, workload (f)), not here.
func TestNamespaceDeletionLikeKubeControllerManager(t *testing.T) {
	const ns = "doomed"
	const pods, configMaps, secrets, services = 20, 100, 59, 20 // + the ReplicaSet = 200
	kcm, fleet := bothSides(t, laneLight, func(t *testing.T, fleet bool) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cluster, client := startKCMOrFleetOfOne(ctx, t, fleet, 1)
		defer cluster.Stop()
		must := func(_ any, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		createNamespace(ctx, t, client, ns)
		createDeployment(ctx, t, client, ns, "web", pods)
		for i := range configMaps {
			must(client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}))
		}
		for i := range secrets {
			must(client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i)}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}))
		}
		for i := range services {
			must(client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i)},
				Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
			}, metav1.CreateOptions{}))
		}
		waitDeploymentReady(ctx, t, client, ns, "web", pods, 3*time.Minute)
		before := countObjects(ctx, t, client, ns)
		if before < 200 {
			t.Fatalf("namespace holds %d objects before deletion, want at least 200", before)
		}

		start := time.Now()
		if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "namespace "+ns+" to be gone", 5*time.Minute, func() (bool, string) {
			_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if errors.IsNotFound(err) {
				return true, ""
			}
			return false, fmt.Sprintf("%d objects left (err %v)", countObjects(ctx, t, client, ns), err)
		})
		took := time.Since(start)
		// The apiserver lists a gone namespace's objects from storage: a
		// namespace whose finalizer was removed by hand goes on its
		// second delete and leaves its ConfigMaps listed, which this
		// counts.
		if left := countObjects(ctx, t, client, ns); left != 0 {
			t.Errorf("%d objects of namespace %s left after it was deleted", left, ns)
		}
		t.Logf("%d objects", before)
		return took
	})
	t.Logf("namespace of 200 objects deleted: kube-controller-manager %v, fleet of one %v (%.2fx)", kcm.Round(time.Millisecond), fleet.Round(time.Millisecond), fleet.Seconds()/kcm.Seconds())
}

// countObjects counts the workload's kinds in ns (the controllers' own
// objects included: the ReplicaSet, EndpointSlices, events are not).
func countObjects(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) int {
	t.Helper()
	n := 0
	add := func(items int, err error) {
		if err != nil {
			t.Fatalf("listing %s: %v", ns, err)
		}
		n += items
	}
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	add(len(cms.Items), err)
	ss, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	add(len(ss.Items), err)
	svcs, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	add(len(svcs.Items), err)
	ps, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	add(len(ps.Items), err)
	rss, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	add(len(rss.Items), err)
	ds, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	add(len(ds.Items), err)
	return n
}
