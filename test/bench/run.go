package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// workloadTimeout bounds each wait; a system that needs longer fails the run.
const workloadTimeout = 15 * time.Minute

// idleSettle: how long after (a) converged the processes count as idle.
const idleSettle = 10 * time.Second

// benchRun starts a fresh control plane and the system, runs the
// workloads, and returns the figures and what limited the run.
func benchRun(ctx context.Context, binDir string, s system, l limits, cfg config, dir string) (map[string]float64, string, error) {
	pods := cfg.size.Namespaces*cfg.size.Deployments*cfg.size.Replicas + cfg.size.Jobs
	b, err := newBench(ctx, binDir, s, l, cfg, pods, dir)
	if err != nil {
		return nil, "", err
	}
	defer b.cluster.Stop()
	cluster := b.cluster
	if err := b.startSystem(); err != nil {
		return nil, "", err
	}
	cpuBefore := b.cpuByComponent()
	requestsBefore, err := b.apiserverRequests()
	if err != nil {
		return nil, "", err
	}
	auditFrom := fileSize(cluster.AuditLog)
	machineBefore, err := readMachineCPU(b.busyCPUs)
	if err != nil {
		return nil, "", err
	}
	started := time.Now()
	stopCMCPUs := b.cmCPUsMeter()
	throttledBefore, _, err := cluster.ControllerManagerThrottling()
	if err != nil {
		return nil, "", err
	}

	type step struct {
		name string
		fn   func() error
	}
	steps := []step{{"a", b.createDeployments}}
	if cfg.scale {
		steps = append(steps, step{"b", b.scaleDownAndUp})
	}
	if cfg.jobs {
		steps = append(steps, step{"c", b.jobs})
	}
	if cfg.failover && s.Replicas > 1 {
		steps = append(steps, step{"d", b.failover})
	}
	if cfg.rolling && s.Replicas > 1 {
		steps = append(steps, step{"e", b.rollingRestart})
	}
	if cfg.hot {
		steps = append(steps, step{"h", b.hotTenant})
	}
	if cfg.existing {
		steps = append(steps, step{"i", b.existingScaleUp})
	}
	if cfg.placement {
		steps = append(steps, step{"j", b.placement})
	}
	// Deletions last: they take (a)'s objects away.
	if cfg.cascade {
		steps = append(steps, step{"g", b.deleteDeployments})
	}
	if cfg.nsDelete {
		steps = append(steps, step{"f", b.deleteNamespaces})
	}
	for _, step := range steps {
		if err := step.fn(); err != nil {
			return nil, "", fmt.Errorf("workload (%s): %w", step.name, err)
		}
	}
	settled, err := b.settleWrites(ctx)
	if err != nil {
		return nil, "", err
	}
	b.figures["settle_s"] = settled.Seconds()
	wall := time.Since(started).Seconds()
	stopCMCPUs()
	machineAfter, err := readMachineCPU(b.busyCPUs)
	if err != nil {
		return nil, "", err
	}
	busy, busySeconds := busyBetween(machineBefore, machineAfter)
	b.figures["machine_busy_share"] = busy

	cpuAfter := b.cpuByComponent()
	cpu := map[string]float64{}
	total := 0.0
	for name, after := range cpuAfter {
		cpu[name] = after - cpuBefore[name]
		total += cpu[name]
	}
	cmCPU := 0.0
	for name, v := range cpu {
		if b.isControllerManager(name) {
			cmCPU += v
		}
	}
	b.figures["cpu_seconds"] = cmCPU + b.killedCPU
	if err := b.recordThrottling(throttledBefore); err != nil {
		return nil, "", err
	}
	b.figures["peak_rss_mib"], b.figures["peak_rss_sum_mib"] = b.peakRSS()
	requestsAfter, err := b.apiserverRequests()
	if err != nil {
		return nil, "", err
	}
	for verb, n := range requestsAfter {
		if d := n - requestsBefore[verb]; d > 0 {
			b.figures["requests_"+strings.ToLower(verb)] = d
		}
	}
	if w, err := b.watches(); err == nil {
		b.figures["watches_open"] = w
	}
	if w, err := b.terminatedWatchers(); err == nil {
		b.figures["terminated_watchers"] = w
	}
	if n, err := b.initEvents(); err == nil {
		b.figures["init_events"] = n
	}
	if err := b.watchEvents(b.figures); err != nil {
		return nil, "", err
	}
	// Read after the accounting above, so the idle wait is not in it.
	n, err := b.idleGoroutines()
	if err != nil {
		return nil, "", err
	}
	b.figures["idle_goroutines"] = n
	audit, err := readAuditCounts(cluster.AuditLog, auditFrom)
	if err != nil {
		return nil, "", err
	}
	audit.addFigures(b.figures)
	b.figures["lease_writes_per_min"] = audit.leaseWrites / (wall / 60)
	b.figures["apiserver_cpu_s"] = cpu[cluster.APIServer().Name]
	return b.figures, limiter(cpu, busy, busySeconds, b.isControllerManager, b.busyCPUs != nil), nil
}

