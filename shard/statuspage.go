package shard

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// FleetPage serves /debug/fleet: the fleet as its Leases show it and what
// this replica's Manager is doing, as one HTML page: a grid of partitions
// coloured by the member running each, the members with their health and
// pieces, and this replica's view, epoch and last rebalance.
func FleetPage(read func(context.Context) (FleetStatus, error), local func() Status, loads func() []LocalLoad) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		fleet, err := read(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Serving /debug/fleet")
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		page := newFleetPageData(fleet, local())
		page.LocalLoads = loads()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := fleetPageTemplate.Execute(w, page); err != nil {
			klog.FromContext(ctx).Error(err, "Rendering /debug/fleet")
		}
	})
}

type fleetPageData struct {
	Fleet      FleetStatus
	Local      Status
	Cells      []partitionCell
	Members    []memberRow
	Singletons []singletonRow
	Now        string
	// LeaderLease describes kube-controller-manager's leader Lease ("" when not read).
	LeaderLease string
	// Loads: every member's partitions loading, as its Lease says; Stuck:
	// those loading for longer than a lease duration; LocalLoads: this
	// replica's load in progress with what it waits for.
	Loads      []loadRow
	Stuck      []string
	LocalLoads []LocalLoad
}

type loadRow struct {
	Member    string
	Partition int
	For       string
}

type partitionCell struct {
	Index  int
	Member string
	Color  template.CSS
}

type memberRow struct {
	MemberStatus
	Color      template.CSS
	RenewedAgo string
	Ranges     string
	Self       bool
}

type singletonRow struct {
	Name, Member string
	Color        template.CSS
}

// memberColor is the colour of the i-th member in name order: hues a
// golden angle apart, so any two members (not just most) look different
// (template.CSS: a value html/template would otherwise replace in a style
// attribute).
func memberColor(i int) template.CSS {
	return template.CSS(fmt.Sprintf("hsl(%d, 70%%, 70%%)", (i*137+200)%360))
}

func newFleetPageData(fleet FleetStatus, local Status) fleetPageData {
	d := fleetPageData{Fleet: fleet, Local: local, Now: fleet.ObservedAt.UTC().Format(time.RFC3339)}
	if fleet.LeaderLease != nil {
		d.LeaderLease = fleet.LeaderLease.Describe(fleet.ObservedAt)
	}
	owner := map[int]string{}
	colors := map[string]template.CSS{}
	for i, m := range fleet.Members {
		colors[m.Name] = memberColor(i)
		row := memberRow{MemberStatus: m, Color: colors[m.Name], Ranges: CompactRanges(m.Partitions), Self: m.Name == local.Identity}
		row.RenewedAgo = "never"
		if !m.Renewed.IsZero() {
			row.RenewedAgo = fleet.ObservedAt.Sub(m.Renewed).Round(100*time.Millisecond).String() + " ago"
		}
		d.Members = append(d.Members, row)
		if m.Health == MemberExpired {
			continue
		}
		for _, p := range m.Partitions {
			owner[p] = m.Name
		}
		for _, s := range m.Singletons {
			d.Singletons = append(d.Singletons, singletonRow{Name: s, Member: m.Name, Color: row.Color})
		}
	}
	for _, m := range fleet.Members {
		if m.Health == MemberExpired {
			continue
		}
		for _, l := range m.Loading {
			d.Loads = append(d.Loads, loadRow{Member: m.Name, Partition: l.Partition, For: fleet.ObservedAt.Sub(l.Since).Round(time.Second).String()})
		}
	}
	d.Stuck = fleet.StuckLoads()
	for i := range fleet.Partitions {
		c := partitionCell{Index: i, Member: owner[i], Color: template.CSS("#f28b82")}
		if c.Member != "" {
			c.Color = colors[c.Member]
		}
		d.Cells = append(d.Cells, c)
	}
	return d
}

