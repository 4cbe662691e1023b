package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// figureNames says what each figure is, in report order.
var figureNames = []struct{ key, label string }{
	{"a_converge_s", "(a) Deployments created at once: all available (s)"},
	{"a_pods_per_s", "(a) pods available per second"},
	{"a_namespaces_busiest", "(a) fleet: most of (a)'s namespaces one replica runs, at the end (Leases)"},
	{"a_namespaces_busiest_speedup", "(a) fleet: namespaces over that: the speed-up over KCM it predicts at default limits"},
	{"b_scale_down_s", "(b) scale all to 0 (s)"},
	{"b_scale_up_s", "(b) scale all back up (s)"},
	{"c_jobs_s", "(c) Jobs to completion (s)"},
	{"c_jobs_per_s", "(c) Jobs completed per second"},
	{"d_owned_s", "(d) after kill -9: Deployment in a namespace the victim owned (s)"},
	{"d_other_s", "(d) after kill -9: Deployment in a namespace it did not own (s)"},
	{"d_unserved_namespaces", "(d) after kill -9: namespaces left unserved (KCM: all)"},
	{"d_unserved_ns_s", "(d) after kill -9: unserved namespace-seconds (each namespace until a live replica runs it: Leases)"},
	{"e_converge_s", "(e) rolling restart during (a): all available (s)"},
	{"e_max_unowned_s", "(e) rolling restart: longest time anything had no owner (s)"},
	{"h_converge_s", "(h) one busy tenant (half of (a)'s Deployments in one namespace): all available (s)"},
	{"h_rest_median_s", "(h) the other tenants: the median tenant's Deployments all available (s)"},
	{"h_rest_converge_s", "(h) the other tenants: the last tenant's Deployments all available (s)"},
	{"h_neighbours", "(h) fleet: other tenants on the busy tenant's replica (Leases)"},
	{"h_owner_cpu_s", "(h) CPU-seconds of the process serving the busy namespace (KCM: leader and standby)"},
	{"h_owner_peak_rss_mib", "(h) peak RSS of the process serving the busy namespace (MiB; KCM: the larger instance)"},
	{"i_converge_s", "(i) Deployments of existing namespaces (as many as (a)'s, at one replica) scaled up at once: all available (s)"},
	{"i_busiest_before", "(i) fleet: busiest replica's objects over the mean when the scale-up starts (Leases' weights)"},
	{"i_busiest_after", "(i) fleet: the same once all are available"},
	{"i_namespaces_busiest", "(i) fleet: most of (i)'s namespaces one replica runs when the scale-up starts (Leases)"},
	{"i_namespaces_busiest_speedup", "(i) fleet: namespaces over that: the speed-up over KCM it predicts at default limits"},
	{"i_placed_converge_s", "(i) the same Deployments back at one replica, placed for over a minute, scaled up at once again: all available (s)"},
	{"i_placed_namespaces_busiest", "(i) fleet: most of (i)'s namespaces one replica runs when the second scale-up starts (Leases)"},
	{"i_placed_namespaces_busiest_speedup", "(i) fleet: namespaces over that: the speed-up over KCM it predicts"},
	{"j_settle_s", "(j) skewed cluster (100 namespaces, ServiceAccounts by a Zipf law): time to the placement's last change (s)"},
	{"j_settle_tables", "(j) weight tables adopted until settled"},
	{"j_settle_moves", "(j) partitions moved until settled"},
	{"j_busiest_settled", "(j) busiest replica's load over the mean, settled (Leases' weights; the colocated singletons' owner carries half a mean share, as the weight keeper counts)"},
	{"j_heaviest_settled", "(j) heaviest partition over the mean, settled: no placement takes the busiest replica below it"},
	{"j_objects_busiest_settled", "(j) busiest replica's objects alone over the mean, settled (as status prints)"},
	{"j_steady_min", "(j) steady span watched (min)"},
	{"j_steady_moves", "(j) partitions moved over the steady span"},
	{"j_steady_tables", "(j) weight tables adopted over the steady span"},
	{"j_shift_objects", "(j) objects moved by the shift (half)"},
	{"j_busiest_shift_peak", "(j) busiest replica's load over the mean after the shift, at its peak"},
	{"j_shift_rebalance_s", "(j) after the shift: time to the placement's last change (s)"},
	{"j_shift_tables", "(j) after the shift: weight tables adopted"},
	{"j_shift_moves", "(j) after the shift: partitions moved"},
	{"j_shift_moves_min", "(j) after the shift: fewest moves that reach 1.1x the mean (lower bound)"},
	{"j_busiest_shift_after", "(j) after the shift: busiest replica's load over the mean, settled"},
	{"j_heaviest_shift_after", "(j) after the shift: heaviest partition over the mean"},
	{"g_cascade_s", "(g) all Deployments of (a) deleted (background): every ReplicaSet and Pod gone (s)"},
	{"f_namespaces_s", "(f) all namespaces of (a) deleted at once: all gone (s)"},
	{"cpu_seconds", "CPU-seconds, all controller-manager processes"},
	{"peak_rss_mib", "peak RSS of the largest process (MiB)"},
	{"peak_rss_sum_mib", "peak RSS summed over processes (MiB)"},
	{"idle_goroutines", "goroutines of the largest process, idle after the workloads"},
	{"cm_writes_create", "controller-manager creates (audit)"},
	{"cm_writes_update", "controller-manager updates (audit)"},
	{"cm_writes_patch", "controller-manager patches (audit)"},
	{"cm_writes_delete", "controller-manager deletes (audit)"},
	{"lease_writes_per_min", "Lease writes per minute"},
	{"cm_event_writes", "controller-manager Event creates and patches (audit)"},
	{"apiserver_cpu_s", "kube-apiserver CPU-seconds over the run, until the writes it caused ended"},
	{"settle_s", "after the workloads: until no write but Leases for 2 s (s)"},
	{"requests_list", "apiserver LISTs (all clients)"},
	{"cm_lists", "apiserver LISTs by controller managers (audit)"},
	{"other_lists", "apiserver LISTs by every other client (audit: scheduler, kwok, harness)"},
	{"requests_get", "apiserver GETs (all clients)"},
	{"requests_watch", "apiserver WATCH requests (all clients)"},
	{"cm_watches", "apiserver WATCH requests by controller managers (audit)"},
	{"other_watches", "apiserver WATCH requests by every other client (audit)"},
	{"watches_open", "watches open at the end (all clients)"},
	{"terminated_watchers", "watchers the apiserver closed for not keeping up (all clients)"},
	{"cm_cpus_busy_share", "the controller managers' CPUs: busy share over the workload (-cpus)"},
	{"cm_throttled_s", "controller managers: time waiting for CPU quota, summed over processes (s, -cm-cpu-cap)"},
	{"cm_throttled_share", "controller managers: share of quota periods they ran out of CPU in (-cm-cpu-cap)"},
	{"init_events", "events the apiserver replayed to watches resuming at an older version (all clients)"},
	{"watch_events", "watch events the apiserver sent, one per event and watcher (all clients)"},
	{"watch_events_pods", "of them Pods'"},
	{"watch_events_replicasets", "of them ReplicaSets'"},
	{"watch_events_deployments", "of them Deployments'"},
	{"watch_events_leases", "of them Leases'"},
	{"watch_event_mib", "watch events' bytes the apiserver sent (MiB, all clients)"},
	{"kwok_pod_watches", "kwok's Pod WATCH requests (audit)"},
	{"kwok_pod_patches", "kwok's Pod status patches (audit)"},
	{"kwok_pod_patches_refused", "kwok's Pod status patches refused (audit: a stage played again after its watch restarted)"},
	{"m_converge_s", "memory workload: Deployments available (s)"},
	{"m_rss_median_mib", "memory: RSS of the median process (MiB, mean of the last minute)"},
	{"m_rss_largest_mib", "memory: RSS of the largest process (MiB, mean of the last minute)"},
	{"m_rss_sum_mib", "memory: RSS summed over processes (MiB, means of the last minute)"},
	{"m_anon_median_mib", "memory: anonymous RSS (RSS less the mapped binary), median process (MiB)"},
	{"m_anon_largest_mib", "memory: anonymous RSS, largest process (MiB)"},
	{"m_anon_sum_mib", "memory: anonymous RSS summed over processes (MiB)"},
	{"m_heap_median_mib", "memory: Go heap in use, median process (MiB)"},
	{"m_heap_largest_mib", "memory: Go heap in use, largest process (MiB)"},
	{"m_heap_unreturned_median_mib", "memory: Go heap free but not returned to the OS, median process (MiB)"},
	{"m_stack_median_mib", "memory: goroutine stacks, median process (MiB)"},
	{"m_apiserver_rss_mib", "memory: kube-apiserver RSS (MiB, mean of the last minute)"},
	{"m_apiserver_cpu_s", "memory: kube-apiserver CPU-seconds, from the system's start to the reading"},
	{"m_cm_cpu_s", "memory: controller-manager CPU-seconds, all processes, from the system's start to convergence"},
}

