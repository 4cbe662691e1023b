//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestRealNodeImage runs the image `make image` built (make test builds it
// for this machine's platform) on the real node as deploy/ ships it: the
// image imported into containerd, deploy/deployment applied with an
// operator's overlay, the pods run by the kubelet with the Secret, the
// ServiceAccount and the RBAC of deploy/base only. It checks the image (its
// user, entrypoint and labels, --version and --help run as a pod of it),
// that the replicas run as the non-root user, become Ready at their
// readiness probe and are never restarted by their liveness probe, run the
// controllers of the cluster they live in (a Deployment on kwok's nodes;
// Jobs whose containers exit by code on the real node), are refused nothing,
// serve metrics where the ServiceMonitor scrapes them to the token
// deploy/monitoring authorizes (and to no one else), and that a deleted
// pod leaves within its grace period, exiting 0, its Lease deleted.
func TestRealNodeImage(t *testing.T) {
	inLongLane(t, laneHeavy)
	// 10 minutes for the test, and as long again to wait for the
	// machine's one real node: under make test-node the long tests hold
	// it first (their longest subtest, about 9.5 minutes).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	img := readOCIImage(t, repoPath(t, "build/image/oci"), "linux", runtime.GOARCH)
	version := img.Config.Labels["org.opencontainers.image.version"]
	t.Logf("image: user %s, entrypoint %v, version %q, revision %q, layers %v bytes (compressed)",
		img.Config.User, img.Config.Entrypoint, version, img.Config.Labels["org.opencontainers.image.revision"], img.Sizes)
	if img.Config.User != "65532:65532" {
		t.Errorf("image user %q, want the non-root 65532:65532", img.Config.User)
	}
	for _, label := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		if img.Config.Labels[label] == "" {
			t.Errorf("image label %s is empty", label)
		}
	}

	d := newDeployedFleet(ctx, t, "deployment", "Deployment", true)
	deployment := renderedObject[appsv1.Deployment](t, d.kubectl("kustomize", d.overlayDir), "Deployment")
	statefulSet := renderedObject[appsv1.StatefulSet](t, d.kubectl("kustomize", repoPath(t, "deploy/statefulset")), "StatefulSet")
	base := renderedObject[appsv1.Deployment](t, d.kubectl("kustomize", repoPath(t, "deploy/deployment")), "Deployment")
	if !reflect.DeepEqual(base.Spec.Template.Spec, statefulSet.Spec.Template.Spec) {
		t.Errorf("the Deployment's and the StatefulSet's pods differ; this test runs only the Deployment's")
	}
	container := deployment.Spec.Template.Spec.Containers[0]
	if !reflect.DeepEqual(container.Command, img.Config.Entrypoint) {
		t.Errorf("the manifests' command %v is not the image's entrypoint %v", container.Command, img.Config.Entrypoint)
	}

	// As operations.md deploys it: beside KCM's static pod, whose
	// ReplicaSet controller starts the fleet's pods, then KCM moved out.
	takeover, ready := d.migrate(ctx, false)
	t.Logf("deploy/deployment applied beside KCM, KCM moved out: the fleet led %v later, every replica Ready at its readiness probe %v later",
		takeover.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
	pods, err := d.client.CoreV1().Pods(fleetNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleetSelector})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if uids := containerUIDs(t, pod.UID, container.Command[0]); len(uids) != 1 || uids[0] != "65532 65532 65532 65532" {
			t.Errorf("pod %s's processes run as %q (real, effective, saved, filesystem uid), want one, as 65532", pod.Name, uids)
		}
	}
	// A pod needs its namespace's default ServiceAccount, which the fleet's
	// serviceaccount controller makes.
	out := runImageOnce(ctx, t, d.client, container.Image, "--version")
	if !strings.Contains(out, version) {
		t.Errorf("the entrypoint's --version printed %q; want the image's version %q", strings.TrimSpace(out), version)
	}
	if out := runImageOnce(ctx, t, d.client, container.Image, "--help"); !strings.Contains(out, "--fleet-name") {
		t.Errorf("the entrypoint's --help printed %d bytes without --fleet-name", len(out))
	}

	createNamespace(ctx, t, d.client, "image-workload")
	createDeployment(ctx, t, d.client, "image-workload", "web", 3)
	waitDeploymentReady(ctx, t, d.client, "image-workload", "web", 3, 3*time.Minute)
	checkJobsByExitCode(ctx, t, d.client, "image-workload")

	checkScrapedAsServiceMonitorSays(ctx, t, d.client, d.kubectl, container, pods.Items[0].Status.PodIP)

	for _, pod := range pods.Items {
		log, err := d.client.CoreV1().Pods(fleetNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("reading %s's log through the apiserver: %v", pod.Name, err)
		}
		for _, refused := range []string{"is forbidden", "permission denied"} {
			if line := firstLineWith(string(log), refused); line != "" {
				t.Errorf("%s was refused (%q):\n%s", pod.Name, refused, line)
			}
		}
	}
	checkNoRestarts(ctx, t, d.client)
	d.checkGracefulLeave(ctx)
}

// runImageOnce runs image with args as a pod on the real node, its
// entrypoint unchanged, and returns what it printed.
func runImageOnce(ctx context.Context, t *testing.T, client kubernetes.Interface, image string, args ...string) string {
	t.Helper()
	name := "image-" + strings.TrimLeft(args[0], "-")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Args: args}},
		},
	}
	onRealNode(&pod.Spec)
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "pod "+name+" to succeed", 2*time.Minute, func() (bool, string) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed: %+v", name, p.Status.ContainerStatuses)
		}
		return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase)
	})
	out, err := client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading %s's output through the apiserver: %v", name, err)
	}
	return string(out)
}

