//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// workloadNamespaces: enough that each of three replicas runs some of
// them (the test asserts it), few enough for a 2-core machine.
const workloadNamespaces = 20

// TestFleetWorkload runs three replicas of the real controllers and brings a
// workload in many namespaces to its end state: Deployments available, Jobs
// complete, a StatefulSet and a DaemonSet ready, EndpointSlices populated,
// default ServiceAccounts and kube-root-ca.crt everywhere, garbage collection
// of a deleted Deployment, and a namespace deletion. From the audit log it
// checks that, in steady state, each namespace was written by one replica
// per controller. It runs once per informer mode.
func TestFleetWorkload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		// sharing is how many of the 3 replicas must write in the workload's
		// namespaces.
		sharing int
		args    []string
	}{
		{"sharded-watch", 3, []string{"--informer-mode=sharded-watch"}},
		{"namespace-watch", 3, []string{"--informer-mode=namespace-watch"}},
		{"filtered-watch", 3, []string{"--informer-mode=filtered-watch"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			inLane(t, laneHeavy)
			testFleetWorkload(t, tc.sharing, tc.args...)
		})
	}
}

func testFleetWorkload(t *testing.T, minSharing int, replicaArgs ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 3, KwokPodParallelism: 32})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	replicas := []string{"fcm-0", "fcm-1", "fcm-2"}
	ports := map[string]int{}
	// Placed by count, no partition moves while the workload runs, so
	// each namespace's writes come from one replica (checkSingleWriter).
	// Placed by weight, the keeper deals the new namespaces as they
	// appear, each deal a handover from a replica that may have written
	// already: the chaos soak and TestRollingUpgradeAndRollback judge those
	// writes against their writers' runs.
	replicaArgs = append([]string{"--placement-by-weight=false"}, replicaArgs...)
	for _, r := range replicas {
		if _, ports[r], err = cluster.StartFleetReplica(ctx, bin, r, replicaArgs...); err != nil {
			t.Fatal(err)
		}
	}
	settled := waitFleetRunning(ctx, t, client, replicas)
	t.Logf("3 replicas own every piece %v after start", settled.Round(time.Millisecond))
	steadyFrom := time.Now()

	start := time.Now()
	var namespaces []string
	for i := range workloadNamespaces {
		ns := fmt.Sprintf("work-%02d", i)
		namespaces = append(namespaces, ns)
		createWorkload(ctx, t, client, ns)
	}
	for _, ns := range namespaces {
		waitWorkload(ctx, t, client, ns)
	}
	t.Logf("%d namespaces converged in %v", len(namespaces), time.Since(start).Round(time.Millisecond))

	// Garbage collection: the Deployment's ReplicaSets and Pods follow it.
	ns := namespaces[0]
	if err := client.AppsV1().Deployments(ns).Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "garbage collection of web-0's ReplicaSets and Pods", 3*time.Minute, func() (bool, string) {
		// A failed list is not an empty one.
		rs, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web-0"})
		if err != nil {
			return false, err.Error()
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web-0"})
		if err != nil {
			return false, err.Error()
		}
		return len(rs.Items) == 0 && len(pods.Items) == 0, fmt.Sprintf("%d replicasets, %d pods left", len(rs.Items), len(pods.Items))
	})
	// Namespace deletion finishes.
	gone := namespaces[1]
	if err := client.CoreV1().Namespaces().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "deletion of namespace "+gone, 3*time.Minute, func() (bool, string) {
		_, err := client.CoreV1().Namespaces().Get(ctx, gone, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	checkSingleWriter(t, cluster.AuditLog, steadyFrom, minSharing)
	checkServing(t, cluster, ports)
}

// checkServing: every replica is ready, and the garbage collector's debug
// graph is served by exactly the replica that runs it.
func checkServing(t *testing.T, cluster *localcluster.Cluster, ports map[string]int) {
	t.Helper()
	httpClient, err := cluster.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	get := func(port int, path string) int {
		resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s on port %d: %v", path, port, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	graphs := 0
	for name, port := range ports {
		if code := get(port, "/readyz"); code != 200 {
			t.Errorf("%s /readyz: %d", name, code)
		}
		// KCM's effective configuration, under KCM's configz name.
		resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d/configz", port))
		if err != nil {
			t.Fatalf("GET /configz on %s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"kubecontrollermanager.config.k8s.io"`) || !strings.Contains(string(body), `"ConcurrentNamespaceSyncs":10`) {
			t.Errorf("%s /configz lacks KCM's component config: %.300s", name, body)
		}
		switch code := get(port, "/debug/controllers/garbage-collector-controller/graph"); code {
		case 200:
			graphs++
		case 404:
		default:
			t.Errorf("%s garbage collector graph: HTTP %d", name, code)
		}
	}
	if graphs != 1 {
		t.Errorf("the garbage collector's graph is served by %d replicas, want exactly 1", graphs)
	}
	t.Logf("/readyz checked on %d replicas; the garbage collector's graph served by %d", len(ports), graphs)
}

// waitFleetRunning waits until every replica has joined and together they
// run every piece they publish.
func waitFleetRunning(ctx context.Context, t *testing.T, client kubernetes.Interface, replicas []string) time.Duration {
	t.Helper()
	start := time.Now()
	poll(ctx, t, "the fleet to settle", 4*time.Minute, func() (bool, string) {
		settled, why, err := localcluster.FleetSettled(ctx, client, len(replicas))
		if err != nil {
			return false, err.Error()
		}
		return settled, why
	})
	return time.Since(start)
}

func createWorkload(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	createNamespace(ctx, t, client, ns)
	for i := range 5 {
		createDeployment(ctx, t, client, ns, fmt.Sprintf("web-%d", i), 10)
	}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}}
	for i := range 2 {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i), Namespace: ns},
			Spec: batchv1.JobSpec{
				Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](2),
				Template: corev1.PodTemplateSpec{Spec: func() corev1.PodSpec {
					s := *podSpec.DeepCopy()
					s.RestartPolicy = corev1.RestartPolicyNever
					return s
				}()},
			},
		}
		if _, err := client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}
	if _, err := client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dsLabels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: dsLabels}, Spec: podSpec},
		},
	}
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web-1"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitWorkload(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	poll(ctx, t, "workload in "+ns, 10*time.Minute, func() (bool, string) {
		deps, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(deps.Items) != 5 {
			return false, fmt.Sprintf("%d deployments, want 5", len(deps.Items))
		}
		for _, d := range deps.Items {
			if d.Status.AvailableReplicas != 10 {
				return false, fmt.Sprintf("deployment %s: %d available", d.Name, d.Status.AvailableReplicas)
			}
		}
		jobs, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(jobs.Items) != 2 {
			return false, fmt.Sprintf("%d jobs, want 2", len(jobs.Items))
		}
		for _, j := range jobs.Items {
			if j.Status.Succeeded != 2 {
				return false, fmt.Sprintf("job %s: %d succeeded", j.Name, j.Status.Succeeded)
			}
		}
		sts, err := client.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil || sts.Status.ReadyReplicas != 2 {
			return false, "statefulset not ready"
		}
		ds, err := client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil || ds.Status.NumberReady != 3 {
			return false, "daemonset not ready"
		}
		slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return false, err.Error()
		}
		endpoints := 0
		for _, s := range slices.Items {
			endpoints += len(s.Endpoints)
		}
		if endpoints != 10 {
			return false, fmt.Sprintf("%d endpoints in slices of service web", endpoints)
		}
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, "no default service account"
		}
		if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, "no kube-root-ca.crt"
		}
		return true, ""
	})
}

