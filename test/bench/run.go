package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

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
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir, Dir: dir, Scheduler: true,
		KwokNodes: pods/100 + 2, KwokPodParallelism: 64, AuditReads: true})
	if err != nil {
		return nil, "", err
	}
	defer cluster.Stop()
	client, err := cluster.Client()
	if err != nil {
		return nil, "", err
	}
	b := &bench{ctx: ctx, cluster: cluster, client: client, system: s, limits: l, binDir: binDir, size: cfg.size, figures: map[string]float64{}, ports: map[int]int{}, profileDir: cfg.profile, fleetArgs: cfg.fleetArgs}
	if err := b.startSystem(); err != nil {
		return nil, "", err
	}
	cpuBefore := b.cpuByComponent()
	requestsBefore, err := b.apiserverRequests()
	if err != nil {
		return nil, "", err
	}
	auditFrom := fileSize(cluster.AuditLog)
	machineBefore, err := readMachineCPU()
	if err != nil {
		return nil, "", err
	}
	started := time.Now()

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
	wall := time.Since(started).Seconds()
	machineAfter, err := readMachineCPU()
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
	return b.figures, limiter(cpu, busy, busySeconds, b.isControllerManager), nil
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
	// profileDir: where (a) writes the replicas' CPU profiles ("": none).
	profileDir string
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
	probes := probeNamespaces(shard.DefaultRingConfig)
	for _, ns := range probes {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
		if err := b.createDeployment(ns, "probe", 1); err != nil {
			return err
		}
	}
	return b.waitDeployments(probes, func(d *appsv1.Deployment) bool { return available(d, 1) })
}

// probeNamespaces names one namespace in every partition of ring, so that
// a probe Deployment in each shows every partition's controllers working
// (their informers synced), as one probe shows it for KCM. With a single
// probe a fleet's other partitions were still listing when the workload
// began, and the workload's time counted the fleet's start-up. The ring is
// the replicas' default: -fleet-args that change --partitions or the
// namespace hash leave some partitions unprobed (a weaker wait, no error).
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
		st, err := shard.ReadFleet(ctx, b.client, "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
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

func (b *bench) createNamespace(name string) error {
	_, err := b.client.CoreV1().Namespaces().Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func (b *bench) createDeployment(ns, name string, replicas int) error {
	labels := map[string]string{"app": name}
	_, err := b.client.AppsV1().Deployments(ns).Create(b.ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/bench:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	return err
}

func available(d *appsv1.Deployment, replicas int32) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas == replicas &&
		d.Status.UpdatedReplicas == replicas && d.Status.Replicas == replicas
}

// waitDeployments waits until every Deployment in namespaces satisfies ok.
func (b *bench) waitDeployments(namespaces []string, ok func(*appsv1.Deployment) bool) error {
	pending := ""
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range namespaces {
			list, err := b.client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(list.Items) == 0 {
				pending = ns
				return false, nil
			}
			for i := range list.Items {
				if !ok(&list.Items[i]) {
					pending = ns + "/" + list.Items[i].Name
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for deployments (still %s): %w", pending, err)
	}
	return nil
}

// (a) every namespace's Deployments created at once; time until all are
// available.
func (b *bench) createDeployments() error {
	start := time.Now()
	defer b.profileReplicas(10 * time.Second)()
	for _, ns := range b.namespaces() {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
		for i := range b.size.Deployments {
			if err := b.createDeployment(ns, fmt.Sprintf("web-%d", i), b.size.Replicas); err != nil {
				return err
			}
		}
	}
	want := int32(b.size.Replicas)
	if err := b.waitDeployments(b.namespaces(), func(d *appsv1.Deployment) bool { return available(d, want) }); err != nil {
		return err
	}
	took := time.Since(start).Seconds()
	b.figures["a_converge_s"] = took
	b.figures["a_pods_per_s"] = float64(b.size.Namespaces*b.size.Deployments*b.size.Replicas) / took
	return nil
}

func (b *bench) scaleAll(replicas int) error {
	for _, ns := range b.namespaces() {
		for i := range b.size.Deployments {
			name := fmt.Sprintf("web-%d", i)
			_, err := b.client.AppsV1().Deployments(ns).UpdateScale(b.ctx, name, &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       autoscalingv1.ScaleSpec{Replicas: int32(replicas)},
			}, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
		}
	}
	want := int32(replicas)
	return b.waitDeployments(b.namespaces(), func(d *appsv1.Deployment) bool { return available(d, want) })
}

// (b) all Deployments scaled to 0 and back.
func (b *bench) scaleDownAndUp() error {
	start := time.Now()
	if err := b.scaleAll(0); err != nil {
		return err
	}
	b.figures["b_scale_down_s"] = time.Since(start).Seconds()
	// Pods of a scaled-down ReplicaSet are deleted gracefully; wait until
	// they are gone so scale-up measures creation only.
	if err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range b.namespaces() {
			pods, err := b.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil || len(pods.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("waiting for scaled-down pods to go: %w", err)
	}
	start = time.Now()
	if err := b.scaleAll(b.size.Replicas); err != nil {
		return err
	}
	b.figures["b_scale_up_s"] = time.Since(start).Seconds()
	return nil
}

// (c) Jobs of one pod each, spread over the namespaces, to completion.
func (b *bench) jobs() error {
	start := time.Now()
	namespaces := b.namespaces()
	for i := range b.size.Jobs {
		ns := namespaces[i%len(namespaces)]
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i), Namespace: ns},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "registry.invalid/job:1"}},
			}}},
		}
		if _, err := b.client.BatchV1().Jobs(ns).Create(b.ctx, job, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	done := 0
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		done = 0
		for _, ns := range namespaces {
			list, err := b.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, j := range list.Items {
				for _, c := range j.Status.Conditions {
					if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
						done++
					}
				}
			}
		}
		return done == b.size.Jobs, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d jobs complete: %w", done, b.size.Jobs, err)
	}
	took := time.Since(start).Seconds()
	b.figures["c_jobs_s"] = took
	b.figures["c_jobs_per_s"] = float64(b.size.Jobs) / took
	return nil
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