var fleetPageTemplate = template.Must(template.New("fleet").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>fleet {{.Fleet.Fleet}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #202124; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
.sub { color: #5f6368; margin-bottom: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #e0e0e0; text-align: left; font-size: 0.9em; }
th { background: #f1f3f4; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; vertical-align: middle; margin-right: 0.4em; }
.grid { display: grid; grid-template-columns: repeat(16, 3.2em); gap: 3px; margin: 0.5em 0 1.5em; }
.cell { height: 2.4em; border-radius: 3px; font-size: 0.7em; display: flex; flex-direction: column; align-items: center; justify-content: center; }
.health-ready { color: #188038; font-weight: 600; }
.health-joining, .health-leaving { color: #b06000; font-weight: 600; }
.health-expired, .health-unreadable { color: #c5221f; font-weight: 600; }
.kv td:first-child { color: #5f6368; }
</style></head><body>
<h1>Fleet <code>{{.Fleet.Fleet}}</code></h1>
<div class="sub">Leases in <code>{{.Fleet.Namespace}}</code>, read at {{.Now}} by replica <b>{{.Local.Identity}}</b></div>

<h2>This replica</h2>
<table class="kv">
<tr><td>view</td><td><code>{{.Local.View}}</code> (epoch {{.Local.Epoch}})</td></tr>
<tr><td>members in view</td><td>{{range $i, $m := .Local.Members}}{{if $i}}, {{end}}{{$m}}{{end}}</td></tr>
<tr><td>authority</td><td>{{if .Local.Authority}}yes{{else}}<b>no</b>{{if .Local.Waiting}}: {{.Local.Waiting}}{{end}}{{end}}{{if .Local.Joining}}, joining{{end}}</td></tr>
{{if .LeaderLease}}<tr><td>kube-controller-manager</td><td id="leader-lease">{{.LeaderLease}}</td></tr>{{end}}
<tr><td>pieces owned / running</td><td>{{len .Local.Owned}} / {{len .Local.Running}}</td></tr>
<tr><td>waiting</td><td>{{if .Local.Waiting}}{{.Local.Waiting}}{{else}}nothing: every owned piece runs{{end}}</td></tr>
<tr><td>last rebalance</td><td>{{if .Local.LastViewChange.IsZero}}none yet{{else}}{{.Local.LastViewChange.UTC.Format "2006-01-02T15:04:05Z07:00"}}{{end}}</td></tr>
</table>

<h2>Members ({{len .Members}})</h2>
<table id="members">
<tr><th>member</th><th>health</th><th>renewed</th><th>epoch</th><th>partitions</th><th>singletons</th></tr>
{{range .Members}}<tr data-member="{{.Name}}"><td><span class="swatch" style="background: {{.Color}}"></span>{{.Name}}{{if .Self}} (this replica){{end}}</td>
<td class="health-{{.Health}}">{{.Health}}</td><td>{{.RenewedAgo}}</td><td>{{.Epoch}}</td>
<td>{{len .Partitions}}: {{.Ranges}}</td><td>{{range $i, $s := .Singletons}}{{if $i}}, {{end}}{{$s}}{{end}}</td></tr>
{{end}}</table>

<h2>Namespace partitions ({{.Fleet.Partitions}}{{if .Fleet.UnownedPartitions}}, <span class="health-expired">{{len .Fleet.UnownedPartitions}} not running anywhere</span>{{end}})</h2>
<div class="grid" id="partitions">
{{range .Cells}}<div class="cell" style="background: {{.Color}}" title="partition {{.Index}}: {{if .Member}}{{.Member}}{{else}}no owner{{end}}" data-partition="{{.Index}}" data-member="{{.Member}}"><b>{{.Index}}</b><span>{{if .Member}}{{.Member}}{{else}}—{{end}}</span></div>
{{end}}</div>

<h2>Partitions loading ({{len .Loads}})</h2>
{{range .Stuck}}<p class="health-expired stuck">STUCK: {{.}}</p>
{{end}}{{if .Loads}}<table id="loads">
<tr><th>member</th><th>partition</th><th>loading for</th></tr>
{{range .Loads}}<tr data-member="{{.Member}}"><td>{{.Member}}</td><td>{{.Partition}}</td><td>{{.For}}</td></tr>
{{end}}</table>{{else}}<p>none the Leases name (a load shorter than a renewal interval is never written)</p>{{end}}
{{range .LocalLoads}}<p id="local-load">This replica is loading partitions {{range $i, $p := .Partitions}}{{if $i}}, {{end}}{{$p}}{{end}} since {{.Since.UTC.Format "15:04:05Z07:00"}}; the owned cache waits for: {{range $i, $w := .Waiting}}{{if $i}}; {{end}}{{$w}}{{end}}</p>
{{end}}
<h2>Singleton controllers ({{len .Singletons}})</h2>
<table id="singletons">
<tr><th>controller</th><th>member</th></tr>
{{range .Singletons}}<tr data-member="{{.Member}}"><td>{{.Name}}</td><td><span class="swatch" style="background: {{.Color}}"></span>{{.Member}}</td></tr>
{{end}}</table>
</body></html>
`))
