package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// memorySize is the memory workload: what a controller manager caches in
// a mid-sized cluster. Per namespace: ConfigMaps and Secrets of a few KiB,
// a Service, and Deployments of kwok pods.
type memorySize struct {
	Namespaces, ConfigMaps, Secrets, ObjectKiB, Deployments, Replicas int
}

var defaultMemorySize = memorySize{Namespaces: 200, ConfigMaps: 50, Secrets: 50, ObjectKiB: 3, Deployments: 1, Replicas: 25}

// memorySizeFor spreads the default workload's objects and pods over
// namespaces (-memory-namespaces), to measure what a watch per namespace
// costs.
func memorySizeFor(namespaces int) memorySize {
	m := defaultMemorySize
	total := m.Namespaces
	m.Namespaces = namespaces
	m.ConfigMaps = max(1, m.ConfigMaps*total/namespaces)
	m.Secrets = max(1, m.Secrets*total/namespaces)
	m.Replicas = max(1, m.Replicas*total/namespaces)
	return m
}

// memorySettle is how long the processes run idle after the workload
// converged before RSS is read: caches synced, start-up garbage collected.
const memorySettle = 60 * time.Second

// memoryProfileSpan is how long the CPU profiles of -profile run from the
// system's start: the first half of the fleet's convergence, where the
// apiserver spends the CPU the fleet costs it over KCM.
const memoryProfileSpan = 45 * time.Second

// memoryRun fills a fresh cluster with the memory workload (ConfigMaps,
// Secrets and Services before the system starts, so its caches sync them;
// Deployments after, so its controllers make the pods), waits until every
// Deployment is available, lets the processes settle, and reads each
// controller-manager process's RSS and Go heap, the apiserver's RSS and
// the watches open.
func memoryRun(ctx context.Context, binDir string, s system, l limits, cfg config, dir string) (map[string]float64, string, error) {
	size := cfg.memorySize
	pods := size.Namespaces * size.Deployments * size.Replicas
	b, err := newBench(ctx, binDir, s, l, cfg, pods, dir)
	if err != nil {
		return nil, "", err
	}
	defer b.cluster.Stop()
	cluster := b.cluster
	payload := strings.Repeat("x", size.ObjectKiB<<10)
	namespaces := make([]string, size.Namespaces)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("mem-%03d", i)
	}
	created := time.Now()
	if err := parallel(namespaces, 16, func(ns string) error {
		return b.createNamespaceObjects(ns, size.ConfigMaps, size.Secrets, payload)
	}); err != nil {
		return nil, "", fmt.Errorf("creating the memory workload: %w", err)
	}
	b.figures["m_objects_created_s"] = time.Since(created).Seconds()
	cpuBefore := b.cpuByComponent()
	auditFrom := fileSize(cluster.AuditLog)
	machineBefore, err := readMachineCPU(b.busyCPUs)
	if err != nil {
		return nil, "", err
	}
	throttledBefore, _, err := cluster.ControllerManagerThrottling()
	if err != nil {
		return nil, "", err
	}
	if err := b.startSystem(); err != nil {
		return nil, "", err
	}
	started := time.Now()
	stopCMCPUs := b.cmCPUsMeter()
	waitProfiles := b.profileConvergence(memoryProfileSpan)
	if err := parallel(namespaces, 16, func(ns string) error {
		for i := range size.Deployments {
			if err := b.createDeployment(ns, fmt.Sprintf("web-%d", i), size.Replicas); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, "", err
	}
	if err := b.waitDeployments(namespaces, func(d *appsv1.Deployment) bool { return available(d, int32(size.Replicas)) }); err != nil {
		return nil, "", err
	}
	b.figures["m_converge_s"] = time.Since(started).Seconds()
	cpuConverged := b.cpuByComponent()
	for _, p := range b.procs {
		b.figures["m_cm_cpu_s"] += cpuConverged[p.Name] - cpuBefore[p.Name]
	}
	if err := b.recordThrottling(throttledBefore); err != nil {
		return nil, "", err
	}
	stopCMCPUs()
	waitProfiles()
	// What limited the workload, from the system's start to convergence.
	limitedBy, err := b.limitedSince(machineBefore, cpuBefore)
	if err != nil {
		return nil, "", err
	}
	mem, err := b.readProcessMemory(memorySettle, cfg.profile)
	if err != nil {
		return nil, "", err
	}
	if !s.Fleet {
		// KCM: the leader holds the caches; a standby holds little.
		mem = mem.only(0)
	}
	rss, anon, heap, unreturned, stacks := mem.rss, mem.anon, mem.heap, mem.unreturned, mem.stacks
	b.figures["m_rss_median_mib"], b.figures["m_rss_largest_mib"], b.figures["m_rss_sum_mib"] = medianLargestSum(rss)
	b.figures["m_anon_median_mib"], b.figures["m_anon_largest_mib"], b.figures["m_anon_sum_mib"] = medianLargestSum(anon)
	b.figures["m_heap_median_mib"], b.figures["m_heap_largest_mib"], _ = medianLargestSum(heap)
	b.figures["m_heap_unreturned_median_mib"], _, _ = medianLargestSum(unreturned)
	b.figures["m_stack_median_mib"], _, _ = medianLargestSum(stacks)
	b.figures["m_apiserver_rss_mib"] = mem.apiserverRSS
	b.figures["m_apiserver_cpu_s"] = b.cpuByComponent()[cluster.APIServer().Name] - cpuBefore[cluster.APIServer().Name]
	audit, err := readAuditCounts(cluster.AuditLog, auditFrom)
	if err != nil {
		return nil, "", err
	}
	audit.addFigures(b.figures)
	if w, err := b.watches(); err == nil {
		b.figures["watches_open"] = w
	}
	if w, err := b.terminatedWatchers(); err == nil {
		b.figures["terminated_watchers"] = w
	}
	if n, err := b.initEvents(); err == nil {
		b.figures["init_events"] = n
	}
	return b.figures, fmt.Sprintf("%s (%d controller-manager processes)", limitedBy, len(rss)), nil
}

// createNamespaceObjects creates namespace ns with configMaps ConfigMaps
// and secrets Secrets holding payload, and a Service: what a controller
// manager caches before any controller acts.
func (b *bench) createNamespaceObjects(ns string, configMaps, secrets int, payload string) error {
	if err := b.createNamespace(ns); err != nil {
		return err
	}
	for i := range configMaps {
		if _, err := b.client.CoreV1().ConfigMaps(ns).Create(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"payload": payload}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ConfigMap %s/cm-%03d: %w", ns, i, err)
		}
	}
	for i := range secrets {
		if _, err := b.client.CoreV1().Secrets(ns).Create(b.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%03d", i)},
			StringData: map[string]string{"payload": payload}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Secret %s/secret-%03d: %w", ns, i, err)
		}
	}
	_, err := b.client.CoreV1().Services(ns).Create(b.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Service %s/web: %w", ns, err)
	}
	return nil
}

