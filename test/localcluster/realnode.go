package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// The real node: a kubelet on containerd, runc and a CNI bridge, beside
// kwok's fake nodes, for what needs a container to really run.
const (
	// RealNodeName is the real node's name.
	RealNodeName = "real-node"
	// RealNodeTaint keeps pods that do not ask for the real node off it:
	// kwok's nodes serve the workloads that only need a Ready pod.
	RealNodeTaint = "fleet-controller-manager.io/real-node"
	// realNodeSubnet is the pods' network, on a bridge of this machine
	// only: nothing is masqueraded or routed off it.
	realNodeSubnet  = "10.244.0.0/24"
	realNodeGateway = "10.244.0.1"
	realNodeBridge  = "fcm-node0"
)

// RealNodeToleration lets a pod onto the real node.
var RealNodeToleration = corev1.Toleration{Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// The kernel settings the kubelet insists on (its protectKernelDefaults
// list). The node's processes run in a mount namespace of their own where
// each is a file holding that value, so the kubelet never changes this
// machine's kernel (kernel.panic, panic_on_oops, overcommit).
var realNodeSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// realNode is the running node's parts.
type realNode struct {
	dir    string
	socket string
	// machineLock is held while the node runs (lockMachine).
	machineLock *os.File
	// apiServerProxy serves the apiserver to the pods at the bridge's
	// gateway.
	apiServerProxy net.Listener
	cgroupRoot     string
	containerd     *Process
	kubelet        *Process
	// StaticPodDir is the kubelet's static pod folder.
	StaticPodDir string
}

// startRealNode starts containerd and the kubelet, imports the images and
// waits until the node is Ready.
func (c *Cluster) startRealNode(ctx context.Context, schedulable bool) error {
	n := &realNode{dir: filepath.Join(c.Dir, "node")}
	if err := n.lockMachine(ctx); err != nil {
		return err
	}
	n.socket = filepath.Join(n.dir, "containerd.sock")
	n.StaticPodDir = filepath.Join(n.dir, "manifests")
	n.cgroupRoot = "/fcm-" + filepath.Base(c.Dir)
	c.node = n
	for _, d := range []string{"sysctl", "cni", "manifests", "kubelet", "pod-logs", "containerd"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return fmt.Errorf("creating the real node's folders: %w", err)
		}
	}
	if err := n.createCgroupRoot(); err != nil {
		return err
	}
	if err := c.startPodNetwork(n); err != nil {
		return err
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := c.importNodeImages(ctx, n); err != nil {
		return err
	}
	if err := c.startKubelet(ctx, n, schedulable); err != nil {
		return err
	}
	return c.waitRealNodeReady(ctx)
}

// realNodeLockFile is held by the real node of this machine: its bridge,
// subnet and gateway address are the machine's, so a second cluster's
// real node waits for the first to stop.
const realNodeLockFile = "/run/fleet-controller-manager-real-node.lock"

func (n *realNode) lockMachine(ctx context.Context) error {
	f, err := os.OpenFile(realNodeLockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("locking the machine for the real node: %w", err)
	}
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(context.Context) (bool, error) {
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil, nil
	})
	if err != nil {
		f.Close()
		return fmt.Errorf("waiting for another cluster's real node to stop (%s): %w", realNodeLockFile, err)
	}
	n.machineLock = f
	return nil
}

func (n *realNode) unlockMachine() {
	if n.machineLock != nil {
		_ = n.machineLock.Close() // closing releases the lock
	}
}

// startContainerd starts containerd in a new mount namespace with the
// kubelet's kernel settings bound over /proc/sys.
func (c *Cluster) startContainerd(ctx context.Context, n *realNode) error {
	config := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(c.containerdConfig(n)), 0o644); err != nil {
		return fmt.Errorf("writing containerd's config: %w", err)
	}
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "fcm-node", "plugins": [{"type": "bridge", "bridge": %q,
  "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "dataDir": %q,
  "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}`,
		realNodeBridge, filepath.Join(n.dir, "cni-ipam"), realNodeSubnet)
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-fcm-node.conflist"), []byte(cni), 0o644); err != nil {
		return fmt.Errorf("writing the CNI config: %w", err)
	}
	script := []string{"set -e", "mount --make-rprivate /"}
	for key, value := range realNodeSysctls {
		file := filepath.Join(n.dir, "sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing the node's kernel settings: %w", err)
		}
		script = append(script, fmt.Sprintf("mount --bind %s /proc/sys/%s", file, key))
	}
	script = append(script, `exec "$@"`)
	args := []string{"--mount", "--", "sh", "-c", strings.Join(script, "\n"), "containerd",
		filepath.Join(c.BinDir, "containerd", "containerd"), "--config", config}
	env := []string{"PATH=" + filepath.Join(c.BinDir, "containerd") + ":" + filepath.Join(c.BinDir, "runc") + ":" + os.Getenv("PATH")}
	var err error
	if n.containerd, err = startProcess(c.Dir, "containerd", "unshare", "", args, env); err != nil {
		return err
	}
	c.track(n.containerd)
	return wait.PollUntilContextTimeout(ctx, pollInterval, componentReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if exited, err := n.containerd.Exited(); exited {
			return false, n.containerd.failed(err)
		}
		return c.ctr(ctx, n, "version") == nil, nil
	})
}

