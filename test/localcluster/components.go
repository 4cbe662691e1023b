package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// auditPolicy records who wrote what: every write at Metadata level (user,
// user agent, verb, object), nothing for reads unless reads is set: then
// lists and watches too (a watch is logged when its response starts and
// when it ends).
func auditPolicy(reads bool) string {
	verbs := `"create", "update", "patch", "delete", "deletecollection"`
	if reads {
		verbs += `, "list", "watch"`
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: [` + verbs + `]
- level: None
`
}

func (c *Cluster) startAPIServer(ctx context.Context, extraArgs []string, auditReads bool) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy(auditReads)), 0o644); err != nil {
		return fmt.Errorf("writing audit policy: %w", err)
	}
	c.AuditLog = filepath.Join(c.Dir, "audit.log")
	kubeletClientCert, kubeletClientKey, err := c.pki.ClientCert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.pki.ServingCert,
		"--tls-private-key-file=" + c.pki.ServingKey,
		"--client-ca-file=" + c.pki.CAFile,
		// Without a request-header CA every component logs a missing CA
		// bundle every few seconds.
		"--requestheader-client-ca-file=" + c.pki.CAFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--service-account-key-file=" + c.pki.ServiceAccountPub,
		"--service-account-signing-key-file=" + c.pki.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=Node,RBAC",
		// A real node's kubelet (logs, exec, port-forward) is reached at
		// its loopback InternalIP, as this client.
		"--kubelet-client-certificate=" + kubeletClientCert,
		"--kubelet-client-key=" + kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP",
		// The endpoint reconciler rejects a loopback advertise address and
		// says so every 10 s; nothing here reaches the apiserver through the
		// kubernetes Service anyway.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + c.AuditLog,
		"--audit-log-maxsize=0",
		"--profiling=false",
		// Server-side sharded list/watch: the owned cache lists the
		// namespaces it loads with shard selectors.
		"--feature-gates=ShardedListAndWatch=true",
		// Names every watcher the watch cache closes for not keeping up
		// (its key and selectors), so a kept log says whose it was.
		"--vmodule=cache_watcher=1",
	}
	args = append(args, extraArgs...)
	if c.apiServer, err = startProcess(c.Dir, "kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"), c.controlPlaneCPUs, args, nil); err != nil {
		return err
	}
	if c.AdminKubeconfig, err = c.Kubeconfig("admin", "fleet-admin", "system:masters"); err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, apiServerReadyTimeout)
	defer cancel()
	var lastErr error
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if exited, exitErr := c.apiServer.Exited(); exited {
			return false, fmt.Errorf("exited: %v", exitErr)
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			lastErr = fmt.Errorf("%w: %s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return c.apiServer.failed(fmt.Errorf("not ready (last: %v): %w", lastErr, err))
	}
	return nil
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port
// and storage, returning when it is ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.apiServer.Restart(stopGrace); err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

// RestartEtcd stops etcd and starts it again on the same ports and data,
// returning when it is healthy (kube-apiserver reconnects by itself).
func (c *Cluster) RestartEtcd(ctx context.Context) error {
	if err := c.etcd.Restart(stopGrace); err != nil {
		return err
	}
	return waitHTTP(ctx, c.etcd, c.etcdURL+"/health", nil, componentReadyTimeout)
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kubeconfig, err := c.Kubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	// The default client limits cap binds at about 50/s, which would make the
	// scheduler, not the controllers, the bottleneck of every measurement.
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
`, kubeconfig)
	configPath := filepath.Join(c.Dir, "kube-scheduler.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return fmt.Errorf("writing scheduler config: %w", err)
	}
	c.scheduler, err = startProcess(c.Dir, "kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"), c.controlPlaneCPUs, []string{
		"--config=" + configPath,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
	}, nil)
	if err != nil {
		return err
	}
	return waitHTTP(ctx, c.scheduler, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecureClient(), componentReadyTimeout)
}

// ControllerManagerArgs are the flags a production control plane gives
// kube-controller-manager (and so fleet-controller-manager, which takes the
// same flags): credentials, service account signing, cluster signing.
func (c *Cluster) ControllerManagerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki.ServiceAccountKey,
		"--root-ca-file=" + c.pki.CAFile,
		"--cluster-signing-cert-file=" + c.pki.CAFile,
		"--cluster-signing-key-file=" + c.pki.CAKey,
		"--controllers=*",
	}
}