// newBench starts a fresh control plane for a run of system s (dir: its
// folder, "" for a temporary one): kube-scheduler, kwok with a node per
// 100 of pods, lists and watches audited.
func newBench(ctx context.Context, binDir string, s system, l limits, cfg config, pods int, dir string, apiServerArgs ...string) (*bench, error) {
	apiServerArgs = append(apiServerArgs, cfg.apiServerArgs...)
	if cfg.profile != "" {
		// The CPU profiles of -profile include the apiserver's.
		apiServerArgs = append(apiServerArgs, "--profiling=true")
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir, Dir: dir, Scheduler: true,
		KwokNodes: pods/100 + 2, KwokPodParallelism: 64, APIServerArgs: apiServerArgs, AuditReads: true,
		ControlPlaneCPUs: cfg.cpus.ControlPlane, ControllerManagerCPUs: cfg.cpus.ControllerManagers, ControllerManagerCPUQuota: cfg.cpuQuota})
	if err != nil {
		return nil, err
	}
	client, err := cluster.Client()
	if err != nil {
		cluster.Stop()
		return nil, err
	}
	return &bench{ctx: ctx, cluster: cluster, client: client, system: s, limits: l, binDir: binDir, size: cfg.size,
		figures: map[string]float64{}, ports: map[int]int{}, profileDir: cfg.profile, profileSpan: cfg.profileSpan, fleetArgs: cfg.fleetArgs, ring: ringOf(cfg.fleetArgs), extraPodWatchers: cfg.extraPodWatchers, busyCPUs: cfg.cpus.controlPlaneCPUs(), cmCPUs: cfg.cpus.controllerManagerCPUs(),
		out: cfg.out, placementSteady: cfg.placementSteady}, nil
}

type bench struct {
	ctx       context.Context
	cluster   *localcluster.Cluster
	client    kubernetes.Interface
	system    system
	limits    limits
	binDir    string
	size      size
	figures   map[string]float64
	procs     []*localcluster.Process
	ports     map[int]int // fleet replica -> secure port
	killedCPU float64
	rssPeaks  map[string]float64
	fleetArgs []string
	// ring: what the fleet's replicas place namespaces by (ringOf).
	ring shard.RingConfig
	// extraPodWatchers: cluster-wide Pod watches opened once the system is up.
	extraPodWatchers int
	// profileDir: where (a) writes the replicas' CPU profiles ("": none).
	profileDir string
	// profileSpan replaces the mode's span of the CPU profiles (0: keep it).
	profileSpan time.Duration
	// busyCPUs: the CPUs whose busy share says a run was CPU-bound: the
	// control plane's with -cpus, nil for the whole machine.
	busyCPUs []int
	// cmCPUs: the controller managers' CPUs with -cpus (nil without).
	cmCPUs []int
	// out: the results folder, for (j)'s chart and samples.
	out string
	// placementSteady: (j)'s steady span (-placement-steady).
	placementSteady time.Duration
}

// cmCPUsMeter reads the controller managers' CPUs' busy share from now
// until the returned function is called, into the figure cm_cpus_busy_share
// (nothing without -cpus).
func (b *bench) cmCPUsMeter() func() {
	if b.cmCPUs == nil {
		return func() {}
	}
	before, err := readMachineCPU(b.cmCPUs)
	if err != nil {
		return func() {}
	}
	return func() {
		if after, err := readMachineCPU(b.cmCPUs); err == nil {
			b.figures["cm_cpus_busy_share"], _ = busyBetween(before, after)
		}
	}
}

func (b *bench) isControllerManager(name string) bool {
	return strings.HasPrefix(name, "kcm-") || strings.HasPrefix(name, "fcm-")
}

func (b *bench) limitArgs() []string {
	return []string{"--kube-api-qps=" + strconv.Itoa(b.limits.QPS), "--kube-api-burst=" + strconv.Itoa(b.limits.Burst)}
}

func (b *bench) startOne(i int) (*localcluster.Process, error) {
	if b.system.Fleet {
		p, port, err := b.cluster.StartFleetReplica(b.ctx, filepath.Join(b.binDir, "fleet-controller-manager"), fmt.Sprintf("fcm-%d", i), append(b.limitArgs(), b.fleetArgs...)...)
		if err == nil {
			b.ports[i] = port
		}
		return p, err
	}
	p, port, err := b.cluster.StartKubeControllerManager(b.ctx, fmt.Sprintf("kcm-%d", i), b.limitArgs()...)
	if err == nil {
		b.ports[i] = port
	}
	return p, err
}