// (d) kill -9 the KCM leader or one fleet replica, then create one
// Deployment in a namespace it owned and one in a namespace it did not;
// time until each is available.
func (b *bench) failover() error {
	victim := 0
	owned, other := "", ""
	if b.system.Fleet {
		victim = len(b.procs) - 1
		st, err := shard.ReadFleet(b.ctx, b.client, "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
		if err != nil {
			return err
		}
		parts := map[int]string{}
		for _, m := range st.Members {
			for _, p := range m.Partitions {
				parts[p] = m.Name
			}
		}
		for i := 0; owned == "" || other == ""; i++ {
			ns := fmt.Sprintf("failover-%d", i)
			switch parts[shard.DefaultRingConfig.NamespacePartition(ns)] {
			case b.procs[victim].Name:
				if owned == "" {
					owned = ns
				}
			default:
				if other == "" {
					other = ns
				}
			}
		}
	} else {
		var err error
		if victim, err = b.leader(); err != nil {
			return err
		}
		owned, other = "failover-a", "failover-b"
	}
	for _, ns := range []string{owned, other} {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
	}
	b.recordPeaks()
	b.killedCPU += cpuSeconds(b.procs[victim].Pid())
	if err := b.procs[victim].Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-b.procs[victim].Done()
	killed := time.Now()
	for _, ns := range []string{owned, other} {
		if err := b.createDeployment(ns, "after-kill", 2); err != nil {
			return err
		}
	}
	times := map[string]float64{}
	err := wait.PollUntilContextTimeout(b.ctx, 100*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for key, ns := range map[string]string{"d_owned_s": owned, "d_other_s": other} {
			if _, ok := times[key]; ok {
				continue
			}
			d, err := b.client.AppsV1().Deployments(ns).Get(ctx, "after-kill", metav1.GetOptions{})
			if err == nil && available(d, 2) {
				times[key] = time.Since(killed).Seconds()
			}
		}
		return len(times) == 2, nil
	})
	if err != nil {
		return fmt.Errorf("deployments after the kill: %w", err)
	}
	for k, v := range times {
		b.figures[k] = v
	}
	// Bring the victim back for (e).
	p, err := b.startOne(victim)
	if err != nil {
		return err
	}
	b.procs[victim] = p
	if b.system.Fleet {
		return b.waitFleetSettled(len(b.procs))
	}
	return nil
}

