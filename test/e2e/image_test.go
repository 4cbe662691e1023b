//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestImageRunsAsManifests runs the image `make image` built (make test
// builds it for this machine's platform) the way deploy/ says to run it: the
// Deployment overlay's container (command, args, env, ports, probes,
// securityContext, volumes) started from the image's own layers by
// podRunner, with in-cluster configuration and the ServiceAccount and RBAC
// of deploy/base only. It checks the image (its user, entrypoint, labels,
// --version and --help), that the replicas run as the non-root user, pass
// their readiness and liveness probes at the manifest's paths and ports,
// form a fleet that runs a workload, serve metrics where the ServiceMonitor
// scrapes them to the token deploy/monitoring authorizes (and to no one
// else), and leave within the termination grace period.
func TestImageRunsAsManifests(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	img := readOCIImage(t, repoPath(t, "build/image/oci"), "linux", runtime.GOARCH)
	version := img.Config.Labels["org.opencontainers.image.version"]
	t.Logf("image: user %s, entrypoint %v, version %q, revision %q, layers %d bytes (compressed)",
		img.Config.User, img.Config.Entrypoint, version, img.Config.Labels["org.opencontainers.image.revision"], img.Sizes)
	if img.Config.User != "65532:65532" {
		t.Errorf("image user %q, want the non-root 65532:65532", img.Config.User)
	}
	for _, label := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		if img.Config.Labels[label] == "" {
			t.Errorf("image label %s is empty", label)
		}
	}

	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 2})
	admin, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlAsAdmin(ctx, t, cluster)

	deployment := renderedObject[appsv1.Deployment](t, kubectl("kustomize", repoPath(t, "deploy/deployment")), "Deployment")
	statefulSet := renderedObject[appsv1.StatefulSet](t, kubectl("kustomize", repoPath(t, "deploy/statefulset")), "StatefulSet")
	pod := deployment.Spec.Template.Spec
	if !reflect.DeepEqual(pod, statefulSet.Spec.Template.Spec) {
		t.Errorf("the Deployment's and the StatefulSet's pods differ; the runs below cover only the Deployment's")
	}
	if got := pod.Containers[0].Command; !reflect.DeepEqual(got, img.Config.Entrypoint) {
		t.Errorf("the manifests' command %v is not the image's entrypoint %v", got, img.Config.Entrypoint)
	}

	// The shipped RBAC for real; the pods are run here, not by a kubelet.
	kubectl("apply", "-k", repoPath(t, "deploy/base"))
	token := serviceAccountToken(ctx, t, admin, deployment.Namespace, pod.ServiceAccountName)
	caCert, err := os.ReadFile(cluster.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pki := map[string][]byte{}
	for name, path := range map[string]string{"sa.key": cluster.ServiceAccountKeyFile(), "ca.crt": cluster.CAFile(), "ca.key": cluster.CAKeyFile()} {
		if pki[name], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	runner := newPodRunner(t, cluster, img, deployment.Namespace, pod, podVolumes{
		secrets: map[string]map[string][]byte{"fleet-controller-manager-pki": pki}, token: []byte(token), caCert: caCert,
	})

	out, err := runner.run(ctx, t, "entrypoint-version", "--version")
	if err != nil || !strings.Contains(out, version) {
		t.Errorf("the entrypoint's --version: %v, printed %q; want the image's version %q", err, strings.TrimSpace(out), version)
	}
	if out, err := runner.run(ctx, t, "entrypoint-help", "--help"); err != nil || !strings.Contains(out, "--fleet-name") {
		t.Errorf("the entrypoint's --help: %v, printed %d bytes without --fleet-name", err, len(out))
	}

	apiserver, err := url.Parse(cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	replicas := int(ptr.Deref(deployment.Spec.Replicas, 1))
	names, podIPs := make([]string, replicas), make([]string, replicas)
	processes := make([]*localcluster.Process, replicas)
	for i := range replicas {
		names[i] = fmt.Sprintf("%s-%d", deployment.Name, i)
		podIPs[i] = fmt.Sprintf("127.0.0.%d", 11+i)
		processes[i] = runner.start(t, names[i], podIPs[i], apiserver.Hostname(), apiserver.Port())
	}
	for i, p := range processes {
		if uid := processUIDs(t, p.Pid()); uid != "65532 65532 65532 65532" {
			t.Errorf("%s runs as uid %q (real, effective, saved, filesystem), want 65532", names[i], uid)
		}
	}
	container := pod.Containers[0]
	poll(ctx, t, "every replica ready at the manifest's readiness probe", 3*time.Minute, func() (bool, string) {
		for i := range processes {
			if exited, err := processes[i].Exited(); exited {
				t.Fatalf("%s exited (%v):\n%s", names[i], err, processes[i].LogTail(30))
			}
			if err := runner.probe(t, container.ReadinessProbe, podIPs[i]); err != nil {
				return false, fmt.Sprintf("%s: %v", names[i], err)
			}
		}
		return true, ""
	})
	for i := range processes {
		if err := runner.probe(t, container.LivenessProbe, podIPs[i]); err != nil {
			t.Errorf("%s: liveness probe: %v", names[i], err)
		}
	}
	waitFleetRunning(ctx, t, admin, names)
	createNamespace(ctx, t, admin, "image-workload")
	createDeployment(ctx, t, admin, "image-workload", "web", 3)
	waitDeploymentReady(ctx, t, admin, "image-workload", "web", 3, 3*time.Minute)

	checkScrapedAsServiceMonitorSays(ctx, t, cluster, admin, kubectl, runner, podIPs[0])

	for i, p := range processes {
		log, _ := os.ReadFile(p.LogPath)
		for _, refused := range []string{"is forbidden", "permission denied"} {
			if line := firstLineWith(string(log), refused); line != "" {
				t.Errorf("%s was refused (%q):\n%s", names[i], refused, line)
			}
		}
	}
	grace := time.Duration(ptr.Deref(pod.TerminationGracePeriodSeconds, 30)) * time.Second
	for i, p := range processes {
		start := time.Now()
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
			if _, err := p.Exited(); err != nil {
				t.Errorf("%s left with %v after SIGTERM", names[i], err)
			}
			t.Logf("%s left %v after SIGTERM", names[i], time.Since(start).Round(time.Millisecond))
		case <-time.After(grace):
			t.Errorf("%s still running %v after SIGTERM: the kubelet would kill it", names[i], grace)
		}
	}
}

// checkScrapedAsServiceMonitorSays scrapes a replica the way
// deploy/monitoring's ServiceMonitor tells Prometheus to (its endpoint's
// port through the Service to the container port, scheme and path), with
// the token of the ServiceAccount its ClusterRoleBinding names, and checks
// a scrape without a token is refused.
func checkScrapedAsServiceMonitorSays(ctx context.Context, t *testing.T, cluster *localcluster.Cluster, admin kubernetes.Interface, kubectl func(...string) string, runner *podRunner, podIP string) {
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
	metricsURL := fmt.Sprintf("%s://%s:%d%s", scheme, podIP, runner.containerPort(t, *target), path)

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