// checkSingleWriter asserts from the audit log that after since, for every
// namespace and every controller client, writes came from one replica, and
// that the workload namespaces' writes came from at least minReplicas
// replicas (the work is shared, not all on one).
func checkSingleWriter(t *testing.T, auditLog string, since time.Time, minReplicas int) {
	t.Helper()
	writers := map[string]map[string]bool{} // namespace/client -> replicas
	sharing := map[string]bool{}            // replicas that wrote in work-* namespaces
	total := 0
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || e.ObjectRef.Namespace == "" || e.StageTimestamp.Before(since) {
			return
		}
		a, ok := parseFleetAgent(e.UserAgent)
		if !ok || a.piece == "" {
			// The replicas' own clients: each writes its Lease and
			// creates the controllers' ServiceAccounts it lacks.
			return
		}
		replica, clientName := a.replica, a.piece+"/"+a.client
		key := e.ObjectRef.Namespace + "/" + clientName
		if writers[key] == nil {
			writers[key] = map[string]bool{}
		}
		writers[key][replica] = true
		if strings.HasPrefix(e.ObjectRef.Namespace, "work-") {
			sharing[replica] = true
		}
		total++
	})
	if total == 0 {
		t.Fatal("no fleet writes in the audit log")
	}
	var bad []string
	for key, replicas := range writers {
		if len(replicas) > 1 {
			var names []string
			for r := range replicas {
				names = append(names, r)
			}
			sort.Strings(names)
			bad = append(bad, fmt.Sprintf("%s by %v", key, names))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("writes from more than one replica in steady state: %v", bad)
	}
	if len(sharing) < minReplicas {
		t.Errorf("the workload's namespaces were written by %d replicas, want at least %d", len(sharing), minReplicas)
	}
	t.Logf("audit: %d namespaced writes by the fleet in steady state, %d namespace/controller pairs, each from one replica; the workload's namespaces written by %d replicas", total, len(writers), len(sharing))
}

// startCluster starts a local control plane that is stopped when the test
// ends; if the test failed, the fleet replicas' protocol log lines are
// printed first.
func startCluster(ctx context.Context, t *testing.T, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	return startClusterIn(ctx, t, "", opts)
}