// lowerIsBetter: ratios are given as "fleet / KCM" for all figures; for
// time-like figures a ratio below 1 is better.
func markdown(rep report, charts []string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark (%s mode)\n\n", rep.Mode)
	fmt.Fprintf(&b, "Run %s on %d cores and %.0f GiB; the whole benchmark took %v. ", rep.Date.Format("2006-01-02 15:04 UTC"), rep.Cores, rep.MemoryGB, took.Round(time.Second))
	if rep.MemorySize != nil {
		m := *rep.MemorySize
		fmt.Fprintf(&b, "Workload: %d namespaces, each with %d ConfigMaps and %d Secrets of %d KiB, a Service and %d Deployment(s) of %d kwok pods (%d pods), created on a fresh control plane; RSS figures are means of readings every %v over the %v after every Deployment was available, the others read at its end (KCM: one instance). ",
			m.Namespaces, m.ConfigMaps, m.Secrets, m.ObjectKiB, m.Deployments, m.Replicas, m.Namespaces*m.Deployments*m.Replicas, memorySample, memorySettle)
	} else {
		fmt.Fprintf(&b, "Workload: %d namespaces × %d Deployments × %d replicas, %d Jobs; every figure is the median of %d runs, each on a fresh control plane (kube-apiserver, etcd, kube-scheduler at qps 1000, kwok with 64-way pod parallelism). ",
			rep.Size.Namespaces, rep.Size.Deployments, rep.Size.Replicas, rep.Size.Jobs, rep.Size.Runs)
	}
	b.WriteString("Ratios are fleet / kube-controller-manager from the same invocation (for times, below 1 is faster).")
	if len(rep.FleetArgs) > 0 {
		fmt.Fprintf(&b, " Every replica ran with %s.", strings.Join(rep.FleetArgs, " "))
	}
	if rep.ExtraPodWatchers > 0 {
		fmt.Fprintf(&b, " The bench held %d more cluster-wide Pod watches of its own through every run (-extra-pod-watchers).", rep.ExtraPodWatchers)
	}
	if c := rep.CPUs; c != nil {
		fmt.Fprintf(&b, " etcd, kube-apiserver, kube-scheduler and kwok ran on CPUs %s only, the controller managers on CPUs %s only (-cpus).", c.ControlPlane, c.ControllerManagers)
	}
	if q := rep.CPUQuota; q != nil {
		fmt.Fprintf(&b, " CPU cap: %s (cgroup quota, -cm-cpu-cap).", q)
	}
	b.WriteString("\n\n")
	byLimits := map[string][]result{}
	var order []string
	for _, r := range rep.Results {
		if _, ok := byLimits[r.Limits]; !ok {
			order = append(order, r.Limits)
		}
		byLimits[r.Limits] = append(byLimits[r.Limits], r)
	}
	for _, l := range order {
		results := byLimits[l]
		fmt.Fprintf(&b, "## Client limits: %s\n\n", l)
		var kcm *result
		for i := range results {
			if !strings.HasPrefix(results[i].System, "fleet") {
				kcm = &results[i]
			}
		}
		figureTable(&b, results, kcm, figureNames, func(r result) string { return r.System })
		b.WriteString("\nWhat limited each run (the machine's busy share over the run from /proc/stat, CPU above 85%; the largest consumer from each process's own CPU time):\n\n")
		for _, r := range results {
			fmt.Fprintf(&b, "- %s: %s\n", r.System, strings.Join(dedupe(r.Limiter), "; "))
		}
		b.WriteString("\n")
		b.WriteString(targets(results, kcm))
	}
	writeChartLinks(&b, charts)
	return b.String()
}

