//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// repoPath is a path in this repository (tests run in test/e2e).
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestDeployManifests: every kustomize overlay in deploy/ is accepted by a
// real apiserver (server-side dry run, with the Prometheus Operator CRDs
// installed), and a replica running with exactly the ServiceAccount and
// RBAC of deploy/base does its work while a write outside that RBAC is
// refused.
func TestDeployManifests(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 2})
	admin, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlAsAdmin(ctx, t, cluster)
	for _, crd := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		kubectl("apply", "--server-side", "-f", filepath.Join(binDir(t), "crds", crd))
	}
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	for _, overlay := range []string{"deployment", "statefulset", "monitoring"} {
		out := kubectl("apply", "--dry-run=server", "-k", repoPath(t, "deploy/"+overlay))
		t.Logf("deploy/%s (server dry run):\n%s", overlay, strings.TrimSpace(out))
	}

	// The RBAC for real, and a replica with nothing but that identity.
	kubectl("apply", "-k", repoPath(t, "deploy/base"))
	token := serviceAccountToken(ctx, t, admin, "kube-system", "fleet-controller-manager")
	kubeconfig, err := cluster.TokenKubeconfig("fleet-sa", token)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	replica, port, err := cluster.StartFleetReplicaAs(ctx, bin, "fleet-sa-0", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	waitFleetRunning(ctx, t, admin, []string{"fleet-sa-0"})
	for i := range 3 {
		ns := fmt.Sprintf("rbac-%d", i)
		createNamespace(ctx, t, admin, ns)
		createDeployment(ctx, t, admin, ns, "web", 2)
	}
	for i := range 3 {
		waitDeploymentReady(ctx, t, admin, fmt.Sprintf("rbac-%d", i), "web", 2, 3*time.Minute)
	}
	// Its secure port authenticates and authorizes through the apiserver
	// with the same identity (auth-delegator, authentication-reader).
	httpClient, err := cluster.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/metrics for the admin through delegated authorization: HTTP %d", resp.StatusCode)
	}
	log, _ := os.ReadFile(replica.LogPath)
	if n := strings.Count(string(log), "is forbidden"); n > 0 {
		t.Errorf("the replica was refused %d requests with its RBAC; first:\n%s", n, firstLineWith(string(log), "is forbidden"))
	}

	// Writes its RBAC does not grant are refused.
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asFleet, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	_, err = asFleet.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "fleet-controller-manager", Namespace: "kube-system"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("binding itself to cluster-admin: got %v, want Forbidden", err)
	}
	if _, err := admin.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := asFleet.CoordinationV1().Leases("default").Delete(ctx, "someone-else", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting a Lease outside the fleet namespace: got %v, want Forbidden", err)
	}
}

func firstLineWith(text, substr string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}