// startClusterIn is startCluster for a test with several control planes:
// each keeps its files in its own folder, sub.
func startClusterIn(ctx context.Context, t *testing.T, sub string, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	if dir := os.Getenv("FCM_E2E_KEEP_DIR"); dir != "" {
		// Keep certificates, data and logs for a look after the test.
		opts.Dir = filepath.Join(dir, t.Name(), sub)
	}
	cluster, err := localcluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range cluster.Processes() {
			if !strings.HasPrefix(p.Name, "fcm-") && !strings.HasPrefix(p.Name, "fleet-controller-manager-") {
				continue
			}
			data, err := os.ReadFile(p.LogPath)
			if err != nil {
				t.Logf("reading %s: %v", p.LogPath, err)
			}
			var lines []string
			for _, l := range strings.Split(string(data), "\n") {
				// The protocol's lines (joins, views, starts with their
				// view and epoch) and errors; a piece's stop is in the
				// checker's report already and floods the rest out.
				protocol := strings.Contains(l, "manager.go") || strings.Contains(l, "member.go") || strings.Contains(l, "join.go") || strings.Contains(l, "peers.go") || strings.Contains(l, "leaderlease.go")
				if (protocol || strings.HasPrefix(l, "E")) && !strings.Contains(l, "\"Piece stopped\"") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 300 {
				lines = lines[len(lines)-300:]
			}
			t.Logf("--- %s (protocol lines and errors) ---\n%s", p.Name, strings.Join(lines, "\n"))
		}
	})
	return cluster
}

func poll(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %s: %v", what, last, err)
	}
}

// startRunningFleet starts replicas of the real controllers and waits until
// they run every piece.
func startRunningFleet(ctx context.Context, t *testing.T, cluster *localcluster.Cluster, client kubernetes.Interface, replicas ...string) map[string]*localcluster.Process {
	t.Helper()
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	procs := map[string]*localcluster.Process{}
	for _, r := range replicas {
		p, _, err := cluster.StartFleetReplica(ctx, bin, r)
		if err != nil {
			t.Fatal(err)
		}
		procs[r] = p
	}
	waitFleetRunning(ctx, t, client, replicas)
	return procs
}

// TestFleetFailover kills one of three replicas with SIGKILL, then scales the
// fleet 2 -> 1 -> 3 gracefully, creating a Deployment in every namespace at
// each step: each converges wherever its namespace's owner went.
func TestFleetFailover(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 3})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	replicas := []string{"fcm-0", "fcm-1", "fcm-2"}
	procs := startRunningFleet(ctx, t, cluster, client, replicas...)
	var namespaces []string
	for i := range 8 {
		ns := fmt.Sprintf("failover-%d", i)
		namespaces = append(namespaces, ns)
		createNamespace(ctx, t, client, ns)
	}
	step := func(name string) {
		t.Helper()
		start := time.Now()
		for _, ns := range namespaces {
			createDeployment(ctx, t, client, ns, name, 3)
		}
		for _, ns := range namespaces {
			waitDeploymentReady(ctx, t, client, ns, name, 3, 3*time.Minute)
		}
		t.Logf("%s: a Deployment in each of %d namespaces available %v after creation", name, len(namespaces), time.Since(start).Round(time.Millisecond))
	}
	step("before")

	deaths := map[int]time.Time{procs["fcm-2"].Pid(): time.Now()}
	if err := procs["fcm-2"].Signal(9); err != nil {
		t.Fatal(err)
	}
	<-procs["fcm-2"].Done()
	step("after-kill")

	if err := procs["fcm-1"].Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if exited, err := procs["fcm-1"].Exited(); !exited || err != nil {
		t.Fatalf("fcm-1 did not leave cleanly: %v\n%s", err, procs["fcm-1"].LogTail(20))
	}
	step("one-replica")

	for _, r := range []string{"fcm-1", "fcm-2"} {
		if procs[r], _, err = cluster.StartFleetReplica(ctx, bin, r); err != nil {
			t.Fatal(err)
		}
	}
	waitFleetRunning(ctx, t, client, replicas)
	step("three-again")

	// Every partition controller write into the namespaces fell in its
	// replica's runs of the namespace's piece, and no piece ran twice.
	logs := map[string]string{}
	for _, r := range replicas {
		logs[r] = procs[r].LogPath
	}
	violations, judged := checkRunsAgainstAudit(t, cluster.AuditLog, logs, deaths, nil, namespaces, shard.DefaultRingConfig)
	for _, v := range violations {
		t.Errorf("ownership checker: %v", v)
	}
	if judged.inNamespaces == 0 {
		t.Error("no partition controller write in the audit log: the ownership checker looked at nothing")
	}
	t.Logf("ownership checker: %d partition controller writes (%d into the workload's %d namespaces), %d singleton writes, %d violations", judged.partition, judged.inNamespaces, len(namespaces), judged.singleton, len(violations))
}
