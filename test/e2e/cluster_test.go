//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestClusterSmoke runs upstream kube-controller-manager, kube-scheduler and
// kwok on the local control plane and brings a 50-replica Deployment to
// Ready, then checks that stopping left no process behind.
func TestClusterSmoke(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster, err := localcluster.Start(ctx, localcluster.Options{Scheduler: true, KwokNodes: 3, KubeControllerManager: true})
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cluster.Stop()
		}
	}()
	var pids []int
	for _, p := range cluster.Processes() {
		pids = append(pids, p.Pid())
	}
	if len(pids) != 5 {
		t.Fatalf("want 5 processes (etcd, apiserver, scheduler, kwok, kcm), got %d", len(pids))
	}
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, client, "smoke")
	createDeployment(ctx, t, client, "smoke", "web", 50)
	waitDeploymentReady(ctx, t, client, "smoke", "web", 50, 5*time.Minute)

	pods, err := client.CoreV1().Pods("smoke").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, p := range pods.Items {
		if podReady(&p) {
			ready++
		}
	}
	if ready != 50 {
		t.Fatalf("want 50 Ready pods, got %d of %d", ready, len(pods.Items))
	}

	cluster.Stop()
	stopped = true
	for _, pid := range pids {
		if localcluster.ProcessAlive(pid) {
			t.Errorf("process %d still alive after Stop", pid)
		}
	}
}

// TestClusterCommandLeavesNoProcess drives the localcluster command as
// `make cluster` runs it: kubectl with the kubeconfig it writes sees the fake
// nodes Ready; after Ctrl-C, and after the command is killed outright, none of
// the processes it started is left.
func TestClusterCommandLeavesNoProcess(t *testing.T) {
	inLane(t, laneLight)
	bin := filepath.Join(t.TempDir(), "localcluster")
	build := exec.Command("go", "build", "-o", bin, "../localcluster/cmd/localcluster")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building localcluster: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name   string
		signal syscall.Signal
	}{
		{"interrupt", syscall.SIGINT},
		{"kill", syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stateFile := filepath.Join(dir, "state.json")
			kubeconfig := filepath.Join(dir, "kubeconfig")
			cmd := exec.Command(bin, "--state-file", stateFile, "--kubeconfig-out", kubeconfig, "--scheduler", "--kwok-nodes", "3")
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			var st struct{ Pids []int }
			err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
				data, err := os.ReadFile(stateFile)
				if err != nil {
					return false, nil
				}
				return true, json.Unmarshal(data, &st)
			})
			if err != nil {
				t.Fatalf("waiting for the cluster state file: %v", err)
			}
			if len(st.Pids) != 4 {
				t.Fatalf("want 4 processes (etcd, apiserver, scheduler, kwok), got %v", st.Pids)
			}
			out, err := exec.Command(filepath.Join(binDir(t), "kubectl"), "--kubeconfig", kubeconfig, "get", "nodes", "--no-headers").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl get nodes: %v\n%s", err, out)
			}
			if n := strings.Count(string(out), " Ready "); n != 3 {
				t.Fatalf("kubectl get nodes shows %d Ready nodes, want 3:\n%s", n, out)
			}
			if err := cmd.Process.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				for _, pid := range st.Pids {
					if localcluster.ProcessAlive(pid) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("processes %v still alive after %s of the command", st.Pids, tc.signal)
			}
		})
	}
}

// binDir is where `make tools build` put the binaries.
func binDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("FCM_BIN_DIR"); dir != "" {
		return dir
	}
	dir, err := filepath.Abs("../../bin")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func createNamespace(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func createDeployment(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, newDeployment(ns, name, replicas), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment %s/%s: %v", ns, name, err)
	}
}

// newDeployment is a Deployment of replicas pods labelled app=name.
func newDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/fake:1"}}},
			},
		},
	}
}

func waitDeploymentReady(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, replicas int32, timeout time.Duration) {
	t.Helper()
	var last appsv1.DeploymentStatus
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = d.Status
		return d.Status.ReadyReplicas == replicas && d.Status.AvailableReplicas == replicas && d.Status.ObservedGeneration == d.Generation, nil
	})
	if err != nil {
		t.Fatalf("deployment %s/%s not ready: last status %+v: %v", ns, name, last, err)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestRunCommand drives the localcluster command as `make run` does: three
// fleet replicas and the sample workload; `kubectl create deployment`
// against the kubeconfig it writes gets Ready pods, and the sample
// Deployments become available.
func TestRunCommand(t *testing.T) {
	inLane(t, laneLight)
	bin := filepath.Join(t.TempDir(), "localcluster")
	build := exec.Command("go", "build", "-o", bin, "../localcluster/cmd/localcluster")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building localcluster: %v\n%s", err, out)
	}
	dir := t.TempDir()
	stateFile := filepath.Join(dir, "state.json")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cmd := exec.Command(bin, "--state-file", stateFile, "--kubeconfig-out", kubeconfig, "--scheduler", "--kwok-nodes", "3",
		"--fleet-replicas", "3", "--fleet-bin", filepath.Join(binDir(t), "fleet-controller-manager"), "--sample-workload")
	out, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		if t.Failed() {
			data, _ := os.ReadFile(out.Name())
			t.Logf("localcluster output:\n%s", data)
		}
	}()
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(stateFile)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for the cluster: %v", err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir(t), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	kubectl("create", "deployment", "hello", "--image=registry.invalid/hello:1", "--replicas=3")
	start := time.Now()
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 4*time.Minute, true, func(context.Context) (bool, error) {
		out := kubectl("get", "deployments", "-A", "--no-headers")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for _, l := range lines {
			if f := strings.Fields(l); len(f) < 3 || (f[2] != "3/3") {
				return false, nil
			}
		}
		return len(lines) == 6, nil
	})
	if err != nil {
		t.Fatalf("deployments not ready:\n%s", kubectl("get", "deployments", "-A"))
	}
	t.Logf("hello and the 5 sample Deployments Ready %v after kubectl create deployment", time.Since(start).Round(time.Second))
	if pods := kubectl("get", "pods", "-n", "default", "--no-headers"); strings.Count(pods, " Running ") != 3 {
		t.Errorf("want 3 Running pods of hello:\n%s", pods)
	}
}
