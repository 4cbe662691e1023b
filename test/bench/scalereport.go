package main

// The scale ladder's report (scale.md): each figure at each size beside
// KCM's, the RSS slopes fitted across the sizes, how each figure grows
// against the object count, the targets, and a chart per figure.

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// scaleFigureNames says what each figure of the ladder is, in report order.
var scaleFigureNames = []struct{ key, label string }{
	{"s_objects", "objects in the cluster (apiserver's count, every resource)"},
	{"s_created_s", "ConfigMaps, Secrets, Services created, before the system starts (s)"},
	{"s_start_s", "system started on the filled cluster: a probe Deployment in every partition available (s)"},
	{"s_converge_s", "one Deployment per namespace created: all available (s)"},
	{"s_scale_up_s", "every Deployment scaled up by a quarter: all available (s)"},
	{"s_scale_up_cpu_controller-managers", "scale-up: CPU-seconds of the controller managers"},
	{"s_scale_up_cpu_kube-scheduler", "scale-up: CPU-seconds of kube-scheduler"},
	{"s_scale_up_cpu_kwok", "scale-up: CPU-seconds of kwok"},
	{"s_scale_up_cpu_kube-apiserver", "scale-up: CPU-seconds of kube-apiserver"},
	{"s_scale_up_cpu_etcd", "scale-up: CPU-seconds of etcd"},
	{"s_rss_median_mib", "RSS of the median process (MiB, mean over 30 s)"},
	{"s_rss_largest_mib", "RSS of the largest process (MiB)"},
	{"s_rss_sum_mib", "RSS summed over processes (MiB; KCM: the leader)"},
	{"s_kcm_standby_rss_mib", "KCM's standby instance: RSS (MiB)"},
	{"s_heap_median_mib", "Go heap in use, median process (MiB)"},
	{"s_heap_largest_mib", "Go heap in use, largest process (MiB)"},
	{"s_apiserver_rss_mib", "kube-apiserver RSS (MiB)"},
	{"s_etcd_rss_mib", "etcd RSS (MiB)"},
	{"s_failover_first_s", "kill -9 (KCM: the leader, standby running): first of the victim's namespaces served again (s)"},
	{"s_failover_last_s", "kill -9: last of 20 of the victim's namespaces served again (s)"},
	{"s_failover_owner_s", "kill -9: every piece the victim ran has a live owner (KCM: the standby holds the Lease) (s)"},
	{"s_failover_unserved_namespaces", "kill -9: namespaces left unserved (KCM: all)"},
	{"s_failover_unserved_ns_s", "kill -9: unserved namespace-seconds (each namespace until a live replica runs it: Leases)"},
	{"s_restart_first_s", "whole restart: first namespace served again, from the start (s)"},
	{"s_restart_last_s", "whole restart: last namespace served again (s)"},
	{"s_join_s", "fleet x3: a fourth replica joins, the fleet settled (s)"},
	{"s_join_max_unowned_s", "fleet x3 -> 4: longest time a partition had no owner (s)"},
	{"s_join_served_s", "fleet x3 -> 4: last of 20 of the namespaces the fourth replica gained served (scaled up) (s)"},
	{"s_join_cm_lists", "fleet x3 -> 4: LISTs by the controller managers until then (audit)"},
	{"s_apiserver_cpu_total_s", "kube-apiserver CPU-seconds, from the system's start to the end"},
	{"requests_list", "apiserver LISTs (all clients)"},
	{"requests_watch", "apiserver WATCH requests (all clients)"},
	{"terminated_watchers", "watchers the apiserver closed for not keeping up (all clients)"},
	{"init_events", "events replayed to watches resuming at an older version (all clients)"},
}

// scaleSlopeFigures are fitted against the object count.
var scaleSlopeFigures = []struct{ key, what string }{
	{"s_rss_median_mib", "RSS, median process"},
	{"s_rss_largest_mib", "RSS, largest process"},
	{"s_rss_sum_mib", "RSS, summed"},
	{"s_apiserver_rss_mib", "kube-apiserver RSS"},
}

// scaleGrowthFigures must grow no faster than the objects from the middle
// size to the largest.
var scaleGrowthFigures = []string{"s_converge_s", "s_scale_up_s", "s_scale_up_cpu_controller-managers", "s_scale_up_cpu_kube-scheduler", "s_scale_up_cpu_kwok", "s_scale_up_cpu_kube-apiserver", "s_rss_median_mib", "s_rss_largest_mib", "s_rss_sum_mib",
	"s_apiserver_rss_mib", "s_apiserver_cpu_total_s", "s_failover_last_s", "s_restart_last_s", "s_join_cm_lists", "requests_list", "requests_watch"}