// (e) each replica (or KCM instance) restarted gracefully in turn while
// workload (a) is created again in fresh namespaces; the longest time any
// namespace partition (for KCM: the leader Lease) had no owner.
func (b *bench) rollingRestart() error {
	gaps := newOwnershipGaps(b)
	stopWatching := gaps.watch()
	start := time.Now()
	var namespaces []string
	for i := range b.size.Namespaces {
		ns := fmt.Sprintf("rolling-%02d", i)
		namespaces = append(namespaces, ns)
		if err := b.createNamespace(ns); err != nil {
			return err
		}
		for j := range b.size.Deployments {
			if err := b.createDeployment(ns, fmt.Sprintf("web-%d", j), b.size.Replicas); err != nil {
				return err
			}
		}
	}
	for i, p := range b.procs {
		b.recordPeaks()
		b.killedCPU += cpuSeconds(p.Pid())
		if err := p.Stop(time.Minute); err != nil {
			return fmt.Errorf("stopping %s: %w", p.Name, err)
		}
		np, err := b.startOne(i)
		if err != nil {
			return err
		}
		b.procs[i] = np
		if b.system.Fleet {
			// As a StatefulSet or Deployment rollout does: the next
			// replica goes once this one is ready (has taken its share).
			if err := b.waitReady(i); err != nil {
				return err
			}
		}
	}
	want := int32(b.size.Replicas)
	if err := b.waitDeployments(namespaces, func(d *appsv1.Deployment) bool { return available(d, want) }); err != nil {
		return err
	}
	b.figures["e_converge_s"] = time.Since(start).Seconds()
	b.figures["e_max_unowned_s"] = stopWatching()
	return nil
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

// ownershipGaps samples who owns what every 100 ms.
type ownershipGaps struct{ b *bench }

func newOwnershipGaps(b *bench) *ownershipGaps { return &ownershipGaps{b: b} }

// watch samples until the returned function is called, which returns the
// longest time any partition (fleet) or the leader Lease (KCM) was
// without a live holder.
func (g *ownershipGaps) watch() func() float64 {
	ctx, cancel := context.WithCancel(g.b.ctx)
	result := make(chan float64, 1)
	go func() {
		since := map[string]time.Time{}
		longest := 0.0
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				result <- longest
				return
			case <-ticker.C:
			}
			now := time.Now()
			var unowned []string
			if g.b.system.Fleet {
				st, err := shard.ReadFleet(ctx, g.b.client, "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
				if err != nil {
					continue
				}
				for _, p := range st.UnownedPartitions {
					unowned = append(unowned, strconv.Itoa(p))
				}
			} else {
				l, err := g.b.client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
				if err != nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
					continue
				}
				// The leader steps down by releasing (holder emptied) or dies.
				if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" ||
					now.Sub(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
					unowned = []string{"leader"}
				}
			}
			current := map[string]bool{}
			for _, u := range unowned {
				current[u] = true
				if _, ok := since[u]; !ok {
					since[u] = now
				}
			}
			for u, t := range since {
				if !current[u] {
					if gap := now.Sub(t); gap > time.Second {
						klog.InfoS("Without an owner", "what", u, "from", t.Format("15:04:05.000"), "for", gap.Round(time.Millisecond))
					}
					longest = max(longest, now.Sub(t).Seconds())
					delete(since, u)
				}
			}
		}
	}()
	return func() float64 {
		cancel()
		return <-result
	}
}

// cpuByComponent is the CPU-seconds each live process has used.
func (b *bench) cpuByComponent() map[string]float64 {
	out := map[string]float64{}
	for _, p := range b.cluster.Processes() {
		if exited, _ := p.Exited(); exited {
			continue
		}
		out[p.Name] += cpuSeconds(p.Pid())
	}
	return out
}

