// Package localcluster runs a real Kubernetes control plane on loopback for
// tests, benchmarks and the demo: etcd and kube-apiserver, and on request
// kube-scheduler, kwok with fake nodes, and upstream kube-controller-manager.
// Every binary comes from bin/ (built by `make tools`); every process it
// starts is ended by Stop, and by the kernel if the caller dies first.
package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// Timings of the local control plane. A cold kube-apiserver on two busy
// cores needs tens of seconds before /readyz passes.
const (
	apiServerReadyTimeout = 3 * time.Minute
	componentReadyTimeout = 2 * time.Minute
	stopGrace             = 15 * time.Second
	pollInterval          = 250 * time.Millisecond
)

// KwokNodeAnnotation marks the fake nodes kwok manages.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Options says what to start.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-scheduler,
	// kube-controller-manager and kwok. Default: $FCM_BIN_DIR, else bin/ at the
	// root of this repository.
	BinDir string
	// Dir is where certificates, kubeconfigs, data and logs go. Default: a new
	// temporary directory, removed by Stop.
	Dir string
	// Scheduler starts kube-scheduler with client limits high enough never to
	// be the bottleneck.
	Scheduler bool
	// KwokNodes > 0 starts kwok managing that many fake nodes, on which pods
	// become Ready (and Jobs' pods complete).
	KwokNodes int
	// KwokPodParallelism is how many pod stages kwok plays at once (default 16).
	KwokPodParallelism int
	// KubeControllerManager starts upstream kube-controller-manager.
	KubeControllerManager bool
	// KubeControllerManagerArgs are extra flags for it (later ones win).
	KubeControllerManagerArgs []string
	// APIServerArgs are extra flags for kube-apiserver.
	APIServerArgs []string
	// AuditReads also audits lists and watches (Metadata level: user,
	// user agent, resource), so that a benchmark can say which client
	// made them. Off by default: the tests read only writes, and the
	// reads double the audit log.
	AuditReads bool
	// ControlPlaneCPUs and ControllerManagerCPUs, when set, confine etcd,
	// kube-apiserver, kube-scheduler and kwok, and every controller
	// manager (kube-controller-manager, fleet replicas), to those CPUs
	// (taskset's list syntax, "0" or "1-3"), so that an experiment can tell
	// what the controller managers' CPU costs the control plane on a shared
	// machine from what their requests cost it.
	ControlPlaneCPUs      string
	ControllerManagerCPUs string
	// RealNode starts a real node beside kwok's (realnode.go): a kubelet
	// on containerd, for pods whose containers must run. make node-tools
	// builds what it needs into BinDir.
	RealNode bool
	// RealNodeSchedulable leaves the real node untainted, so that any pod
	// may run there: upstream's tests tolerate no taint of ours.
	RealNodeSchedulable bool
	// ControllerManagerCPUQuota, when set, gives every controller manager
	// a CPU budget with a cgroup quota (CPUQuota); Start fails when the
	// cgroup cannot be written.
	ControllerManagerCPUQuota *CPUQuota
}

// Cluster is a running local control plane.
type Cluster struct {
	Dir string
	// URL of kube-apiserver.
	URL string
	// AdminKubeconfig is a kubeconfig of a system:masters user.
	AdminKubeconfig string
	// AuditLog is the apiserver's audit log: every write (and with
	// Options.AuditReads every list and watch), at Metadata level.
	AuditLog string
	// BinDir is where the binaries came from.
	BinDir string

	controlPlaneCPUs      string
	controllerManagerCPUs string
	cpuCgroups            *cpuCgroups // nil without a quota
	pki                   *pki
	removeDir             bool
	etcdURL               string
	etcd                  *Process
	apiServer             *Process
	scheduler             *Process
	kwok                  *Process
	kcm                   *Process
	node                  *realNode // nil without Options.RealNode
	mu                    sync.Mutex
	others                []*Process
	stopOnce              sync.Once
	kubeconfMu            sync.Mutex
}

// Start brings the control plane up and returns when every component asked
// for is ready. On error everything already started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	binDir, err := resolveBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: opts.Dir, BinDir: binDir, controlPlaneCPUs: opts.ControlPlaneCPUs, controllerManagerCPUs: opts.ControllerManagerCPUs}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "fleet-localcluster-"); err != nil {
			return nil, fmt.Errorf("creating cluster dir: %w", err)
		}
		c.removeDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cluster dir: %w", err)
	}
	if q := opts.ControllerManagerCPUQuota; q != nil {
		if c.cpuCgroups, err = newCPUCgroups(*q); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.pki, err = newPKI(filepath.Join(c.Dir, "pki")); err != nil {
		return c, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return c, err
	}
	if err := c.startAPIServer(ctx, opts.APIServerArgs, opts.AuditReads); err != nil {
		return c, err
	}
	if opts.Scheduler {
		if err := c.startScheduler(ctx); err != nil {
			return c, err
		}
	}
	if opts.KwokNodes > 0 {
		if err := c.startKwok(ctx, opts.KwokNodes, opts.KwokPodParallelism); err != nil {
			return c, err
		}
	}
	if opts.RealNode {
		if err := c.startRealNode(ctx, opts.RealNodeSchedulable); err != nil {
			return c, err
		}
	}
	if opts.KubeControllerManager {
		if c.kcm, _, err = c.StartKubeControllerManager(ctx, "kube-controller-manager", opts.KubeControllerManagerArgs...); err != nil {
			return c, err
		}
	}
	return c, nil
}

func resolveBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("FCM_BIN_DIR")
	}
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin")
	}
	for _, tool := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, tool)); err != nil {
			return "", fmt.Errorf("%s not found in %s (run `make tools`): %w", tool, dir, err)
		}
	}
	return filepath.Abs(dir)
}

// repoRoot walks up from the working directory to the folder holding this
// project's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/fleet-controller-manager/fleet-controller-manager\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root not found above the working directory; set FCM_BIN_DIR")
		}
		dir = parent
	}
}

// Stop ends every process the cluster started, last started first, and
// removes a temporary directory.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		procs := c.Processes()
		// Last started first: controllers before the apiserver, the
		// apiserver before etcd.
		for i := len(procs) - 1; i >= 0; i-- {
			p := procs[i]
			if err := p.Stop(stopGrace); err != nil {
				klog.ErrorS(err, "Stopping process", "process", p.Name)
			}
		}
		c.stopRealNode()
		if c.cpuCgroups != nil {
			if err := c.cpuCgroups.remove(); err != nil {
				klog.ErrorS(err, "Removing the controller managers' CPU cgroups")
			}
		}
		if c.removeDir {
			_ = os.RemoveAll(c.Dir)
		}
	})
}

// ControllerManagerThrottling is how often the controller managers ran out
// of their CPU quota, and how long they waited (false without a quota).
func (c *Cluster) ControllerManagerThrottling() (Throttling, bool, error) {
	if c.cpuCgroups == nil {
		return Throttling{}, false, nil
	}
	t, err := c.cpuCgroups.throttling()
	return t, true, err
}

// startControllerManager starts a controller-manager process: on the
// controller managers' CPUs, under their CPU quota.
func (c *Cluster) startControllerManager(name, bin string, args []string) (*Process, error) {
	p, err := startProcess(c.Dir, name, bin, c.controllerManagerCPUs, args, nil)
	if err != nil {
		return nil, err
	}
	c.track(p)
	if c.cpuCgroups != nil {
		if err := c.cpuCgroups.place(name, p.Pid()); err != nil {
			return p, err
		}
	}
	return p, nil
}

// Processes lists every process the cluster started, in start order.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Process
	seen := map[*Process]bool{}
	for _, p := range append([]*Process{c.etcd, c.apiServer, c.scheduler, c.kwok}, c.others...) {
		if p != nil && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// Etcd is the etcd process (for its memory in benchmarks).
func (c *Cluster) Etcd() *Process { return c.etcd }

// APIServer is the kube-apiserver process (for restart and failure tests).
func (c *Cluster) APIServer() *Process { return c.apiServer }

// KubeControllerManager is the process started by Options.KubeControllerManager.
func (c *Cluster) KubeControllerManager() *Process { return c.kcm }

// RESTConfig is an admin client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg, nil
}

// Client is an admin clientset.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Kubeconfig issues a client certificate for user in groups and writes a
// kubeconfig for it named name.kubeconfig in the cluster directory.
func (c *Cluster) Kubeconfig(name, user string, groups ...string) (string, error) {
	c.kubeconfMu.Lock()
	defer c.kubeconfMu.Unlock()
	path := filepath.Join(c.Dir, name+".kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	certFile, keyFile, err := c.pki.ClientCert(name, user, groups...)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.pki.CAFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// TokenKubeconfig writes a kubeconfig named name.kubeconfig that
// authenticates with a bearer token (a ServiceAccount's).
func (c *Cluster) TokenKubeconfig(name, token string) (string, error) {
	path := filepath.Join(c.Dir, name+".kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.pki.CAFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// CAFile is the cluster CA certificate (also the cluster signing CA).
func (c *Cluster) CAFile() string { return c.pki.CAFile }

// CAKeyFile is the CA's private key, for --cluster-signing-key-file.
func (c *Cluster) CAKeyFile() string { return c.pki.CAKey }

// ServiceAccountKeyFile signs service account tokens (for
// --service-account-private-key-file).
func (c *Cluster) ServiceAccountKeyFile() string { return c.pki.ServiceAccountKey }

func (c *Cluster) startEtcd(ctx context.Context) error {
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.etcd, err = startProcess(c.Dir, "etcd", filepath.Join(c.BinDir, "etcd"), c.controlPlaneCPUs, []string{
		"--name=local",
		"--data-dir=" + filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=local=" + peerURL,
		// Test data is thrown away: skip fsync, the slowest part of etcd on a
		// shared disk.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	}, nil)
	if err != nil {
		return err
	}
	err = waitHTTP(ctx, c.etcd, clientURL+"/health", nil, componentReadyTimeout)
	if err == nil {
		c.etcdURL = clientURL
	}
	return err
}

// AdminCertFiles are the admin user's client certificate and key (for
// other programs that scrape the components, Prometheus say).
func (c *Cluster) AdminCertFiles() (certFile, keyFile string) {
	return filepath.Join(c.pki.dir, "admin.crt"), filepath.Join(c.pki.dir, "admin.key")
}

// AdminHTTPClient talks to components' secure ports (fleet replicas' debug
// and metrics endpoints) as the admin user; it does not verify their
// self-signed serving certificates, which is fine on loopback only.
func (c *Cluster) AdminHTTPClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.AdminCertFiles())
	if err != nil {
		return nil, fmt.Errorf("loading admin client certificate: %w", err)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, //nolint:gosec // loopback component endpoints only
		}},
	}, nil
}