// ladder is the results by size (ascending), each size's results in
// system order.
func ladder(rep report) (sizes []int, bySize map[int][]result) {
	bySize = map[int][]result{}
	for _, r := range rep.Results {
		if _, ok := bySize[r.Namespaces]; !ok {
			sizes = append(sizes, r.Namespaces)
		}
		bySize[r.Namespaces] = append(bySize[r.Namespaces], r)
	}
	sort.Ints(sizes)
	return sizes, bySize
}

// fitSlope is the least-squares slope of y over x.
func fitSlope(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

// systemSeries is one system's figure against the cluster's objects, by
// size; sizes where either is missing are left out.
func systemSeries(rep report, system, key string) (objects, values []float64) {
	sizes, bySize := ladder(rep)
	for _, n := range sizes {
		for _, r := range bySize[n] {
			o, ok1 := r.Median["s_objects"]
			v, ok2 := r.Median[key]
			if r.System == system && ok1 && ok2 {
				objects, values = append(objects, o), append(values, v)
			}
		}
	}
	return objects, values
}

// slopePer10k is a system's fitted slope of key in units per 10,000 objects.
func slopePer10k(rep report, system, key string) float64 {
	x, y := systemSeries(rep, system, key)
	return fitSlope(x, y) * 10000
}

func scaleSystems(rep report) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rep.Results {
		if !seen[r.System] {
			seen[r.System] = true
			out = append(out, r.System)
		}
	}
	return out
}