// containerUIDs is the Uid line of /proc/<pid>/status of each process of
// the pod whose command is command: the real node's containers are this
// machine's processes, in the pod's cgroup.
func containerUIDs(t *testing.T, pod types.UID, command string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cgroup, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cgroup), "pod"+string(pod)) {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.HasPrefix(string(cmdline), command+"\x00") {
			uids = append(uids, processUIDs(t, pid))
		}
	}
	return uids
}

// checkNoRestarts fails the test for a fleet container the kubelet
// restarted: its liveness probe failed, or it exited.
func checkNoRestarts(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	pods, err := client.CoreV1().Pods(fleetNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleetSelector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount != 0 {
				t.Errorf("pod %s's container %s restarted %d times (last: %+v)", p.Name, c.Name, c.RestartCount, c.LastTerminationState.Terminated)
			}
		}
	}
}

// checkScrapedAsServiceMonitorSays scrapes a replica the way
// deploy/monitoring's ServiceMonitor tells Prometheus to (its endpoint's
// port through the Service to the container port, scheme and path), with
// the token of the ServiceAccount its ClusterRoleBinding names, and checks
// a scrape without a token is refused.
func checkScrapedAsServiceMonitorSays(ctx context.Context, t *testing.T, admin kubernetes.Interface, kubectl func(...string) string, container corev1.Container, podIP string) {
	t.Helper()
	monitoring := kubectl("kustomize", repoPath(t, "deploy/monitoring"))
	monitor := renderedObject[unstructured.Unstructured](t, monitoring, "ServiceMonitor")
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	endpoint := endpoints[0].(map[string]any)
	service := renderedObject[corev1.Service](t, kubectl("kustomize", repoPath(t, "deploy/base")), "Service")
	var target *intstr.IntOrString
	for _, p := range service.Spec.Ports {
		if p.Name == endpoint["port"] {
			target = &p.TargetPort
		}
	}
	if target == nil {
		t.Fatalf("the ServiceMonitor's port %v is not one of the Service's", endpoint["port"])
	}
	scheme, _ := endpoint["scheme"].(string)
	path, _ := endpoint["path"].(string)
	if path == "" {
		path = "/metrics"
	}
	metricsURL := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(podIP, strconv.Itoa(containerPort(t, container, *target))), path)

	binding := renderedObject[unstructured.Unstructured](t, monitoring, "ClusterRoleBinding")
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	scraper := subjects[0].(map[string]any)
	scraperNS, scraperName := scraper["namespace"].(string), scraper["name"].(string)
	createNamespace(ctx, t, admin, scraperNS)
	if _, err := admin.CoreV1().ServiceAccounts(scraperNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scraperName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, crd := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		kubectl("apply", "--server-side", "-f", filepath.Join(binDir(t), "crds", crd))
	}
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	kubectl("apply", "-k", repoPath(t, "deploy/monitoring"))
	token := serviceAccountToken(ctx, t, admin, scraperNS, scraperName)

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("scraping %s: %v", metricsURL, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// The binding's authorization reaches the replica through the
	// apiserver's SubjectAccessReview, which may lag the apply by a moment.
	poll(ctx, t, "a scrape with the ServiceMonitor's token", time.Minute, func() (bool, string) {
		code, body := scrape(token)
		if code != http.StatusOK {
			return false, fmt.Sprintf("%s: HTTP %d", metricsURL, code)
		}
		if !strings.Contains(body, "fleet_members ") && !strings.Contains(body, "fleet_members{") {
			t.Fatalf("%s answered without fleet_members", metricsURL)
		}
		return true, ""
	})
	if code, _ := scrape(""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("%s without a token: HTTP %d, want 401 or 403", metricsURL, code)
	}
}

// containerPort is the number of a Service's target port in container.
func containerPort(t *testing.T, container corev1.Container, port intstr.IntOrString) int {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	for _, p := range container.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("no container port named %q", port.StrVal)
	return 0
}

// kubectlAsAdmin runs the cluster's kubectl as its admin and returns what it
// printed, failing the test when it fails.
func kubectlAsAdmin(ctx context.Context, t *testing.T, cluster *localcluster.Cluster) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "kubectl"), append([]string{"--kubeconfig=" + cluster.AdminKubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// renderedObject is the one object of kind in a kustomize build's output.
func renderedObject[T any](t *testing.T, rendered, kind string) T {
	t.Helper()
	var found []map[string]any
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	for {
		var obj map[string]any
		if err := decoder.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("parsing kustomize's output: %v", err)
		}
		if obj["kind"] == kind {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("kustomize's output has %d objects of kind %s, want 1", len(found), kind)
	}
	var out T
	if u, ok := any(&out).(*unstructured.Unstructured); ok {
		u.Object = found[0]
		return out
	}
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(found[0], &out); err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return out
}

// serviceAccountToken is a bound token for namespace/name, as the kubelet
// projects one into a pod.
func serviceAccountToken(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace, name string) string {
	t.Helper()
	token, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s/%s: %v", namespace, name, err)
	}
	return token.Status.Token
}

// processUIDs is the Uid line of /proc/<pid>/status: real, effective, saved
// and filesystem uid.
func processUIDs(t *testing.T, pid int) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "Uid:"); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return ""
}