// processMemory is what each controller-manager process held over a
// settle time, in b.procs order, and the apiserver's RSS.
type processMemory struct {
	rss, anon, heap, unreturned, stacks []float64
	apiserverRSS                        float64
}

// only keeps process i (KCM's leader: a standby holds little).
func (m processMemory) only(i int) processMemory {
	return processMemory{rss: m.rss[i : i+1], anon: m.anon[i : i+1], heap: m.heap[i : i+1],
		unreturned: m.unreturned[i : i+1], stacks: m.stacks[i : i+1], apiserverRSS: m.apiserverRSS}
}

// readProcessMemory reads every controller-manager process's RSS and Go
// heap and the apiserver's RSS. RSS moves with each process's GC cycle
// (the apiserver's by more than 20% between single readings of one
// setup), so it is the mean of readings every few seconds over settle.
// With profileDir, a heap profile of each process is saved there.
func (b *bench) readProcessMemory(settle time.Duration, profileDir string) (processMemory, error) {
	var m processMemory
	pids := []int{b.cluster.APIServer().Pid()}
	for _, p := range b.procs {
		pids = append(pids, p.Pid())
	}
	rssMeans, anonMeans, err := sampleMemory(b.ctx, pids, settle, memorySample)
	if err != nil {
		return m, err
	}
	m.apiserverRSS = rssMeans[0]
	httpClient, err := b.cluster.AdminHTTPClient()
	if err != nil {
		return m, err
	}
	for i, p := range b.procs {
		if profileDir != "" {
			if err := saveHeapProfile(httpClient, b.ports[i], filepath.Join(profileDir, fmt.Sprintf("heap-%s-%s.pb.gz", strings.ReplaceAll(b.system.Name, " ", ""), p.Name))); err != nil {
				return m, err
			}
		}
		stats, err := metricValues(httpClient, b.ports[i], runtimeMemoryMetrics...)
		if err != nil {
			return m, err
		}
		m.rss = append(m.rss, rssMeans[i+1])
		m.anon = append(m.anon, anonMeans[i+1])
		m.heap = append(m.heap, stats["go_memstats_heap_inuse_bytes"]/(1<<20))
		m.unreturned = append(m.unreturned, (stats["go_memstats_heap_idle_bytes"]-stats["go_memstats_heap_released_bytes"])/(1<<20))
		m.stacks = append(m.stacks, stats["go_memstats_stack_inuse_bytes"]/(1<<20))
		// Where the anonymous RSS goes, for the log (the figures keep the
		// median and largest).
		klog.InfoS("Process memory", "system", b.system.Name, "process", p.Name, "rssMiB", m.rss[i], "anonMiB", m.anon[i],
			"heapInuseMiB", m.heap[i], "heapFreeUnreturnedMiB", m.unreturned[i], "stackMiB", m.stacks[i],
			"nextGCMiB", stats["go_memstats_next_gc_bytes"]/(1<<20), "runtimeMetadataMiB", (stats["go_memstats_mspan_inuse_bytes"]+stats["go_memstats_mcache_inuse_bytes"]+stats["go_memstats_gc_sys_bytes"]+stats["go_memstats_other_sys_bytes"]+stats["go_memstats_buck_hash_sys_bytes"])/(1<<20),
			"goroutines", stats["go_goroutines"])
	}
	return m, nil
}