func scaleMarkdown(rep report, charts []string, took time.Duration) string {
	var b strings.Builder
	sh := rep.ScaleShape
	sizes, bySize := ladder(rep)
	fmt.Fprintf(&b, "# Benchmark (scale ladder)\n\n")
	fmt.Fprintf(&b, "Run %s on %d cores and %.0f GiB; the invocations behind it took %v in all. Reproduce: `make bench BENCH_ARGS=-scale` (`go run ./test/bench -scale`). ",
		rep.Date.Format("2006-01-02 15:04 UTC"), rep.Cores, rep.MemoryGB, took.Round(time.Second))
	if sh != nil {
		fmt.Fprintf(&b, "Each namespace holds %d ConfigMaps and %d Secrets of %d KiB and a Service, created before the system starts, and one Deployment of %d kwok pods, created after; sizes: %v namespaces. ",
			sh.ConfigMaps, sh.Secrets, sh.ObjectKiB, sh.Replicas, sizes)
	}
	b.WriteString("Every cell is a fresh control plane (etcd with an 8 GiB quota, kube-apiserver with its defaults, kube-scheduler, kwok with 64-way pod parallelism and a node per 100 pods) at raised client limits (qps 1000, burst 2000) for every controller manager. KCM runs as users deploy it: two instances, default leader-election flags (lease 15 s, renew 10 s, retry 2 s); its memory figures are the leader's. ")
	b.WriteString("Figures are medians of the runs each cell had (the largest size may have more, run with -scale-steps to repeat some steps only: a figure's median is over the runs that measured it). Ratios are fleet / kube-controller-manager at the same size from the same invocation (for times, below 1 is faster).\n\n")

	b.WriteString("## Slopes: MiB per 10,000 objects, fitted across the sizes\n\n")
	systems := scaleSystems(rep)
	b.WriteString("| figure |")
	for _, s := range systems {
		fmt.Fprintf(&b, " %s |", s)
		if strings.HasPrefix(s, "fleet") {
			b.WriteString(" ratio |")
		}
	}
	b.WriteString("\n|---|")
	for _, s := range systems {
		b.WriteString("---:|")
		if strings.HasPrefix(s, "fleet") {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, f := range scaleSlopeFigures {
		kcm := slopePer10k(rep, "kube-controller-manager", f.key)
		fmt.Fprintf(&b, "| %s |", f.what)
		for _, s := range systems {
			v := slopePer10k(rep, s, f.key)
			fmt.Fprintf(&b, " %s |", numOrDash(v))
			if strings.HasPrefix(s, "fleet") {
				fmt.Fprintf(&b, " %s |", ratioOrDash(v, kcm))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	b.WriteString(scaleTargets(rep))
	b.WriteString(scaleGrowth(rep))

	for _, n := range sizes {
		results := bySize[n]
		var kcm *result
		for i := range results {
			if !strings.HasPrefix(results[i].System, "fleet") {
				kcm = &results[i]
			}
		}
		fmt.Fprintf(&b, "## %d namespaces\n\n", n)
		figureTable(&b, results, kcm, scaleFigureNames, func(r result) string {
			return fmt.Sprintf("%s (%d run%s)", r.System, len(r.Runs), plural(len(r.Runs)))
		})
		b.WriteString("\nWhat limited the convergence (the machine's busy share from the system's start, CPU above 85%; the largest consumer from each process's own CPU time):\n\n")
		for _, r := range results {
			fmt.Fprintf(&b, "- %s: %s\n", r.System, strings.Join(dedupe(r.Limiter), "; "))
		}
		b.WriteString("\n")
	}
	writeChartLinks(&b, charts)
	return b.String()
}

// scaleTargets checks the ladder's targets at the largest size.
func scaleTargets(rep report) string {
	sizes, bySize := ladder(rep)
	if len(sizes) == 0 {
		return ""
	}
	largest := map[string]map[string]float64{}
	for _, r := range bySize[sizes[len(sizes)-1]] {
		largest[r.System] = r.Median
	}
	kcm := largest["kube-controller-manager"]
	var b strings.Builder
	b.WriteString("## Targets\n\n| target | measured | |\n|---|---:|---|\n")
	row := func(what string, v float64, ok bool) {
		if math.IsNaN(v) {
			fmt.Fprintf(&b, "| %s | not measured | |\n", what)
			return
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", what, num(v), verdict(ok))
	}
	// A slope of KCM's that is not positive (its memory did not grow with
	// the objects, or fell: noise across runs) makes no ratio: any fleet
	// slope over it would read as met.
	slopeRatio := func(system, key string) float64 {
		kcmSlope := slopePer10k(rep, "kube-controller-manager", key)
		if !(kcmSlope > 0) {
			return math.NaN()
		}
		return slopePer10k(rep, system, key) / kcmSlope
	}
	for _, t := range []struct {
		system, key, what string
		most              float64
	}{
		{"fleet x3", "s_rss_median_mib", "RSS slope, fleet x3 median replica <= 0.36x KCM's", 0.36},
		{"fleet x3", "s_rss_largest_mib", "RSS slope, fleet x3 largest replica <= 0.6x", 0.6},
		{"fleet x3", "s_rss_sum_mib", "RSS slope, fleet x3 summed <= 1.2x", 1.2},
		{"fleet x5", "s_rss_median_mib", "RSS slope, fleet x5 median replica <= 0.22x", 0.22},
	} {
		v := slopeRatio(t.system, t.key)
		row(t.what, v, v <= t.most)
	}
	ratio := func(system, key string) float64 {
		f, ok1 := largest[system][key]
		k, ok2 := kcm[key]
		if !ok1 || !ok2 || k == 0 {
			return math.NaN()
		}
		return f / k
	}
	value := func(system, key string) float64 {
		if v, ok := largest[system][key]; ok {
			return v
		}
		return math.NaN()
	}
	v := ratio("fleet x1", "s_rss_largest_mib")
	row("fleet x1 RSS <= 0.9x KCM's", v, v <= 0.9)
	v = ratio("fleet x3", "s_apiserver_rss_mib")
	row("kube-apiserver RSS with fleet x3 <= 1.1x", v, v <= 1.1)
	v = value("fleet x3", "s_failover_last_s")
	row("failover, fleet x3: victim's namespaces served again <= lease + 3 s (18 s)", v, v <= 18)
	v = ratio("fleet x3", "s_failover_last_s")
	row("failover, fleet x3: <= 0.5x KCM's (leader killed, standby running)", v, v <= 0.5)
	v = ratio("fleet x3", "s_failover_unserved_ns_s")
	row("kill -9 of a replica of 3: unserved namespace-seconds <= 0.4x KCM's", v, v <= 0.4)
	v = ratio("fleet x3", "s_restart_last_s")
	row("whole restart, fleet x3: last namespace served <= KCM's time", v, v <= 1)
	v = value("fleet x3", "s_join_max_unowned_s")
	row("graceful 3 -> 4: longest time unowned <= 1 s", v, v <= 1)
	b.WriteString("\n(Largest size; slopes across every size; ratios to KCM.)\n\n")
	return b.String()
}

// scaleGrowth says, for each figure and system, how much it grew from the
// middle size to the largest against the objects.
func scaleGrowth(rep report) string {
	sizes, bySize := ladder(rep)
	if len(sizes) < 2 {
		return ""
	}
	mid, top := sizes[len(sizes)/2], sizes[len(sizes)-1]
	if mid == top {
		mid = sizes[len(sizes)-2]
	}
	find := func(n int, system string) map[string]float64 {
		for _, r := range bySize[n] {
			if r.System == system {
				return r.Median
			}
		}
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Growth from %d to %d namespaces\n\n", mid, top)
	b.WriteString("Each figure's growth factor from the middle size to the largest; the objects' growth factor heads each column. A figure growing faster than the objects is in bold.\n\n| figure |")
	systems := scaleSystems(rep)
	for _, s := range systems {
		objectGrowth := math.NaN()
		if m, t := find(mid, s), find(top, s); m != nil && t != nil && m["s_objects"] > 0 {
			objectGrowth = t["s_objects"] / m["s_objects"]
		}
		fmt.Fprintf(&b, " %s (objects %sx) |", s, numOrDash(objectGrowth))
	}
	b.WriteString("\n|---|")
	for range systems {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	labels := map[string]string{}
	for _, f := range scaleFigureNames {
		labels[f.key] = f.label
	}
	for _, key := range scaleGrowthFigures {
		fmt.Fprintf(&b, "| %s |", labels[key])
		for _, s := range systems {
			m, t := find(mid, s), find(top, s)
			mv, ok1 := m[key]
			tv, ok2 := t[key]
			if !ok1 || !ok2 || mv == 0 || m["s_objects"] == 0 {
				b.WriteString(" – |")
				continue
			}
			g, og := tv/mv, t["s_objects"]/m["s_objects"]
			if g > og {
				fmt.Fprintf(&b, " **%.2f** |", g)
			} else {
				fmt.Fprintf(&b, " %.2f |", g)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}

func numOrDash(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return num(v)
}

func ratioOrDash(v, k float64) string {
	if math.IsNaN(v) || math.IsNaN(k) || k == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v/k)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// scaleCharts draws each headline figure against the cluster's objects,
// one line per system.
func scaleCharts(ctx context.Context, rep report, out string) ([]string, error) {
	headline := []struct{ key, title string }{
		{"s_rss_largest_mib", "RSS of the largest controller-manager process (MiB) against objects"},
		{"s_rss_median_mib", "RSS of the median controller-manager process (MiB) against objects"},
		{"s_rss_sum_mib", "RSS summed over controller-manager processes (MiB) against objects"},
		{"s_apiserver_rss_mib", "kube-apiserver RSS (MiB) against objects"},
		{"s_converge_s", "Deployments created: all available (s) against objects"},
		{"s_scale_up_s", "scale-up of every Deployment (s) against objects"},
		{"s_failover_last_s", "kill -9: victim's namespaces served again (s) against objects"},
		{"s_restart_last_s", "whole restart: last namespace served (s) against objects"},
		{"s_apiserver_cpu_total_s", "kube-apiserver CPU-seconds against objects"},
	}
	colors := []string{"#9aa0a6", "#f4b400", "#5b8def", "#db4437", "#0f9d58"}
	var files []string
	for _, h := range headline {
		const width, height, left, right, top, bottom = 900, 460, 80, 180, 50, 50
		type series struct {
			system string
			x, y   []float64
		}
		var all []series
		maxX, maxY := 0.0, 0.0
		for _, s := range scaleSystems(rep) {
			x, y := systemSeries(rep, s, h.key)
			if len(x) == 0 {
				continue
			}
			all = append(all, series{s, x, y})
			for i := range x {
				maxX, maxY = math.Max(maxX, x[i]), math.Max(maxY, y[i])
			}
		}
		if len(all) == 0 || maxX == 0 || maxY == 0 {
			continue
		}
		px := func(x float64) float64 { return left + (width-left-right)*x/maxX }
		py := func(y float64) float64 { return height - bottom - (height-top-bottom)*y/maxY }
		var svg strings.Builder
		fmt.Fprintf(&svg, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`, width, height)
		fmt.Fprintf(&svg, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="26" font-size="16" font-weight="bold">%s</text>`, h.title)
		fmt.Fprintf(&svg, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`,
			left, height-bottom, width-right, height-bottom, left, top, left, height-bottom)
		for i := 0; i <= 4; i++ {
			xv, yv := maxX*float64(i)/4, maxY*float64(i)/4
			fmt.Fprintf(&svg, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, px(xv), height-bottom+18, num(xv))
			fmt.Fprintf(&svg, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, left-6, py(yv)+4, num(yv))
		}
		fmt.Fprintf(&svg, `<text x="%d" y="%d" text-anchor="middle">objects in the cluster</text>`, (width-right+left)/2, height-8)
		for i, s := range all {
			color := colors[i%len(colors)]
			var points []string
			for j := range s.x {
				points = append(points, fmt.Sprintf("%.1f,%.1f", px(s.x[j]), py(s.y[j])))
				fmt.Fprintf(&svg, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`, px(s.x[j]), py(s.y[j]), color)
			}
			fmt.Fprintf(&svg, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(points, " "), color)
			fmt.Fprintf(&svg, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`,
				width-right+16, top+i*22, color, width-right+36, top+i*22+12, s.system)
		}
		svg.WriteString(`</svg>`)
		name := rep.Mode + "-" + h.key
		if err := renderPNG(ctx, svg.String(), width, height, out, name); err != nil {
			return files, err
		}
		files = append(files, name+".png")
	}
	return files, nil
}
