// Command bench measures fleet-controller-manager against upstream
// kube-controller-manager on the local control plane, side by side in one
// run: `make bench` (all systems, limits and workloads, 3 runs each) and
// `make bench QUICK=1` (a smaller workload, default limits, under 10
// minutes). Each run starts a fresh control plane (kube-apiserver, etcd,
// kube-scheduler and kwok tuned not to be the bottleneck) so every system
// meets the same empty cluster; figures are medians over runs, and each
// fleet figure is also given as a ratio to KCM's from the same invocation.
// Results: docs/benchmarks/matrix/<mode>.md and .json, charts as PNG (drawn as
// SVG, rendered by headless Chromium). The full matrix takes hours on a
// small machine: every finished system and limit is saved at once in
// <mode>.partial.json, and -resume runs only what is missing (each result
// keeps the date it was measured).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// system is a controller manager under test.
type system struct {
	Name     string
	Fleet    bool
	Replicas int // fleet replicas, or KCM instances (leader election)
}

// limits are the client limits of every controller-manager process.
type limits struct {
	Name       string
	QPS, Burst int
}

// size is the shape of the workloads of one mode.
type size struct {
	Namespaces, Deployments, Replicas int
	Jobs                              int
	Runs                              int
}

type config struct {
	out  string
	keep string
	// profile: folder for CPU profiles of the fleet replicas during (a).
	profile string
	// profileSpan: how long the CPU profiles of -profile run (0: the
	// mode's own span).
	profileSpan time.Duration
	resume      bool
	quick       bool
	systems     []system
	limits      []limits
	size        size
	scale       bool // workload (b)
	jobs        bool // workload (c)
	failover    bool // workload (d)
	rolling     bool // workload (e)
	hot         bool // workload (h): one busy tenant
	existing    bool // workload (i): existing namespaces scaled up
	placement   bool // workload (j): placement of a skewed cluster
	// placementSteady: how long (j) watches a settled placement.
	placementSteady time.Duration
	cascade         bool // workload (g): cascading deletion of (a)'s Deployments
	nsDelete        bool // workload (f): deletion of (a)'s namespaces
	// apiServerArgs: extra kube-apiserver flags, for experiments.
	apiServerArgs []string
	// memory: the memory workload (memory.go) instead of (a)-(g).
	memory     bool
	memorySize memorySize
	// fleetArgs are extra flags for every fleet replica.
	fleetArgs []string
	// extraPodWatchers: cluster-wide Pod watches the bench itself opens
	// (extrawatchers.go), for experiments.
	extraPodWatchers int
	// cpus: the CPUs of the control plane and of the controller managers
	// (-cpus), for experiments; empty lets every process run anywhere.
	cpus cpuSplit
	// cpuQuota: the controller managers' CPU budget (-cm-cpu-cap), nil
	// for none.
	cpuQuota *localcluster.CPUQuota
	// ladder: the scale ladder (scale.go) at ladderSizes namespaces of
	// scaleShape, instead of (a)-(g); size.Runs runs at the largest size,
	// one at the others.
	ladder      bool
	ladderSizes []int
	scaleShape  scaleShape
	// scaleSteps: the ladder's steps to run (empty: all), to add runs of
	// some figures to an earlier invocation's cells (-resume).
	scaleSteps []string
}