// idleGoroutines is the largest go_goroutines of the controller-manager
// processes, read idleSettle after the last workload finished: what a process
// holds while nothing happens (goroutines per worker, broadcaster, queue).
func (b *bench) idleGoroutines() (float64, error) {
	select {
	case <-time.After(idleSettle):
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
	httpClient, err := b.cluster.AdminHTTPClient()
	if err != nil {
		return 0, err
	}
	var largest float64
	for i, port := range b.ports {
		resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
		if err != nil {
			return 0, fmt.Errorf("metrics of controller manager %d: %w", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("metrics of controller manager %d: HTTP %d, %v", i, resp.StatusCode, err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
				n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				largest = max(largest, n)
			}
		}
	}
	return largest, nil
}

// startSystem starts every process and waits until the system works: for
// a fleet, every partition runs somewhere; for all, a probe Deployment is
// available.
func (b *bench) startSystem() error {
	// The probes go first, as a cluster's namespaces are there before its
	// controller manager: a fleet placing by weight deals the namespaces
	// created while it runs (shard's weightdeal.go), and the probes are
	// not the workload's.
	probes := probeNamespaces(b.ring)
	for _, ns := range probes {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
		if err := b.createDeployment(ns, "probe", 1); err != nil {
			return err
		}
	}
	for i := range b.system.Replicas {
		p, err := b.startOne(i)
		if err != nil {
			return err
		}
		b.procs = append(b.procs, p)
	}
	if b.system.Fleet {
		if err := b.waitFleetSettled(b.system.Replicas); err != nil {
			return err
		}
	}
	if err := b.waitDeployments(probes, func(d *appsv1.Deployment) bool { return available(d, 1) }); err != nil {
		return err
	}
	return b.startExtraPodWatchers(b.extraPodWatchers)
}

// probeNamespaces names one namespace in every partition of ring, so that
// a probe Deployment in each shows every partition's controllers working
// (their informers synced), as one probe shows it for KCM. With a single
// probe a fleet's other partitions were still listing when the workload
// began, and the workload's time counted the fleet's start-up. The ring is
// the replicas' (ringOf -fleet-args), and KCM's cluster holds
// the same probes, so every system starts from one cluster.
func probeNamespaces(ring shard.RingConfig) []string {
	byPartition := map[int]string{}
	for i := 0; len(byPartition) < ring.Partitions; i++ {
		ns := fmt.Sprintf("bench-probe-%d", i)
		if _, ok := byPartition[ring.NamespacePartition(ns)]; !ok {
			byPartition[ring.NamespacePartition(ns)] = ns
		}
	}
	out := make([]string, 0, len(byPartition))
	for _, ns := range byPartition {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

func (b *bench) waitFleetSettled(members int) error {
	return wait.PollUntilContextTimeout(b.ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, m := range st.Members {
			if m.Health == shard.MemberReady {
				ready++
			}
		}
		return ready == members && len(st.UnownedPartitions) == 0, nil
	})
}

func (b *bench) namespaces() []string {
	var out []string
	for i := range b.size.Namespaces {
		out = append(out, fmt.Sprintf("bench-%02d", i))
	}
	return out
}

// leader is the process that holds KCM's leader Lease.
func (b *bench) leader() (int, error) {
	l, err := b.client.CoordinationV1().Leases("kube-system").Get(b.ctx, "kube-controller-manager", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return 0, fmt.Errorf("KCM leader lease: %w", err)
	}
	// Every instance runs on this host, and the Lease names host_uid: ask
	// each instance's log which one became leader.
	for i, p := range b.procs {
		if strings.Contains(strings.ToLower(p.LogTail(4000)), "successfully acquired lease") {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no KCM process logged acquiring %s", *l.Spec.HolderIdentity)
}

// waitReady waits until fleet replica i answers /readyz with 200.
func (b *bench) waitReady(i int) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", b.ports[i])
	return wait.PollUntilContextTimeout(b.ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// recordThrottling records how the controller managers' CPU quota
// (-cm-cpu-cap) held them back since before: the time their processes
// waited for the next period, and the share of periods they ran out of
// it in. Nothing without a quota.
func (b *bench) recordThrottling(before localcluster.Throttling) error {
	after, ok, err := b.cluster.ControllerManagerThrottling()
	if err != nil || !ok {
		return err
	}
	b.figures["cm_throttled_s"] = (after.Time - before.Time).Seconds()
	if periods := after.Periods - before.Periods; periods > 0 {
		b.figures["cm_throttled_share"] = float64(after.Throttled-before.Throttled) / float64(periods)
	}
	return nil
}