// containerdConfig keeps every file under the node's folder. This machine's
// root has no CAP_SYS_RESOURCE, so no process may lower its OOM score:
// restrict_oom_score_adj keeps the kubelet's -998 for sandboxes (and
// negative scores for critical pods) at containerd's own instead of failing
// every container.
func (c *Cluster) containerdConfig(n *realNode) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %[6]q
[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = %[7]q
  SystemdCgroup = false
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [%[8]q]
  conf_dir = %[9]q
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.socket, n.socket+".ttrpc",
		filepath.Join(n.dir, "containerd", "opt"), "registry.k8s.io/pause:3.10.2", filepath.Join(c.BinDir, "runc", "runc"),
		filepath.Join(c.BinDir, "cni"), filepath.Join(n.dir, "cni"))
}

// ctr runs containerd's client against the node's containerd, in the
// Kubernetes namespace.
func (c *Cluster) ctr(ctx context.Context, n *realNode, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "containerd", "ctr"), append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// importNodeImages loads every image bin/node-images holds.
func (c *Cluster) importNodeImages(ctx context.Context, n *realNode) error {
	archives, err := filepath.Glob(filepath.Join(c.BinDir, "node-images", "*.tar"))
	if err != nil || len(archives) == 0 {
		return fmt.Errorf("no images in %s (make node-tools builds them): %v", filepath.Join(c.BinDir, "node-images"), err)
	}
	for _, archive := range archives {
		if err := c.ImportImage(ctx, archive); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage loads an OCI or Docker archive into the real node's
// containerd, where the kubelet finds it without pulling.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	if c.node == nil {
		return fmt.Errorf("importing %s: the cluster has no real node", archive)
	}
	return c.ctr(ctx, c.node, "images", "import", "--all-platforms=false", archive)
}

// TagImage gives an image of the real node's containerd a second name, as
// a registry would serve a new tag of it.
func (c *Cluster) TagImage(ctx context.Context, source, target string) error {
	if c.node == nil {
		return fmt.Errorf("tagging %s: the cluster has no real node", source)
	}
	return c.ctr(ctx, c.node, "images", "tag", "--force", source, target)
}

func (c *Cluster) startKubelet(ctx context.Context, n *realNode, schedulable bool) error {
	kubeconfig, err := c.Kubeconfig("kubelet", "system:node:"+RealNodeName, "system:nodes")
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	healthPort, err := FreePort()
	if err != nil {
		return err
	}
	config := filepath.Join(n.dir, "kubelet.yaml")
	kubeletConfig := c.kubeletConfig(n, port, healthPort)
	if !schedulable {
		kubeletConfig += fmt.Sprintf("registerWithTaints:\n- {key: %q, effect: NoSchedule}\n", RealNodeTaint)
	}
	if err := os.WriteFile(config, []byte(kubeletConfig), 0o644); err != nil {
		return fmt.Errorf("writing the kubelet's config: %w", err)
	}
	args := []string{"--target", strconv.Itoa(n.containerd.Pid()), "--mount", "--",
		filepath.Join(c.BinDir, "kubelet"),
		"--config=" + config,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + RealNodeName,
		// The kubelet refuses a loopback node IP: the node's address is
		// its pods' gateway, where it serves the apiserver's requests.
		"--node-ip=" + realNodeGateway,
		"--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--cert-dir=" + filepath.Join(n.dir, "kubelet", "pki"),
		"--v=2",
	}
	if n.kubelet, err = startProcess(c.Dir, "kubelet", "nsenter", "", args, nil); err != nil {
		return err
	}
	c.track(n.kubelet)
	return waitHTTP(ctx, n.kubelet, fmt.Sprintf("http://127.0.0.1:%d/healthz", healthPort), nil, componentReadyTimeout)
}

func (c *Cluster) kubeletConfig(n *realNode, port, healthPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
containerRuntimeEndpoint: unix://%s
staticPodPath: %q
podLogsDir: %q
clusterDomain: cluster.local
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, realNodeGateway, port, healthPort, c.pki.CAFile, n.cgroupRoot, n.socket, n.StaticPodDir, filepath.Join(n.dir, "pod-logs"))
}

func (c *Cluster) waitRealNodeReady(ctx context.Context) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, pollInterval, componentReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if exited, err := c.node.kubelet.Exited(); exited {
			return false, c.node.kubelet.failed(err)
		}
		node, err := client.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to be Ready: %w (kubelet's log: %s)", RealNodeName, err, c.node.kubelet.LogTail(20))
	}
	return nil
}

// StaticPodDir is the real node's kubelet's static pod folder ("" without
// a real node).
func (c *Cluster) StaticPodDir() string {
	if c.node == nil {
		return ""
	}
	return c.node.StaticPodDir
}

// stopRealNode ends what the kubelet and containerd leave running after
// they stop: the runc shims and the containers, then the node's cgroups.
func (c *Cluster) stopRealNode() {
	n := c.node
	if n == nil {
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "\x00"+n.socket+"\x00") {
			killPid(pid)
		}
	}
	c.stopPodNetwork(n)
	defer n.unlockMachine()
	deadline := time.Now().Add(stopGrace)
	for _, hierarchy := range cgroupHierarchies() {
		root := filepath.Join(hierarchy, n.cgroupRoot)
		for time.Now().Before(deadline) {
			if err := removeCgroupTree(root); err == nil {
				break
			}
			time.Sleep(pollInterval)
		}
		if _, err := os.Stat(root); err == nil {
			klog.InfoS("A cgroup of the real node is left behind", "cgroup", root)
		}
	}
}
