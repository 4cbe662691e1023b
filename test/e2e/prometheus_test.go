//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// alertRuleFor is the `for` of every alert in the test: the shipped rules
// wait minutes, the test seconds.
const alertRuleFor = "4s"

// TestPrometheusDashboardsAndAlerts starts a real Prometheus (Debian's
// package, installed by make test) scraping three replicas, loads the
// shipped alert rules, and checks that every PromQL expression of the
// Grafana dashboard and of the rules returns data for each replica and
// that no alert is active on the healthy fleet; then kills a replica and
// waits for the alerts that must fire. The replicas are a build with a
// planted stuck load (informers/plants.go: a gain of a partition holding
// a namespace named stuck-load-* never finishes), and one such namespace
// sits in a partition of the killed replica: its partitions' gain on a
// survivor never finishes, and FleetPartitionLoadStuck and `status` must
// say so.
func TestPrometheusDashboardsAndAlerts(t *testing.T) {
	inLongLane(t, laneHeavy)
	prometheus, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed (make test installs it: test-deps)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager-planted-stuck_load")
	replicas := []string{"prom-0", "prom-1", "prom-2"}
	procs, ports := map[string]*localcluster.Process{}, map[string]int{}
	for _, r := range replicas {
		if procs[r], ports[r], err = cluster.StartFleetReplica(ctx, bin, r); err != nil {
			t.Fatal(err)
		}
	}
	waitFleetRunning(ctx, t, client, replicas)
	// Some controller work, so workqueue series exist on every replica.
	for i := range 6 {
		ns := fmt.Sprintf("prom-ns-%d", i)
		createNamespace(ctx, t, client, ns)
		createDeployment(ctx, t, client, ns, "web", 1)
	}
	// A namespace whose partition prom-2 runs, created while it does: it
	// joins prom-2's cache as any new namespace (no load), and the gain
	// of its partition after the kill is the planted stuck load.
	stuckNamespace := namespaceInPartitionOf(ctx, t, client, "prom-2", "stuck-load-")
	createNamespace(ctx, t, client, stuckNamespace)

	dir := filepath.Join(cluster.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := writeRules(t, dir)
	cert, key := cluster.AdminCertFiles()
	var targets strings.Builder
	for _, r := range replicas {
		fmt.Fprintf(&targets, "  - targets: ['127.0.0.1:%d']\n    labels: {pod: %s}\n", ports[r], r)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files: [%q]
scrape_configs:
- job_name: fleet-controller-manager
  scheme: https
  tls_config: {cert_file: %q, key_file: %q, insecure_skip_verify: true}
  static_configs:
%s`, rules, cert, key, targets.String())
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if _, err := cluster.StartProcess("prometheus", prometheus, []string{
		"--config.file=" + configFile, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn",
	}, nil); err != nil {
		t.Fatal(err)
	}
	// Prometheus answers 503 with a plain-text body while it starts
	// and while its rule groups load: a reply that is not a successful
	// JSON answer means "not yet", and each poll's deadline fails the
	// test if it never becomes one.
	query := func(expr string) ([]promSeries, error) {
		var out struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []promSeries `json:"result"`
			} `json:"data"`
		}
		if err := promGet(base+"/api/v1/query?query="+url.QueryEscape(expr), &out); err != nil {
			return nil, fmt.Errorf("query %s: %w", expr, err)
		}
		if out.Status != "success" {
			return nil, fmt.Errorf("query %s: status %q: %s", expr, out.Status, out.Error)
		}
		return out.Data.Result, nil
	}
	poll(ctx, t, "Prometheus to scrape every replica", 2*time.Minute, func() (bool, string) {
		up, err := query(`up == 1`)
		if err != nil {
			return false, err.Error()
		}
		return len(up) == len(replicas), fmt.Sprintf("%d targets up", len(up))
	})
	// Rates need samples over their window: each expression below is
	// polled until it has data for every replica.
	exprs := dashboardExprs(t)
	exprs = append(exprs, ruleExprs(t)...)
	for _, e := range exprs {
		var got []promSeries
		var covered []string
		poll(ctx, t, "data for "+e.source, time.Minute, func() (bool, string) {
			var err error
			if got, err = query(e.expr); err != nil {
				return false, err.Error()
			}
			covered = replicasIn(got, replicas)
			if e.perReplica {
				return len(covered) == len(replicas), fmt.Sprintf("%s: series for %v only", e.expr, covered)
			}
			return len(got) > 0, e.expr + ": no data"
		})
		t.Logf("%-60s %d series", e.source, len(got))
	}

	// Quiet first: an alert firing or pending on a healthy fleet would
	// make the firing below prove nothing. Watched for longer than an
	// alert's `for` and two evaluations, so one pending at the start
	// would have fired within it.
	quietUntil := time.Now().Add(10 * time.Second)
	for time.Now().Before(quietUntil) {
		active, err := activeAlerts(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(active) > 0 {
			t.Fatalf("alerts active on a healthy fleet before the kill: %v", active)
		}
		time.Sleep(time.Second)
	}

	// Kill one replica: it is down at once; the fleet has fewer members
	// once its lease expires.
	if err := procs["prom-2"].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, alert := range []string{"FleetReplicaDown", "FleetMembersBelowDesired"} {
		poll(ctx, t, alert+" to fire", 2*time.Minute, func() (bool, string) {
			active, err := activeAlerts(base)
			if err != nil {
				return false, err.Error()
			}
			return active[alert] == "firing", fmt.Sprintf("active: %v", active)
		})
		t.Logf("%s firing %v after the kill", alert, time.Since(killed).Round(time.Second))
	}
	// The planted stuck load: the survivor gaining the stuck namespace's
	// partition says so in the alert, in status and on /debug/fleet/cache.
	ring := shard.DefaultRingConfig
	stuckPartition := ring.NamespacePartition(stuckNamespace)
	poll(ctx, t, "FleetPartitionLoadStuck to fire", 3*time.Minute, func() (bool, string) {
		active, err := activeAlerts(base)
		if err != nil {
			return false, err.Error()
		}
		return active["FleetPartitionLoadStuck"] == "firing", fmt.Sprintf("active: %v", active)
	})
	t.Logf("FleetPartitionLoadStuck firing %v after the kill", time.Since(killed).Round(time.Second))
	want := regexp.MustCompile(fmt.Sprintf(`STUCK: partition %d has been loading on (prom-0|prom-1) for`, stuckPartition))
	var status []byte
	poll(ctx, t, "status to name the stuck load", time.Minute, func() (bool, string) {
		status, err = exec.CommandContext(ctx, bin, "status", "--kubeconfig", cluster.AdminKubeconfig).CombinedOutput()
		return err == nil && want.Match(status), string(status)
	})
	survivor := want.FindSubmatch(status)[1]
	t.Logf("status says: %s", want.Find(status))
	httpClient, err := cluster.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := cacheStatus(httpClient, ports[string(survivor)])
	if err != nil {
		t.Fatalf("reading /debug/fleet/cache of %s: %v", survivor, err)
	}
	if len(cache.Loading) != 1 || !slices.Contains(cache.Loading[0].Partitions, stuckPartition) {
		t.Errorf("/debug/fleet/cache of %s does not name the stuck load of partition %d: %+v", survivor, stuckPartition, cache.Loading)
	} else {
		t.Logf("/debug/fleet/cache of %s: loading %v since %s, the owned cache waiting for %v", survivor, cache.Loading[0].Partitions, cache.Loading[0].Since.Format(time.RFC3339), cache.Loading[0].Waiting)
	}
}

// namespaceInPartitionOf is a namespace named prefix+N in a partition
// member runs, as its Lease says.
func namespaceInPartitionOf(ctx context.Context, t *testing.T, client kubernetes.Interface, member, prefix string) string {
	t.Helper()
	ring := shard.DefaultRingConfig
	st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(client), "kube-system", "fleet-controller-manager", ring.Partitions)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.Name != member {
			continue
		}
		for i := range 10000 {
			ns := fmt.Sprintf("%s%d", prefix, i)
			if slices.Contains(m.Partitions, ring.NamespacePartition(ns)) {
				return ns
			}
		}
	}
	t.Fatalf("no namespace %s* in a partition %s runs", prefix, member)
	return ""
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
}

// replicasIn lists the replicas named by the series' pod or member labels.
func replicasIn(series []promSeries, replicas []string) []string {
	seen := map[string]bool{}
	for _, s := range series {
		seen[s.Metric["pod"]] = true
		seen[s.Metric["member"]] = true
	}
	var out []string
	for _, r := range replicas {
		if seen[r] {
			out = append(out, r)
		}
	}
	return out
}

type checkedExpr struct {
	source     string
	expr       string
	perReplica bool // keeps a pod or member label, so each replica must appear
}

// dashboardExprs reads every target of deploy/monitoring/dashboard.json,
// with Grafana's variables set as Grafana would for "All".
func dashboardExprs(t *testing.T) []checkedExpr {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, "deploy/monitoring/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var out []checkedExpr
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			expr := strings.NewReplacer(`$pod`, `.*`, `$__rate_interval`, `30s`).Replace(target.Expr)
			out = append(out, checkedExpr{source: "dashboard: " + p.Title, expr: expr, perReplica: true})
		}
	}
	if len(out) == 0 {
		t.Fatal("no expressions in the dashboard")
	}
	return out
}

type promRuleGroups struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

func readRuleGroups(t *testing.T) promRuleGroups {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, "deploy/monitoring/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec promRuleGroups `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	if len(rule.Spec.Groups) == 0 {
		t.Fatal("no rule groups in prometheusrule.yaml")
	}
	return rule.Spec
}

// writeRules turns the PrometheusRule's groups into a Prometheus rules
// file, every `for` shortened to alertRuleFor.
func writeRules(t *testing.T, dir string) string {
	t.Helper()
	groups := readRuleGroups(t)
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if _, ok := r["for"]; ok {
				r["for"] = alertRuleFor
			}
		}
	}
	data, err := yaml.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// comparison is a filtering comparison against a number; with `bool` it
// returns 0 or 1 for every series instead of dropping those that pass.
var comparison = regexp.MustCompile(`(==|!=|>=|<=|>|<)\s*([0-9.]+)`)

// ruleExprs are the alert expressions with their comparisons turned into
// bool comparisons: a healthy fleet then still returns a series for each
// thing the alert watches.
func ruleExprs(t *testing.T) []checkedExpr {
	t.Helper()
	var out []checkedExpr
	for _, g := range readRuleGroups(t).Groups {
		for _, r := range g.Rules {
			expr, _ := r["expr"].(string)
			name, _ := r["alert"].(string)
			expr = comparison.ReplaceAllString(expr, "$1 bool $2")
			perReplica := !strings.Contains(expr, "by (job)")
			out = append(out, checkedExpr{source: "alert: " + name, expr: expr, perReplica: perReplica})
		}
	}
	return out
}

// activeAlerts names each alert firing or pending, with its state.
func activeAlerts(base string) (map[string]string, error) {
	var out struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := promGet(base+"/api/v1/alerts", &out); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	active := map[string]string{}
	for _, a := range out.Data.Alerts {
		if a.State == "firing" || a.State == "pending" {
			active[a.Labels["alertname"]] = a.State
		}
	}
	return active, nil
}

// promGet decodes a 200 reply of Prometheus' HTTP API into out; any
// other status is an error carrying the start of its body.
func promGet(u string, out any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}
