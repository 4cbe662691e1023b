package localcluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CompactEtcd compacts etcd's history up to its current revision, as
// kube-apiserver's periodic compaction does with a shorter interval, and
// returns that revision. A watch that resumes from an older revision
// afterwards (kube-apiserver's watch cache after etcd restarts, say) is
// told its revision is gone.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	var head struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Any range answers with the store's current revision in its header.
	if err := c.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA==", "limit": 1, "keys_only": true}, &head); err != nil {
		return 0, fmt.Errorf("reading etcd's revision: %w", err)
	}
	rev, err := strconv.ParseInt(head.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd's revision %q: %w", head.Header.Revision, err)
	}
	// Compacted at rev already (nothing written since the last call) is
	// as good.
	if err := c.etcdCall(ctx, "/v3/kv/compaction", map[string]any{"revision": rev, "physical": true}, nil); err != nil && !strings.Contains(err.Error(), "required revision has been compacted") {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	return rev, nil
}

// etcdCall posts req to etcd's JSON gateway and decodes its answer into
// resp (if not nil).
func (c *Cluster) etcdCall(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.etcdURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd answered %s: %s", res.Status, bytes.TrimSpace(data))
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(data, resp)
}

// ServingCert issues a serving certificate for 127.0.0.1 signed by the
// cluster's CA (which every kubeconfig trusts), for a proxy that stands
// in for kube-apiserver.
func (c *Cluster) ServingCert(name string) (certFile, keyFile string, err error) {
	return c.pki.issue(name, pkix.Name{CommonName: name}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		[]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// CapCPU gives process pid (every thread of it) a CPU budget of cores
// with a cgroup v1 quota of its own, as if it had been moved to a node
// short of CPU, until the returned release is called: it says how the
// kernel throttled the process, moves it back to the root cgroup and
// removes the cgroup (a process that has ended meanwhile is fine).
func CapCPU(name string, pid int, cores float64) (release func() (Throttling, error), err error) {
	g := &cpuCgroups{quota: CPUQuota{Cores: cores}}
	g.dir = filepath.Join(cgroupCPURoot, fmt.Sprintf("fleet-cap-%s-%d-%d", name, pid, time.Now().UnixNano()))
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating a cgroup under %s to cap %s's CPU (cgroup v1's cpu controller, writable by this user?): %w", cgroupCPURoot, name, err)
	}
	// Under a hundredth of a core, a longer period: the kernel's least
	// quota is 1 ms per period.
	period := cfsPeriod
	if cores < 0.01 {
		period = time.Second
	}
	if err := g.limitOver(g.dir, period); err != nil {
		return nil, errors.Join(err, g.remove())
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("placing %s (pid %d) under a CPU cap: %w", name, pid, err), g.remove())
	}
	g.quota.Shared = true // one cgroup: throttling reads g.dir
	return func() (Throttling, error) {
		throttled, err := g.throttling()
		if err != nil {
			return throttled, err
		}
		err = os.WriteFile(filepath.Join(cgroupCPURoot, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		if err != nil && !ProcessAlive(pid) {
			err = nil
		}
		if err != nil {
			return throttled, fmt.Errorf("releasing %s (pid %d) from its CPU cap: %w", name, pid, err)
		}
		// The kernel frees a cgroup only once every task has left it.
		for i := 0; ; i++ {
			err := g.remove()
			if err == nil || i == 20 {
				return throttled, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}, nil
}