// parallel runs fn for every item, width at a time; the first error wins.
func parallel(items []string, width int, fn func(string) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan string)
	for range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for item := range next {
				if err := fn(item); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, item := range items {
		next <- item
	}
	close(next)
	wg.Wait()
	return first
}

func medianLargestSum(values []float64) (median, largest, sum float64) {
	if len(values) == 0 {
		return 0, 0, 0
	}
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	for _, v := range sorted {
		sum += v
	}
	n := len(sorted)
	median = sorted[n/2]
	if n%2 == 0 {
		median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return median, sorted[n-1], sum
}

// memorySample is how often sampleMemory reads.
const memorySample = 5 * time.Second

// sampleMemory reads the RSS and anonymous RSS of each pid every interval
// for d and returns their means, in pids' order.
func sampleMemory(ctx context.Context, pids []int, d, interval time.Duration) (rss, anon []float64, err error) {
	rss, anon = make([]float64, len(pids)), make([]float64, len(pids))
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	deadline := time.After(d)
	for n := 1; ; n++ {
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		for i, pid := range pids {
			// Running means, so a slow tick skews nothing.
			rss[i] += (statusMiB(pid, "VmRSS:") - rss[i]) / float64(n)
			anon[i] += (statusMiB(pid, "RssAnon:") - anon[i]) / float64(n)
		}
		select {
		case <-deadline:
			return rss, anon, nil
		default:
		}
	}
}

// statusMiB reads a kB field of /proc/PID/status in MiB.
func statusMiB(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// runtimeMemoryMetrics are the Go runtime's memory figures every
// controller manager serves (component-base registers them).
var runtimeMemoryMetrics = []string{
	"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
	"go_memstats_stack_inuse_bytes", "go_memstats_next_gc_bytes", "go_memstats_mspan_inuse_bytes",
	"go_memstats_mcache_inuse_bytes", "go_memstats_gc_sys_bytes", "go_memstats_other_sys_bytes",
	"go_memstats_buck_hash_sys_bytes", "go_goroutines",
}

// metricValues reads unlabelled metrics of a controller manager, each of
// which must be served.
func metricValues(client *http.Client, port int, names ...string) (map[string]float64, error) {
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, fmt.Errorf("metrics on port %d: %w", port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics on port %d: HTTP %d, %v", port, resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range names {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return nil, fmt.Errorf("metrics on port %d: %s: %w", port, name, err)
				}
				out[name] = f
			}
		}
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("metrics on port %d: no %s", port, name)
		}
	}
	return out, nil
}
