package main

// The scale ladder (-scale): the same cluster shape at several sizes, for
// KCM and fleets of 1, 3 and 5, to measure how each figure grows with the
// cluster. At each size: what each process holds, the time to converge a
// scale-up, a kill -9 failover, a whole restart and (fleet of three) a
// graceful join of a fourth replica.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// scaleShape is one namespace of the ladder; a rung is a number of them.
// The ConfigMaps and Secrets are 16 KiB, the size of a small Helm
// release Secret, so that the largest rung takes KCM's RSS above 1 GiB with
// 40 objects per namespace instead of hundreds: creating objects, not
// their bytes, is what the 2-core control plane is slow at (the memory
// workload created 520 objects of 3 KiB per second). KCM caches the
// payload of every ConfigMap and Secret; a fleet caches it only for the
// namespaces it owns, and the singletons read metadata. So the fleet's
// memory ratios depend on the payload: the memory workload's 3 KiB objects
// give the same measurement at a smaller payload.
type scaleShape struct {
	ConfigMaps, Secrets, ObjectKiB, Replicas int
}

var defaultScaleShape = scaleShape{ConfigMaps: 20, Secrets: 20, ObjectKiB: 16, Replicas: 12}

// defaultScaleSizes are the rungs in namespaces: 9x from the smallest to
// the largest, which holds 36,000 ConfigMaps and Secrets and 10,800 pods.
var defaultScaleSizes = []int{100, 300, 900}

// scaleSettle is how long the processes run after convergence while their
// RSS is read (the memory workload's minute, halved: the ladder runs 12
// cells).
const scaleSettle = 30 * time.Second

// scaleFailoverSample is how many of the victim's namespaces get a
// Deployment scaled after a kill -9: enough to find the last one served,
// few enough that KCM (whose victim owned every namespace) and a fleet
// (whose victim owned a third) do the same work after the kill.
const scaleFailoverSample = 20

