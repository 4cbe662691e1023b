package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// profileTarget is a process serving /debug/pprof: a name for the file
// and the base URL of its secure port.
type profileTarget struct {
	name, baseURL string
}

// profileConvergence starts a CPU profile of kube-apiserver and of every
// controller-manager process (KCM's too) for d, to name what the
// apiserver and the controller managers spend a workload on, and returns
// a function that waits for them and writes them to b.profileDir.
func (b *bench) profileConvergence(d time.Duration) func() {
	if b.profileDir == "" {
		return func() {}
	}
	if b.profileSpan > 0 {
		d = b.profileSpan
	}
	system := strings.ReplaceAll(b.system.Name, " ", "")
	if limits := strings.Fields(b.limits.Name); len(limits) > 0 {
		system += "-" + limits[0] // "raised (qps 1000, burst 2000)": "raised"
	}
	cfg, err := b.cluster.RESTConfig()
	if err != nil {
		klog.Infof("profiles: %v", err)
		return func() {}
	}
	targets := []profileTarget{{name: "cpu-" + system + "-kube-apiserver", baseURL: cfg.Host}}
	for i, p := range b.procs {
		targets = append(targets, profileTarget{
			name:    fmt.Sprintf("cpu-%s-%s", system, p.Name),
			baseURL: fmt.Sprintf("https://127.0.0.1:%d", b.ports[i]),
		})
	}
	return b.profileCPU(targets, d)
}

// profileCPU takes a CPU profile of d from every target at once and
// returns a function that waits for them and writes <name>.pprof into
// b.profileDir. A profile that fails is logged, not fatal: it is a
// diagnosis.
func (b *bench) profileCPU(targets []profileTarget, d time.Duration) func() {
	httpClient, err := b.cluster.AdminHTTPClient()
	if err != nil {
		klog.Infof("profiles: %v", err)
		return func() {}
	}
	httpClient.Timeout = d + 30*time.Second
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			data, err := fetchProfile(httpClient, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(t.baseURL, "/"), int(d.Seconds())))
			if err == nil {
				err = writeProfile(filepath.Join(b.profileDir, t.name+".pprof"), data)
			}
			if err != nil {
				klog.InfoS("CPU profile failed", "process", t.name, "err", err)
			}
		})
	}
	return wg.Wait
}

// saveHeapProfile writes a process's heap profile (after a GC) to path.
func saveHeapProfile(client *http.Client, port int, path string) error {
	data, err := fetchProfile(client, fmt.Sprintf("https://127.0.0.1:%d/debug/pprof/heap?gc=1", port))
	if err != nil {
		return err
	}
	return writeProfile(path, data)
}

func fetchProfile(client *http.Client, url string) ([]byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("profile %s: HTTP %d: %.200s", url, resp.StatusCode, data)
	}
	return data, nil
}

func writeProfile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing profile: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing profile: %w", err)
	}
	return nil
}