// writeChartLinks links each chart under a heading.
func writeChartLinks(b *strings.Builder, charts []string) {
	if len(charts) > 0 {
		b.WriteString("## Charts\n\n")
		for _, c := range charts {
			fmt.Fprintf(b, "![%s](%s)\n\n", strings.TrimSuffix(c, ".png"), c)
		}
	}
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// targets checks issue 5's targets against the medians.
func targets(results []result, kcm *result) string {
	if kcm == nil {
		return ""
	}
	find := func(name string) *result {
		for i := range results {
			if results[i].System == name {
				return &results[i]
			}
		}
		return nil
	}
	var b strings.Builder
	b.WriteString("Targets:\n\n")
	ratio := func(r *result, key string) (float64, bool) {
		v, ok := r.Median[key]
		k, kok := kcm.Median[key]
		return v / k, ok && kok && k != 0
	}
	memoryTargets := []struct {
		system, key, what string
		most              float64
	}{
		{"fleet x3", "m_rss_median_mib", "fleet ×3: median replica RSS", 0.4},
		{"fleet x3", "m_rss_largest_mib", "fleet ×3: largest replica RSS", 0.6},
		{"fleet x3", "m_rss_sum_mib", "fleet ×3: summed RSS", 1.4},
		{"fleet x5", "m_rss_median_mib", "fleet ×5: median replica RSS", 0.28},
		{"fleet x3", "m_apiserver_rss_mib", "kube-apiserver RSS with the fleet ×3", 1.15},
	}
	for _, m := range memoryTargets {
		if r := find(m.system); r != nil {
			if v, ok := ratio(r, m.key); ok {
				fmt.Fprintf(&b, "- memory: %s at most %.2f× KCM's: %.2f× — %s\n", m.what, m.most, v, verdict(v <= m.most))
			}
		}
	}
	if f3 := find("fleet x3"); f3 != nil {
		if _, ok := f3.Median["a_converge_s"]; ok {
			speedup := kcm.Median["a_converge_s"] / f3.Median["a_converge_s"]
			fmt.Fprintf(&b, "- (a) fleet ×3 at least 2.5× faster than KCM: %.2f× — %s\n", speedup, verdict(speedup >= 2.5))
		}
		if o, ok := f3.Median["d_owned_s"]; ok {
			fmt.Fprintf(&b, "- (d) namespaces the dead replica owned converge within lease duration + 3 s (18 s): %.1f s — %s (KCM: %.1f s)\n", o, verdict(o <= 18), kcm.Median["d_owned_s"])
			fmt.Fprintf(&b, "- (d) namespaces it did not own keep converging with no gap: %.1f s (KCM: %.1f s)\n", f3.Median["d_other_s"], kcm.Median["d_other_s"])
		}
		if u, ok := ratio(f3, "d_unserved_ns_s"); ok {
			fmt.Fprintf(&b, "- (d) unserved namespace-seconds after a kill -9, fleet ×3 at most 0.4× KCM's: %.2f× — %s\n", u, verdict(u <= 0.4))
		}
		if h, ok := ratio(f3, "h_converge_s"); ok {
			fmt.Fprintf(&b, "- (h) one busy tenant, fleet ×3 at most 1.0× KCM's time: %.2f× — %s\n", h, verdict(h <= 1.0))
		}
		if r, ok := ratio(f3, "h_rest_converge_s"); ok && r > 0 {
			m, _ := ratio(f3, "h_rest_median_s")
			fmt.Fprintf(&b, "- (h) the other tenants, fleet ×3 at least 2.5× faster than under KCM, the last of them: %.2f× — %s (the median tenant: %.2f×)\n", 1/r, verdict(1/r >= 2.5), 1/m)
		}
		if e, ok := f3.Median["e_max_unowned_s"]; ok {
			fmt.Fprintf(&b, "- (e) no namespace without an owner for more than 2 s during a rolling restart: longest %.2f s — %s (KCM leader gap: %.2f s)\n", e, verdict(e <= 2), kcm.Median["e_max_unowned_s"])
		}
	}
	if f1 := find("fleet x1"); f1 != nil && f1.Median["a_converge_s"] > 0 {
		t := f1.Median["a_converge_s"] / kcm.Median["a_converge_s"]
		c := f1.Median["cpu_seconds"] / kcm.Median["cpu_seconds"]
		m := f1.Median["peak_rss_mib"] / kcm.Median["peak_rss_mib"]
		fmt.Fprintf(&b, "- fleet ×1 within 10%% of KCM's time for (a): %.2f× — %s\n", t, verdict(t <= 1.10))
		fmt.Fprintf(&b, "- fleet ×1 at most 1.25× KCM's CPU-seconds: %.2f× — %s\n", c, verdict(c <= 1.25))
		fmt.Fprintf(&b, "- fleet ×1 at most 1.25× KCM's peak RSS: %.2f× — %s\n", m, verdict(m <= 1.25))
	}
	// Deletion parity (issue: the client budgets KCM gives its
	// controllers): at most 1.05x KCM's time at x1, no slower at x3.
	for _, target := range []struct {
		system string
		most   float64
	}{{"fleet x1", 1.05}, {"fleet x3", 1.0}} {
		f := find(target.system)
		if f == nil {
			continue
		}
		for _, fig := range []struct{ key, what string }{{"f_namespaces_s", "(f) namespace deletion"}, {"g_cascade_s", "(g) cascading deletion"}} {
			got, ok := f.Median[fig.key]
			if !ok || kcm.Median[fig.key] == 0 {
				continue
			}
			r := got / kcm.Median[fig.key]
			fmt.Fprintf(&b, "- %s, %s at most %.2f× KCM's time: %.2f× — %s\n", fig.what, target.system, target.most, r, verdict(r <= target.most))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// writeCharts draws one bar chart per headline figure (SVG, rendered to
// PNG by headless Chromium) and returns the PNG file names.
func writeCharts(ctx context.Context, rep report, out string) ([]string, error) {
	if rep.Mode == "scale" {
		return scaleCharts(ctx, rep, out)
	}
	headline := []struct{ key, title string }{
		{"a_converge_s", "(a) all Deployments available, seconds (lower is better)"},
		{"c_jobs_s", "(c) Jobs complete, seconds (lower is better)"},
		{"cpu_seconds", "controller-manager CPU-seconds per run"},
		{"peak_rss_mib", "peak RSS of the largest controller-manager process, MiB"},
		{"d_owned_s", "(d) failover: victim's namespace converges, seconds"},
	}
	var files []string
	for _, h := range headline {
		type bar struct {
			label string
			value float64
		}
		var bars []bar
		for _, r := range rep.Results {
			if v, ok := r.Median[h.key]; ok {
				short := strings.SplitN(r.Limits, " ", 2)[0]
				bars = append(bars, bar{r.System + " · " + short, v})
			}
		}
		if len(bars) == 0 {
			continue
		}
		maxV := 0.0
		for _, b := range bars {
			maxV = math.Max(maxV, b.value)
		}
		const width, rowH, labelW = 900, 34, 300
		height := 60 + rowH*len(bars)
		var svg strings.Builder
		fmt.Fprintf(&svg, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="14">`, width, height)
		fmt.Fprintf(&svg, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="26" font-size="16" font-weight="bold">%s</text>`, h.title)
		for i, b := range bars {
			y := 45 + i*rowH
			w := (width - labelW - 80) * b.value / maxV
			color := "#5b8def"
			if !strings.HasPrefix(b.label, "fleet") {
				color = "#9aa0a6"
			}
			fmt.Fprintf(&svg, `<text x="10" y="%d">%s</text><rect x="%d" y="%d" width="%.1f" height="22" fill="%s"/><text x="%.1f" y="%d">%s</text>`,
				y+16, b.label, labelW, y, w, color, float64(labelW)+w+6, y+16, num(b.value))
		}
		svg.WriteString(`</svg>`)
		name := rep.Mode + "-" + h.key
		if err := renderPNG(ctx, svg.String(), width, height, out, name); err != nil {
			return files, err
		}
		files = append(files, name+".png")
	}
	sort.Strings(files)
	return files, nil
}

// renderPNG renders svg to out/name.png with headless Chromium.
func renderPNG(ctx context.Context, svg string, width, height int, out, name string) error {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return fmt.Errorf("chromium not found: %w", err)
	}
	svgPath, err := filepath.Abs(filepath.Join(out, name+".svg"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(svgPath, []byte(svg), 0o644); err != nil {
		return err
	}
	defer os.Remove(svgPath)
	pngPath := filepath.Join(out, name+".png")
	userDir, err := os.MkdirTemp("", "bench-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(userDir)
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+userDir, fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+pngPath, "file://"+svgPath)
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rendering %s: %w\n%s", pngPath, err, output)
	}
	return nil
}

// verdict says whether a target is met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// figureTable writes a table of names: a row per figure some result has,
// a column per result headed by header, and beside each other result its
// ratio to kcm's figure.
func figureTable(b *strings.Builder, results []result, kcm *result, names []struct{ key, label string }, header func(result) string) {
	b.WriteString("| figure |")
	for _, r := range results {
		fmt.Fprintf(b, " %s |", header(r))
		if kcm != nil && r.System != kcm.System {
			b.WriteString(" ratio |")
		}
	}
	b.WriteString("\n|---|")
	for _, r := range results {
		b.WriteString("---:|")
		if kcm != nil && r.System != kcm.System {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, f := range names {
		present := false
		for _, r := range results {
			_, ok := r.Median[f.key]
			present = present || ok
		}
		if !present {
			continue
		}
		fmt.Fprintf(b, "| %s |", f.label)
		for _, r := range results {
			v, ok := r.Median[f.key]
			if ok {
				fmt.Fprintf(b, " %s |", num(v))
			} else {
				b.WriteString(" – |")
			}
			if kcm != nil && r.System != kcm.System {
				k, kok := kcm.Median[f.key]
				if ok && kok && k != 0 {
					fmt.Fprintf(b, " %.2f |", v/k)
				} else {
					b.WriteString(" – |")
				}
			}
		}
		b.WriteString("\n")
	}
}