// StartKubeControllerManager starts upstream kube-controller-manager as name
// (several may run for leader election), configured as a production
// control plane would: service account credentials, signing keys, leader
// election. args are added last, so they win. It returns once /healthz
// answers on the secure port it returns.
func (c *Cluster) StartKubeControllerManager(ctx context.Context, name string, args ...string) (*Process, int, error) {
	kubeconfig, err := c.Kubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return nil, 0, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, 0, err
	}
	all := append(c.ControllerManagerArgs(kubeconfig), "--secure-port="+strconv.Itoa(port), "--leader-elect=true")
	all = append(all, args...)
	p, err := c.startControllerManager(name, filepath.Join(c.BinDir, "kube-controller-manager"), all)
	if err != nil {
		return nil, 0, err
	}
	if err := waitHTTP(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecureClient(), componentReadyTimeout); err != nil {
		return nil, 0, err
	}
	return p, port, nil
}

// StartFleetReplica starts one fleet-controller-manager replica named
// identity with the same flags as kube-controller-manager, and returns once
// its /healthz answers. Its client is a system:masters user until the
// project ships least-privilege RBAC.
func (c *Cluster) StartFleetReplica(ctx context.Context, bin, identity string, args ...string) (*Process, int, error) {
	kubeconfig, err := c.Kubeconfig("fleet-controller-manager", "system:kube-controller-manager", "system:masters")
	if err != nil {
		return nil, 0, err
	}
	return c.StartFleetReplicaAs(ctx, bin, identity, kubeconfig, args...)
}

// StartFleetReplicaAs is StartFleetReplica with the credentials of
// kubeconfig (a ServiceAccount's token, say).
func (c *Cluster) StartFleetReplicaAs(ctx context.Context, bin, identity, kubeconfig string, args ...string) (*Process, int, error) {
	port, err := FreePort()
	if err != nil {
		return nil, 0, err
	}
	all := append(c.ControllerManagerArgs(kubeconfig), "--secure-port="+strconv.Itoa(port), "--identity="+identity)
	all = append(all, args...)
	p, err := c.startControllerManager(identity, bin, all)
	if err != nil {
		return nil, 0, err
	}
	if err := waitHTTP(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecureClient(), componentReadyTimeout); err != nil {
		return nil, 0, err
	}
	return p, port, nil
}

// StartProcess starts any other program (a fleet replica, say) as part of the
// cluster, so that Stop ends it too.
func (c *Cluster) StartProcess(name, bin string, args []string, env []string) (*Process, error) {
	p, err := startProcess(c.Dir, name, bin, "", args, env)
	if err != nil {
		return nil, err
	}
	c.track(p)
	return p, nil
}

// Container is a program run the way a container runtime runs a pod's
// container, as far as a test on one machine can: chrooted into Root (an
// image's extracted layers, with the pod's volumes written in), as
// UID:GID with supplementary Groups, with Env and nothing of the test's
// environment. The network is the machine's: the program binds what its
// flags say. Starting one needs root (chroot, setuid).
type Container struct {
	Root   string
	UID    uint32
	GID    uint32
	Groups []uint32
	Env    []string
}

// StartContainer starts command (a path inside ctr.Root, then its
// arguments) as a container, as part of the cluster, so that Stop ends it
// too.
func (c *Cluster) StartContainer(name string, ctr Container, command []string) (*Process, error) {
	if len(command) == 0 {
		return nil, fmt.Errorf("container %s: no command", name)
	}
	p := &Process{Name: name, bin: command[0], args: command[1:], container: &ctr, LogPath: filepath.Join(c.Dir, name+".log")}
	if err := p.start(); err != nil {
		return nil, err
	}
	c.track(p)
	return p, nil
}

func (c *Cluster) track(p *Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.others = append(c.others, p)
}