// recordPeaks notes the peak RSS of live controller-manager processes
// (before one is stopped).
func (b *bench) recordPeaks() {
	if b.rssPeaks == nil {
		b.rssPeaks = map[string]float64{}
	}
	for _, p := range b.procs {
		if exited, _ := p.Exited(); exited {
			continue
		}
		key := p.Name + "@" + strconv.Itoa(p.Pid())
		b.rssPeaks[key] = max(b.rssPeaks[key], peakRSSMiB(p.Pid()))
	}
}

// peakRSS is the largest peak RSS of one controller-manager process and
// the sum over the processes alive at the end.
func (b *bench) peakRSS() (largest, sum float64) {
	b.recordPeaks()
	for _, p := range b.procs {
		v := b.rssPeaks[p.Name+"@"+strconv.Itoa(p.Pid())]
		sum += v
	}
	for _, v := range b.rssPeaks {
		largest = max(largest, v)
	}
	return largest, sum
}

func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+2:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

func peakRSSMiB(pid int) float64 { return statusMiB(pid, "VmHWM:") }

// apiserverRequests is apiserver_request_total by verb (every client).
func (b *bench) apiserverRequests() (map[string]float64, error) {
	body, err := b.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.ctx)
	if err != nil {
		return nil, fmt.Errorf("apiserver metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		verb := labelValue(line, "verb")
		i := strings.LastIndexByte(line, ' ')
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		out[verb] += v
	}
	return out, nil
}

// watches is how many watches the apiserver holds open now.
func (b *bench) watches() (float64, error) {
	return b.apiserverMetricSum("apiserver_longrunning_requests", func(line string) bool { return labelValue(line, "verb") == "WATCH" })
}

// terminatedWatchers is how many watchers the apiserver's watch cache has
// closed for not keeping up (their buffer full past its time budget): each
// makes a client relist, and a relisting kwok replays pod stages.
func (b *bench) terminatedWatchers() (float64, error) {
	return b.apiserverMetricSum("apiserver_terminated_watchers_total", func(string) bool { return true })
}

// initEvents is how many events the apiserver's watch cache has replayed
// to watches starting at an older version (each watch first sends what
// happened since its version, before any new event).
func (b *bench) initEvents() (float64, error) {
	return b.apiserverMetricSum("apiserver_init_events_total", func(string) bool { return true })
}

// apiserverMetricSum sums the apiserver's samples of metric whose line
// match accepts.
func (b *bench) apiserverMetricSum(metric string, match func(line string) bool) (float64, error) {
	body, err := b.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if (strings.HasPrefix(line, metric+"{") || strings.HasPrefix(line, metric+" ")) && match(line) {
			i := strings.LastIndexByte(line, ' ')
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			total += v
		}
	}
	return total, nil
}

func labelValue(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

// limiter names what limited a run: the CPU (and its largest consumer)
// when the machine was busy for most of the run, else the controller
// managers' client rate limits. busy is the machine's busy share over the
// run and busySeconds its busy CPU-seconds, both from /proc/stat; cpu is
// what each process the harness started used, so the rest of the busy
// time (the harness, processes that exited, the kernel) is reported too.
func limiter(cpu map[string]float64, busy, busySeconds float64, isCM func(string) bool) string {
	total := 0.0
	for _, v := range cpu {
		total += v
	}
	var top string
	topV := 0.0
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	sort.Strings(names)
	byKind := map[string]float64{}
	for _, n := range names {
		kind := n
		if isCM(n) {
			kind = "controller manager"
		}
		byKind[kind] += cpu[n]
	}
	for k, v := range byKind {
		if v > topV {
			top, topV = k, v
		}
	}
	what := "client rate limits"
	if busy >= 0.85 {
		what = "CPU"
	}
	share := func(v float64) float64 {
		if busySeconds <= 0 {
			return 0
		}
		return v / busySeconds * 100
	}
	return fmt.Sprintf("%s: machine %.0f%% busy (/proc/stat), most in %s (%.0f%% of the machine's busy time); %.0f%% not in the processes started",
		what, busy*100, top, share(topV), max(0, share(busySeconds-total)))
}