// scaleRun fills a fresh cluster with n namespaces of the ladder's shape,
// starts the system and measures it (figures prefixed s_).
func scaleRun(ctx context.Context, binDir string, s system, l limits, cfg config, n int, dir string) (map[string]float64, string, error) {
	shape := cfg.scaleShape
	maxPods := n * (shape.Replicas + shape.Replicas/4 + 2)
	// The object count (apiserver_resource_objects) is polled every
	// minute by default; the ladder reads it 30 s after convergence.
	b, err := newBench(ctx, binDir, s, l, cfg, maxPods, dir, "--etcd-count-metric-poll-period=5s")
	if err != nil {
		return nil, "", err
	}
	defer b.cluster.Stop()
	cluster := b.cluster
	sc := &scaleCell{bench: b, shape: shape}
	for i := range n {
		sc.namespaces = append(sc.namespaces, fmt.Sprintf("scale-%04d", i))
	}
	payload := strings.Repeat("x", shape.ObjectKiB<<10)
	created := time.Now()
	if err := parallel(sc.namespaces, 32, func(ns string) error {
		return b.createNamespaceObjects(ns, shape.ConfigMaps, shape.Secrets, payload)
	}); err != nil {
		return nil, "", fmt.Errorf("creating %d namespaces of objects: %w", n, err)
	}
	b.figures["s_created_s"] = time.Since(created).Seconds()

	cpuBefore := b.cpuByComponent()
	requestsBefore, err := b.apiserverRequests()
	if err != nil {
		return nil, "", err
	}
	machineBefore, err := readMachineCPU(b.busyCPUs)
	if err != nil {
		return nil, "", err
	}
	started := time.Now()
	if err := b.startSystem(); err != nil {
		return nil, "", err
	}
	b.figures["s_start_s"] = time.Since(started).Seconds()
	stopWatch, err := sc.watchDeployments()
	if err != nil {
		return nil, "", err
	}
	defer stopWatch()

	steps := []struct {
		name string
		fn   func() error
	}{
		{"converge", sc.converge},
		{"memory", sc.memory},
		{"scale-up", sc.scaleUp},
		{"failover", sc.failover},
		{"restart", sc.restart},
		{"join", sc.join},
	}
	var limitedBy string
	for _, step := range steps {
		// converge always runs: every later step acts on its Deployments.
		if len(cfg.scaleSteps) > 0 && step.name != "converge" && !slices.Contains(cfg.scaleSteps, step.name) {
			continue
		}
		klog.InfoS("Scale step", "system", s.Name, "namespaces", n, "step", step.name)
		if err := step.fn(); err != nil {
			return nil, "", fmt.Errorf("%s at %d namespaces: %w", step.name, n, err)
		}
		if step.name == "converge" {
			// What limited the convergence, from the system's start.
			if limitedBy, err = b.limitedSince(machineBefore, cpuBefore); err != nil {
				return nil, "", err
			}
		}
	}
	if len(cfg.scaleSteps) > 0 {
		// The whole cell's figures mean the whole cell's steps.
		return b.figures, fmt.Sprintf("%s (%d namespaces)", limitedBy, n), nil
	}
	// The apiserver's work over everything the system did.
	b.figures["s_apiserver_cpu_total_s"] = b.cpuByComponent()[cluster.APIServer().Name] - cpuBefore[cluster.APIServer().Name]
	requestsAfter, err := b.apiserverRequests()
	if err != nil {
		return nil, "", err
	}
	for _, verb := range []string{"LIST", "WATCH"} {
		b.figures["requests_"+strings.ToLower(verb)] = requestsAfter[verb] - requestsBefore[verb]
	}
	if w, err := b.terminatedWatchers(); err == nil {
		b.figures["terminated_watchers"] = w
	}
	if e, err := b.initEvents(); err == nil {
		b.figures["init_events"] = e
	}
	return b.figures, fmt.Sprintf("%s (%d namespaces)", limitedBy, n), nil
}

// scaleCell is one system at one rung of the ladder.
type scaleCell struct {
	*bench
	shape      scaleShape
	namespaces []string
	// replicas is what every Deployment asks for now.
	replicas int

	mu          sync.Mutex
	deployments map[string]*appsv1.Deployment // by namespace (web-0)
}

// watchDeployments keeps sc.deployments current from one watch of every
// Deployment, so that waiting for a thousand of them costs the apiserver
// no polling lists.
func (sc *scaleCell) watchDeployments() (stop func(), err error) {
	sc.deployments = map[string]*appsv1.Deployment{}
	ctx, cancel := context.WithCancel(sc.ctx)
	list, err := sc.client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listing Deployments: %w", err)
	}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := sc.client.AppsV1().Deployments("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				// Resuming failed (too old): list again.
				if l, err := sc.client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{}); err == nil {
					sc.mu.Lock()
					for i := range l.Items {
						sc.deployments[l.Items[i].Namespace] = &l.Items[i]
					}
					sc.mu.Unlock()
					rv = l.ResourceVersion
				}
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				d, ok := ev.Object.(*appsv1.Deployment)
				if !ok {
					continue
				}
				rv = d.ResourceVersion
				if d.Name != "web-0" {
					continue
				}
				sc.mu.Lock()
				sc.deployments[d.Namespace] = d
				sc.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return cancel, nil
}

// waitServed waits until web-0 in each of namespaces is available at
// sc.replicas and returns how long after since the first and the last
// became so.
func (sc *scaleCell) waitServed(namespaces []string, since time.Time) (first, last float64, err error) {
	want := int32(sc.replicas)
	served := map[string]bool{}
	err = wait.PollUntilContextTimeout(sc.ctx, 100*time.Millisecond, workloadTimeout, true, func(context.Context) (bool, error) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		for _, ns := range namespaces {
			if served[ns] {
				continue
			}
			if d := sc.deployments[ns]; d != nil && d.Spec.Replicas != nil && *d.Spec.Replicas == want && available(d, want) {
				served[ns] = true
				took := time.Since(since).Seconds()
				if len(served) == 1 {
					first = took
				}
				last = took
			}
		}
		return len(served) == len(namespaces), nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%d of %d namespaces served at %d replicas: %w", len(served), len(namespaces), want, err)
	}
	return first, last, nil
}