func (c *Cluster) startKwok(ctx context.Context, nodes, podParallelism int) error {
	if podParallelism <= 0 {
		podParallelism = 16
	}
	kubeconfig, err := c.Kubeconfig("kwok", "kwok", "system:masters")
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	// kwok does not default its parallelism: every field is set, or the
	// stage that was left out never runs.
	config := []string{fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: %d
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 4
  nodeLeaseDurationSeconds: 40
`, podParallelism)}
	stageDir := filepath.Join(c.BinDir, "stages")
	if resolved, err := filepath.EvalSymlinks(filepath.Join(c.BinDir, "kwok")); err == nil {
		stageDir = filepath.Join(filepath.Dir(resolved), "stages")
	}
	stages, err := filepath.Glob(filepath.Join(stageDir, "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stage files in %s (run `make tools`)", stageDir)
	}
	for _, s := range stages {
		data, err := os.ReadFile(s)
		if err != nil {
			return fmt.Errorf("reading kwok stage: %w", err)
		}
		config = append(config, string(data))
	}
	configPath := filepath.Join(c.Dir, "kwok.yaml")
	if err := os.WriteFile(configPath, []byte(strings.Join(config, "\n---\n")), 0o644); err != nil {
		return fmt.Errorf("writing kwok config: %w", err)
	}
	c.kwok, err = startProcess(c.Dir, "kwok", filepath.Join(c.BinDir, "kwok"), c.controlPlaneCPUs, []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + configPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
		"--node-ip=127.0.0.1",
		"--cidr=10.244.0.0/16",
	}, nil)
	if err != nil {
		return err
	}
	client, err := c.Client()
	if err != nil {
		return err
	}
	for i := range nodes {
		if err := CreateFakeNode(ctx, client, fmt.Sprintf("kwok-node-%d", i)); err != nil {
			return err
		}
	}
	return c.waitNodesReady(ctx, client, nodes)
}

// CreateFakeNode registers a node that kwok will run pods on.
func CreateFakeNode(ctx context.Context, client kubernetes.Interface, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: name},
	}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating fake node %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) waitNodesReady(ctx context.Context, client kubernetes.Interface, want int) error {
	ctx, cancel := context.WithTimeout(ctx, componentReadyTimeout)
	defer cancel()
	ready := 0
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if exited, exitErr := c.kwok.Exited(); exited {
			return false, fmt.Errorf("exited: %v", exitErr)
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, nil
		}
		ready = 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= want, nil
	})
	if err != nil {
		return c.kwok.failed(fmt.Errorf("%d of %d fake nodes Ready: %w", ready, want, err))
	}
	return nil
}

// waitHTTP polls url until it answers 200, failing early when p exits.
func waitHTTP(ctx context.Context, p *Process, url string, client *http.Client, timeout time.Duration) error {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if exited, exitErr := p.Exited(); exited {
			return false, fmt.Errorf("exited: %v", exitErr)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return p.failed(fmt.Errorf("%s not ready (last: %s): %w", url, last, err))
	}
	return nil
}

// insecureClient probes components' self-signed serving certificates on
// loopback; it carries no credentials.
func insecureClient() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe only
	}
}

// Listening ports are picked below the kernel's ephemeral range (32768
// and up on Linux): a port the kernel hands out for ":0" is closed again
// before the component binds it, and in that gap the kernel may give it to
// an outgoing connection as its local port (CI saw etcd fail with
// "address already in use" that way). Outgoing connections never take a
// port below the range.
const (
	portRangeLow  = 20000
	portRangeHigh = 32000
)

// givenPorts: ports FreePort returned, not returned again in this
// process (a component may not have bound its port yet).
var (
	givenPortsMu sync.Mutex
	givenPorts   = map[int]bool{}
)

// FreePort finds an unused loopback port outside the ephemeral range.
func FreePort() (int, error) {
	givenPortsMu.Lock()
	defer givenPortsMu.Unlock()
	start := portRangeLow + rand.IntN(portRangeHigh-portRangeLow)
	for i := range portRangeHigh - portRangeLow {
		port := portRangeLow + (start-portRangeLow+i)%(portRangeHigh-portRangeLow)
		if givenPorts[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		givenPorts[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("finding a free loopback port: none free in %d-%d", portRangeLow, portRangeHigh)
}