func main() {
	var quick bool
	var placementSteady time.Duration
	var out string
	var runs int
	var only string
	flag.BoolVar(&quick, "quick", false, "Quick mode: workloads (a), (c), (g) and (f) only, smaller, at default limits, for KCM and fleets of 1 and 3; under 10 minutes.")
	flag.StringVar(&out, "out", "docs/benchmarks/matrix", "Folder for the results.")
	flag.IntVar(&runs, "runs", 3, "Runs per system and limits; figures are medians.")
	flag.StringVar(&only, "only", "", "Comma-separated system names and limit names (default, raised) to run, for experiments; empty runs the mode's full matrix.")
	var workloads, keep, profile string
	var resume, memory, ladder bool
	var ladderSizes, scaleSteps string
	var memoryNamespaces int
	var fleetArgs string
	flag.IntVar(&memoryNamespaces, "memory-namespaces", defaultMemorySize.Namespaces, "With -memory: spread the same objects and pods over this many namespaces (results in memory-<n>ns.md unless 200).")
	flag.StringVar(&fleetArgs, "fleet-args", "", "Comma-separated extra flags for every fleet replica (e.g. --informer-mode=namespace-watch), for experiments.")
	var extraPodWatchers int
	flag.IntVar(&extraPodWatchers, "extra-pod-watchers", 0, "Open this many cluster-wide Pod watches from the bench process once the system is up, as more replicas would, for experiments.")
	var apiServerArgs string
	flag.StringVar(&apiServerArgs, "apiserver-args", "", "Comma-separated extra flags for kube-apiserver (e.g. --v=1, which logs each watcher it closes for not keeping up), for experiments.")
	var cpus string
	var cpuCap float64
	var cpuShared bool
	flag.Float64Var(&cpuCap, "cm-cpu-cap", 0, "Cap every controller manager's CPU at this many cores with a cgroup v1 quota (cpu.cfs_quota_us), as if each ran on a node of its own (0: no cap). The bench fails when the cgroup cannot be written.")
	flag.BoolVar(&cpuShared, "cm-cpu-shared", false, "With -cm-cpu-cap: one budget shared by every controller-manager process of a system (efficiency), not one per process (capacity as replicas are added).")
	flag.StringVar(&cpus, "cpus", "", "CONTROLPLANE:CONTROLLERMANAGERS: confine etcd, kube-apiserver, kube-scheduler and kwok to the first CPU list and every controller manager to the second (taskset syntax, e.g. 0:1), as when the controller managers run on other nodes, for experiments.")
	flag.BoolVar(&memory, "memory", false, "Memory mode: what each process holds once a mid-sized cluster (200 namespaces, 20,000 ConfigMaps and Secrets of 3 KiB, 5,000 kwok pods) is cached, for KCM and fleets of 1, 3 and 5, at raised limits, one run each unless -runs is given; results in memory.md.")
	flag.BoolVar(&ladder, "scale", false, "Scale ladder: the same cluster shape (per namespace 20 ConfigMaps and 20 Secrets of 16 KiB, a Service, a Deployment of 12 kwok pods) at each of -scale-sizes, for KCM (leader and standby) and fleets of 1, 3 and 5 at raised limits: memory, scale-up, kill -9 failover, whole restart, a fourth replica joining; results in scale.md. -runs applies to the largest size (default 1).")
	flag.StringVar(&ladderSizes, "scale-sizes", "", "With -scale: comma-separated sizes in namespaces (default 100,300,900).")
	flag.StringVar(&scaleSteps, "scale-steps", "", "With -scale: comma-separated steps to run (converge, memory, scale-up, failover, restart, join; default all; converge always runs, the others act on its Deployments), e.g. converge,memory with -runs 3 -resume to take the memory figures' median of three runs at the largest size.")
	flag.BoolVar(&resume, "resume", false, "Keep the results of an interrupted invocation (<mode>.partial.json in -out) and run only the systems and limits it had not finished.")
	var profileSeconds int
	flag.IntVar(&profileSeconds, "profile-seconds", 0, "With -profile: take the CPU profiles over this many seconds instead of the mode's span (10 s of (a), 45 s of the memory workload), e.g. to cover the memory workload's whole convergence.")
	flag.StringVar(&profile, "profile", "", "Write CPU profiles of kube-apiserver and every controller-manager process (KCM too), taken over the first 10 s of workload (a), into this folder (with -memory: over the first 45 s of convergence, and a heap profile of every process once settled).")
	flag.StringVar(&keep, "keep", "", "Keep each run's control plane folder (logs, audit log) under this folder, for diagnosis.")
	flag.StringVar(&workloads, "workloads", "", "Comma-separated workloads (a, b, c, d, e, f, g, h, i, j) to run instead of the mode's, for experiments; (a) always runs first, (g) and then (f) last. (i), existing namespaces' Deployments scaled up at once, and (j), the placement of a skewed cluster (fleets only), run only when named here.")
	flag.DurationVar(&placementSteady, "placement-steady", 10*time.Minute, "With -workloads j: how long (j) watches its settled placement before it shifts the load.")
	klog.InitFlags(nil)
	flag.Parse()

	split, err := parseCPUSplit(cpus)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -cpus:", err)
		os.Exit(2)
	}
	cfg := config{out: out, quick: quick, jobs: true, keep: keep, profile: profile, profileSpan: time.Duration(profileSeconds) * time.Second, resume: resume, cascade: true, nsDelete: true, extraPodWatchers: extraPodWatchers, cpus: split}
	switch {
	case cpuCap < 0:
		fmt.Fprintln(os.Stderr, "bench: -cm-cpu-cap must be 0 (no cap) or more")
		os.Exit(2)
	case cpuCap > 0:
		cfg.cpuQuota = &localcluster.CPUQuota{Cores: cpuCap, Shared: cpuShared}
	case cpuShared:
		fmt.Fprintln(os.Stderr, "bench: -cm-cpu-shared needs -cm-cpu-cap")
		os.Exit(2)
	}
	if apiServerArgs != "" {
		cfg.apiServerArgs = strings.Split(apiServerArgs, ",")
	}
	defaultLimits := limits{Name: "default (qps 20, burst 30)", QPS: 20, Burst: 30}
	if quick {
		cfg.systems = []system{{"kube-controller-manager", false, 1}, {"fleet x1", true, 1}, {"fleet x3", true, 3}}
		cfg.limits = []limits{defaultLimits}
		// As many namespaces as the full workload: namespaces are the unit
		// a fleet splits, and fewer would measure the luck of the hash.
		cfg.size = size{Namespaces: 20, Deployments: 2, Replicas: 4, Jobs: 40, Runs: runs}
	} else {
		cfg.systems = []system{{"kube-controller-manager", false, 2}, {"fleet x1", true, 1}, {"fleet x3", true, 3}, {"fleet x5", true, 5}}
		cfg.limits = []limits{defaultLimits, {Name: "raised (qps 1000, burst 2000)", QPS: 1000, Burst: 2000}}
		cfg.size = size{Namespaces: 20, Deployments: 5, Replicas: 10, Jobs: 200, Runs: runs}
		cfg.scale, cfg.failover, cfg.rolling, cfg.hot = true, true, true, true
	}
	if memory {
		cfg.memory, cfg.memorySize = true, memorySizeFor(memoryNamespaces)
		cfg.systems = []system{{"kube-controller-manager", false, 1}, {"fleet x1", true, 1}, {"fleet x3", true, 3}, {"fleet x5", true, 5}}
		cfg.limits = []limits{{Name: "raised (qps 1000, burst 2000)", QPS: 1000, Burst: 2000}}
		cfg.size = size{Runs: runs}
	}
	if (memory || ladder) && !runsSet() {
		cfg.size.Runs, runs = 1, 1 // a memory run or a ladder takes minutes: one unless asked
	}
	if ladder {
		cfg.ladder, cfg.scaleShape, cfg.ladderSizes = true, defaultScaleShape, defaultScaleSizes
		if scaleSteps != "" {
			cfg.scaleSteps = strings.Split(scaleSteps, ",")
		}
		if ladderSizes != "" {
			sizes, err := parseSizes(ladderSizes)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -scale-sizes:", err)
				os.Exit(2)
			}
			cfg.ladderSizes = sizes
		}
		cfg.systems = []system{{"kube-controller-manager", false, 2}, {"fleet x1", true, 1}, {"fleet x3", true, 3}, {"fleet x5", true, 5}}
		cfg.limits = []limits{{Name: "raised (qps 1000, burst 2000)", QPS: 1000, Burst: 2000}}
		cfg.size = size{Runs: runs}
	}
	cfg.placementSteady = placementSteady
	if fleetArgs != "" {
		cfg.fleetArgs = strings.Split(fleetArgs, ",")
	}
	if workloads != "" {
		keep := map[string]bool{}
		for _, k := range strings.Split(workloads, ",") {
			keep[strings.TrimSpace(k)] = true
		}
		cfg.scale, cfg.jobs, cfg.failover, cfg.rolling, cfg.hot, cfg.existing = keep["b"], keep["c"], keep["d"], keep["e"], keep["h"], keep["i"]
		cfg.nsDelete, cfg.cascade, cfg.placement = keep["f"], keep["g"], keep["j"]
		for k := range keep {
			if (cfg.existing || cfg.placement) && !strings.Contains("aij", k) {
				fmt.Fprintln(os.Stderr, "bench: -workloads i and j run with (a) and each other alone: they delete (a)'s namespaces first")
				os.Exit(2)
			}
		}
	}
	if only != "" {
		keep := map[string]bool{}
		for _, k := range strings.Split(only, ",") {
			keep[strings.TrimSpace(k)] = true
		}
		raised := limits{Name: "raised (qps 1000, burst 2000)", QPS: 1000, Burst: 2000}
		all := map[string]limits{"default": defaultLimits, "raised": raised}
		cfg.limits = nil
		for _, name := range []string{"default", "raised"} {
			if keep[name] {
				cfg.limits = append(cfg.limits, all[name])
			}
		}
		var systems []system
		for _, s := range cfg.systems {
			if keep[s.Name] {
				systems = append(systems, s)
			}
		}
		cfg.systems = systems
		if len(cfg.systems) == 0 || len(cfg.limits) == 0 {
			fmt.Fprintf(os.Stderr, "bench: -only %q names no system or no limits: it needs at least one of each (systems such as \"kube-controller-manager\", \"fleet x3\"; limits \"default\", \"raised\")\n", only)
			os.Exit(2)
		}
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// report is everything one invocation measured.
type report struct {
	Mode     string    `json:"mode"`
	Date     time.Time `json:"date"`
	Cores    int       `json:"cores"`
	MemoryGB float64   `json:"memoryGiB"`
	Size     size      `json:"size"`
	// MemorySize: the memory workload (-memory).
	MemorySize *memorySize `json:"memorySize,omitempty"`
	// ScaleShape: one namespace of the scale ladder (-scale).
	ScaleShape *scaleShape `json:"scaleShape,omitempty"`
	FleetArgs  []string    `json:"fleetArgs,omitempty"`
	// ExtraPodWatchers: -extra-pod-watchers.
	ExtraPodWatchers int `json:"extraPodWatchers,omitempty"`
	// CPUs: -cpus.
	CPUs *cpuSplit `json:"cpus,omitempty"`
	// CPUQuota: -cm-cpu-cap and -cm-cpu-shared.
	CPUQuota *localcluster.CPUQuota `json:"cpuQuota,omitempty"`
	// TookSeconds: wall time of every invocation that contributed.
	TookSeconds float64  `json:"tookSeconds"`
	Results     []result `json:"results"`
}

// result is one system at one limit: every run's figures and the medians.
type result struct {
	System string `json:"system"`
	Limits string `json:"limits"`
	// Namespaces: the rung of the scale ladder (-scale).
	Namespaces int                  `json:"namespaces,omitempty"`
	Date       time.Time            `json:"date"`
	Runs       []map[string]float64 `json:"runs"`
	Median     map[string]float64   `json:"median"`
	Limiter    []string             `json:"limitedBy"`
}

func run(cfg config) error {
	ctx := context.Background()
	binDir, err := filepath.Abs(envOr("FCM_BIN_DIR", "bin"))
	if err != nil {
		return err
	}
	mode := "full"
	switch {
	case cfg.memory:
		mode = "memory"
		if cfg.memorySize.Namespaces != defaultMemorySize.Namespaces {
			mode = fmt.Sprintf("memory-%dns", cfg.memorySize.Namespaces)
		}
		if len(cfg.fleetArgs) > 0 {
			mode += "-" + strings.NewReplacer("--", "", "=", "-", ",", "-").Replace(strings.Join(cfg.fleetArgs, ","))
		}
	case cfg.ladder:
		mode = "scale"
	case cfg.quick:
		mode = "quick"
	}
	rep := report{Mode: mode, Date: time.Now().UTC(), Cores: runtime.NumCPU(), MemoryGB: memoryGiB(), Size: cfg.size, FleetArgs: cfg.fleetArgs, ExtraPodWatchers: cfg.extraPodWatchers}
	if cfg.cpus != (cpuSplit{}) {
		rep.CPUs = &cfg.cpus
	}
	rep.CPUQuota = cfg.cpuQuota
	if cfg.memory {
		rep.MemorySize = &cfg.memorySize
	}
	if cfg.ladder {
		rep.ScaleShape = &cfg.scaleShape
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	// Each finished system and limit is saved at once: the full matrix
	// takes hours on a small machine, and an interruption keeps what ran.
	partial := filepath.Join(cfg.out, mode+".partial.json")
	done := map[string]int{} // cell -> index in rep.Results
	if cfg.resume {
		// An interrupted invocation's partial results, else the last
		// finished one's (to add systems, limits or runs to it).
		data, err := os.ReadFile(partial)
		if os.IsNotExist(err) {
			data, err = os.ReadFile(filepath.Join(cfg.out, mode+".json"))
		}
		if err == nil {
			var prev report
			if err := json.Unmarshal(data, &prev); err != nil {
				return fmt.Errorf("resuming from %s: %w", cfg.out, err)
			}
			switch {
			case cfg.ladder && (prev.ScaleShape == nil || *prev.ScaleShape != cfg.scaleShape):
				return fmt.Errorf("results in %s measured another ladder shape (%+v); not resuming", cfg.out, prev.ScaleShape)
			case !cfg.ladder && prev.Size != cfg.size:
				return fmt.Errorf("results in %s measured another workload size (%+v); not resuming", cfg.out, prev.Size)
			}
			rep = prev
			for i, r := range prev.Results {
				done[cellKey(r.System, r.Limits, r.Namespaces)] = i
			}
			klog.InfoS("Resuming", "from", cfg.out, "finished", len(done), "startedAt", prev.Date)
		}
	}
	start := time.Now()
	tookBefore := rep.TookSeconds
	for _, c := range cells(cfg) {
		key := cellKey(c.system.Name, c.limits.Name, c.namespaces)
		i, ok := done[key]
		if !ok {
			rep.Results = append(rep.Results, result{System: c.system.Name, Limits: c.limits.Name, Namespaces: c.namespaces, Date: time.Now().UTC()})
			i = len(rep.Results) - 1
			done[key] = i
		}
		res := &rep.Results[i]
		for run := len(res.Runs); run < c.runs; run++ {
			s, l := c.system, c.limits
			klog.InfoS("Run", "system", s.Name, "limits", l.Name, "namespaces", c.namespaces, "run", run+1, "of", c.runs, "elapsed", time.Since(start).Round(time.Second))
			dir := ""
			if cfg.keep != "" {
				dir = filepath.Join(cfg.keep, fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(s.Name, " ", ""), strings.Fields(l.Name)[0], run+1))
				if c.namespaces > 0 {
					dir += fmt.Sprintf("-%dns", c.namespaces)
				}
			}
			var figures map[string]float64
			var limiter string
			var err error
			switch {
			case cfg.memory:
				figures, limiter, err = memoryRun(ctx, binDir, s, l, cfg, dir)
			case cfg.ladder:
				figures, limiter, err = scaleRun(ctx, binDir, s, l, cfg, c.namespaces, dir)
			default:
				figures, limiter, err = benchRun(ctx, binDir, s, l, cfg, dir)
			}
			if err != nil {
				return fmt.Errorf("%s, %s, run %d: %w", s.Name, l.Name, run+1, err)
			}
			res.Runs = append(res.Runs, figures)
			res.Limiter = append(res.Limiter, limiter)
			printFigures(s.Name, figures)
		}
		res.Median = medians(res.Runs)
		rep.TookSeconds = tookBefore + time.Since(start).Seconds()
		if data, err := json.MarshalIndent(rep, "", "  "); err == nil {
			if err := os.WriteFile(partial, append(data, '\n'), 0o644); err != nil {
				return err
			}
		}
	}
	klog.InfoS("Benchmark done", "took", time.Since(start).Round(time.Second))
	_ = os.Remove(partial)
	rep.TookSeconds = tookBefore + time.Since(start).Seconds()
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, mode+".json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	charts, err := writeCharts(ctx, rep, cfg.out)
	if err != nil {
		klog.ErrorS(err, "Charts not drawn")
	}
	md := markdown(rep, charts, time.Duration(rep.TookSeconds*float64(time.Second)))
	if cfg.ladder {
		md = scaleMarkdown(rep, charts, time.Duration(rep.TookSeconds*float64(time.Second)))
	}
	if err := os.WriteFile(filepath.Join(cfg.out, mode+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(md)
	return nil
}

// cell is one system at one limit (and, in the scale ladder, one size),
// run runs times.
type cell struct {
	system     system
	limits     limits
	namespaces int
	runs       int
}

// cells is the invocation's matrix in the order it runs: the ladder from
// its smallest size up, each size every system.
func cells(cfg config) []cell {
	var out []cell
	if cfg.ladder {
		largest := slices.Max(cfg.ladderSizes)
		for _, n := range cfg.ladderSizes {
			for _, s := range cfg.systems {
				runs := 1
				if n == largest {
					runs = cfg.size.Runs
				}
				out = append(out, cell{s, cfg.limits[0], n, runs})
			}
		}
		return out
	}
	for _, l := range cfg.limits {
		for _, s := range cfg.systems {
			out = append(out, cell{s, l, 0, cfg.size.Runs})
		}
	}
	return out
}

func cellKey(system, limits string, namespaces int) string {
	return fmt.Sprintf("%s|%s|%d", system, limits, namespaces)
}

// parseSizes reads -scale-sizes: positive, ascending.
func parseSizes(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number of namespaces", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("sizes must ascend: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

func printFigures(name string, f map[string]float64) {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%.2f", k, f[k])
	}
	klog.InfoS("Figures", "system", name, "figures", b.String())
}

func medians(runs []map[string]float64) map[string]float64 {
	out := map[string]float64{}
	keys := map[string]bool{}
	for _, r := range runs {
		for k := range r {
			keys[k] = true
		}
	}
	for k := range keys {
		var vs []float64
		for _, r := range runs {
			if v, ok := r[k]; ok {
				vs = append(vs, v)
			}
		}
		sort.Float64s(vs)
		if n := len(vs); n%2 == 1 {
			out[k] = vs[n/2]
		} else {
			out[k] = (vs[n/2-1] + vs[n/2]) / 2
		}
	}
	return out
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func memoryGiB() float64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb float64
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%f", &kb)
		}
	}
	return kb / (1 << 20)
}

// runsSet says whether -runs was given.
func runsSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "runs" })
	return set
}