// scaleTo sets web-0's replicas in each of namespaces.
func (sc *scaleCell) scaleTo(namespaces []string, replicas int) error {
	sc.replicas = replicas
	return parallel(namespaces, 16, func(ns string) error {
		_, err := sc.client.AppsV1().Deployments(ns).UpdateScale(sc.ctx, "web-0", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: ns},
			Spec:       autoscalingv1.ScaleSpec{Replicas: int32(replicas)},
		}, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("scaling %s/web-0 to %d: %w", ns, replicas, err)
		}
		return nil
	})
}

// converge creates one Deployment per namespace: time until all are
// available.
func (sc *scaleCell) converge() error {
	start := time.Now()
	sc.replicas = sc.shape.Replicas
	if err := parallel(sc.namespaces, 16, func(ns string) error { return sc.createDeployment(ns, "web-0", sc.replicas) }); err != nil {
		return err
	}
	_, last, err := sc.waitServed(sc.namespaces, start)
	sc.figures["s_converge_s"] = last
	return err
}

// memory reads what each process holds once converged, and the cluster's
// object count (the apiserver's, every resource).
func (sc *scaleCell) memory() error {
	mem, err := sc.readProcessMemory(scaleSettle, "")
	if err != nil {
		return err
	}
	if !sc.system.Fleet {
		leader, err := sc.leader()
		if err != nil {
			return err
		}
		standby := 1 - leader
		sc.figures["s_kcm_standby_rss_mib"] = mem.rss[standby]
		mem = mem.only(leader)
	}
	sc.figures["s_rss_median_mib"], sc.figures["s_rss_largest_mib"], sc.figures["s_rss_sum_mib"] = medianLargestSum(mem.rss)
	sc.figures["s_heap_median_mib"], sc.figures["s_heap_largest_mib"], _ = medianLargestSum(mem.heap)
	sc.figures["s_apiserver_rss_mib"] = mem.apiserverRSS
	if etcd := sc.cluster.Etcd(); etcd != nil {
		sc.figures["s_etcd_rss_mib"] = statusMiB(etcd.Pid(), "VmRSS:")
	}
	// A resource whose count could not be read says -1.
	objects, err := sc.apiserverMetricSum("apiserver_resource_objects", func(line string) bool { return !strings.HasSuffix(line, " -1") })
	if err != nil {
		return err
	}
	sc.figures["s_objects"] = objects
	return nil
}

// scaleUp raises every Deployment by a quarter: time until all are
// available, and the CPU-seconds each component spent on it (what grows
// with the cluster: the controller managers, or the scheduler, kwok,
// the apiserver and etcd they all share).
func (sc *scaleCell) scaleUp() error {
	cpuBefore := sc.cpuByComponent()
	start := time.Now()
	if err := sc.scaleTo(sc.namespaces, sc.shape.Replicas+sc.shape.Replicas/4); err != nil {
		return err
	}
	_, last, err := sc.waitServed(sc.namespaces, start)
	sc.figures["s_scale_up_s"] = last
	for name, after := range sc.cpuByComponent() {
		component := name
		if sc.isControllerManager(name) {
			component = "controller-managers"
		}
		sc.figures["s_scale_up_cpu_"+component] += after - cpuBefore[name]
	}
	return err
}

// spread picks at most n of items, evenly spaced.
func spread(items []string, n int) []string {
	if len(items) <= n {
		return items
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, items[i*len(items)/n])
	}
	return out
}
