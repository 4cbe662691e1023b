//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/recordingpieces"
)

// observedFleet is three recording replicas (recordingReplica) with their secure
// ports: membership, ring, Manager, metrics and pages are the real ones;
// only the controllers are replaced.
type observedFleet struct {
	cluster *localcluster.Cluster
	bin     string
	ports   map[string]int
	procs   map[string]*localcluster.Process
	http    *http.Client
}

func startObservedFleet(ctx context.Context, t *testing.T, replicas []string) *observedFleet {
	t.Helper()
	cluster := startCluster(ctx, t, localcluster.Options{})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	f := &observedFleet{cluster: cluster, bin: filepath.Join(binDir(t), recordingReplica),
		ports: map[string]int{}, procs: map[string]*localcluster.Process{}}
	if f.http, err = cluster.AdminHTTPClient(); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		f.start(ctx, t, r)
	}
	waitFleetRunning(ctx, t, client, replicas)
	return f
}

func (f *observedFleet) start(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	p, port, err := f.cluster.StartFleetReplica(ctx, f.bin, name,
		"--record-file="+filepath.Join(f.cluster.Dir, name+".jsonl"),
		"--singletons="+strings.Join(dummySingletons, ","))
	if err != nil {
		t.Fatal(err)
	}
	f.procs[name], f.ports[name] = p, port
}

func (f *observedFleet) get(t *testing.T, name, path string) []byte {
	t.Helper()
	resp, err := f.http.Get(fmt.Sprintf("https://127.0.0.1:%d%s", f.ports[name], path))
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s from %s: HTTP %d: %s", path, name, resp.StatusCode, body)
	}
	return body
}

func (f *observedFleet) metrics(t *testing.T, name string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(f.get(t, name, "/metrics")))
	if err != nil {
		t.Fatalf("parsing /metrics of %s: %v", name, err)
	}
	return families
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// fleetStatusJSON mirrors shard.FleetStatus as printed by `status -o json`.
type fleetStatusJSON struct {
	Members []struct {
		Name       string   `json:"name"`
		Health     string   `json:"health"`
		Partitions []int    `json:"partitions"`
		Singletons []string `json:"singletons"`
	} `json:"members"`
	UnownedPartitions []int `json:"unownedPartitions"`
}

// TestFleetStatusMatchesMetrics: what `fleet-controller-manager status`
// reads from the Leases is what each replica reports on /metrics, the
// fleet gauges hold what they should, and /metrics refuses anonymous
// requests.
func TestFleetStatusMatchesMetrics(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	replicas := []string{"obs-0", "obs-1", "obs-2"}
	f := startObservedFleet(ctx, t, replicas)

	var status fleetStatusJSON
	fromMetrics := map[string][]string{}
	poll(ctx, t, "status and /metrics to agree", time.Minute, func() (bool, string) {
		out, err := exec.CommandContext(ctx, f.bin, "status", "--kubeconfig="+f.cluster.AdminKubeconfig, "-o", "json").Output()
		if err != nil {
			return false, fmt.Sprintf("status: %v", err)
		}
		status = fleetStatusJSON{}
		if err := json.Unmarshal(out, &status); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		fromStatus := map[string][]string{}
		for _, m := range status.Members {
			var pieces []string
			for _, p := range m.Partitions {
				pieces = append(pieces, fmt.Sprintf("partition/%d", p))
			}
			for _, s := range m.Singletons {
				pieces = append(pieces, "singleton/"+s)
			}
			sort.Strings(pieces)
			fromStatus[m.Name] = pieces
		}
		for _, r := range replicas {
			var pieces []string
			for _, m := range f.metrics(t, r)["fleet_piece_running"].GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					pieces = append(pieces, label(m, "piece"))
				}
			}
			sort.Strings(pieces)
			fromMetrics[r] = pieces
		}
		return reflect.DeepEqual(fromStatus, fromMetrics), fmt.Sprintf("status %v, metrics %v", fromStatus, fromMetrics)
	})
	if len(status.UnownedPartitions) != 0 {
		t.Errorf("status lists unowned partitions: %v", status.UnownedPartitions)
	}
	total := 0
	for _, r := range replicas {
		total += len(fromMetrics[r])
		families := f.metrics(t, r)
		if got := families["fleet_members"].GetMetric()[0].GetGauge().GetValue(); got != 3 {
			t.Errorf("%s fleet_members = %v, want 3", r, got)
		}
		// The authority gauge is sampled once a second, and a replica's
		// join can end within milliseconds of its start: allow a sample.
		poll(ctx, t, r+" fleet_authority = 1", 5*time.Second, func() (bool, string) {
			got := f.metrics(t, r)["fleet_authority"].GetMetric()[0].GetGauge().GetValue()
			return got == 1, fmt.Sprintf("fleet_authority = %v", got)
		})
		renewed := 0.0
		for _, m := range families["fleet_lease_renewals_total"].GetMetric() {
			if label(m, "result") == "success" {
				renewed = m.GetCounter().GetValue()
			}
		}
		if renewed == 0 {
			t.Errorf("%s reports no successful lease renewal", r)
		}
		perMember := map[string]float64{}
		for _, m := range families["fleet_member_pieces"].GetMetric() {
			perMember[label(m, "member")] = m.GetGauge().GetValue()
		}
		for _, other := range replicas {
			if int(perMember[other]) != len(fromMetrics[other]) {
				t.Errorf("%s says the ring gives %s %v pieces; %s runs %d", r, other, perMember[other], other, len(fromMetrics[other]))
			}
		}
	}
	if want := shard.DefaultRingConfig.Partitions + len(dummySingletons); total != want {
		t.Errorf("replicas run %d pieces in all, want %d", total, want)
	}

	// Delegated authentication and authorization, as KCM: no credentials,
	// no metrics.
	anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback
	for _, path := range []string{"/metrics", "/debug/fleet"} {
		resp, err := anonymous.Get(fmt.Sprintf("https://127.0.0.1:%d%s", f.ports["obs-0"], path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Errorf("anonymous GET %s: HTTP %d, want 401 or 403", path, resp.StatusCode)
		}
	}
	t.Logf("status and /metrics agree on %d pieces over %d replicas", total, len(replicas))
}

// TestReadinessMeansTookShare: a new replica reports ready only once it
// runs every partition the ring gives it and every other replica runs
// what the ring gives it, so that a rolling update, which replaces the
// next replica when this one is ready, never interrupts the handover.
func TestReadinessMeansTookShare(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := startObservedFleet(ctx, t, []string{"obs-0", "obs-1"})
	client, err := f.cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	f.start(ctx, t, "obs-2")
	// Polled often: the handover to a joined replica takes tens of
	// milliseconds with dummy pieces, and readiness must not come first.
	// The join can end within StartFleetReplica's wait for /healthz (its
	// poll is 250 ms; joins end in milliseconds once every member is
	// seen), so obs-2 may be ready at the first poll: what is checked is
	// that, when it answered ready, its manager had started every
	// partition the ring gives it (its "Starting piece" log lines), every
	// other replica runs its own (their Leases), and each started piece
	// then runs (its record file).
	notReady := 0
	var why string
	deadline := time.Now().Add(2 * time.Minute)
	var readyAt time.Time
	for {
		resp, err := f.http.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", f.ports["obs-2"]))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			readyAt = time.Now()
			break
		}
		notReady++
		why = string(body)
		if time.Now().After(deadline) {
			t.Fatalf("obs-2 not ready after 2 minutes: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(client), "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
	if err != nil {
		t.Fatal(err)
	}
	ring := shard.NewRing(shard.DefaultRingConfig, []string{"obs-0", "obs-1", "obs-2"})
	runs := map[string]map[int]bool{}
	for _, m := range st.Members {
		runs[m.Name] = map[int]bool{}
		for _, p := range m.Partitions {
			runs[m.Name][p] = true
		}
	}
	var mine []string
	for p := range shard.DefaultRingConfig.Partitions {
		owner := ring.PartitionOwner(p)
		if owner == "obs-2" {
			piece := string(shard.PartitionPiece(p))
			mine = append(mine, piece)
			// Manager's log: the Runner's Start is called right after
			// this line and before the status /readyz reads.
			started := ownership(t, f.procs["obs-2"].LogPath, piece)
			if len(started) == 0 || started[0][0].After(readyAt) {
				t.Errorf("obs-2 answered ready at %s before its manager started %s (its runs: %v)", readyAt.Format("15:04:05.000000"), piece, started)
			}
		}
		if !runs[owner][p] {
			t.Errorf("obs-2 is ready but %s does not run partition %d, which the ring gives it", owner, p)
		}
	}
	// A recording piece writes its start record from its own goroutine,
	// after Start returned: on a busy machine that comes after the ready
	// answer, so only its arrival is checked.
	if err := waitPiecesRecorded(ctx, filepath.Join(f.cluster.Dir, "obs-2.jsonl"), mine); err != nil {
		t.Error(err)
	}
	t.Logf("obs-2 ready running its %d partitions; not ready %d times before (last: %q)", len(mine), notReady, strings.TrimSpace(why))
}

// waitPiecesRecorded waits until the record file at path holds a start of
// every piece, for at most 30 s.
func waitPiecesRecorded(ctx context.Context, path string, pieces []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		records, err := recordingpieces.Read(path)
		if err != nil {
			return err
		}
		started := map[string]bool{}
		for _, r := range records {
			if r.Event == "start" {
				started[r.Piece] = true
			}
		}
		var missing []string
		for _, p := range pieces {
			if !started[p] {
				missing = append(missing, p)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pieces started by the manager but never run: %v", missing)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestFleetPageInChromium opens /debug/fleet in headless Chromium (Debian's
// chromium; make test installs it) through a loopback proxy that holds the
// admin client certificate, checks the rendered page shows every member and
// every partition with its owner, and saves a screenshot.
func TestFleetPageInChromium(t *testing.T) {
	inLane(t, laneLight)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make test installs it: test-deps)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	replicas := []string{"page-0", "page-1", "page-2"}
	f := startObservedFleet(ctx, t, replicas)

	target, _ := url.Parse(fmt.Sprintf("https://127.0.0.1:%d", f.ports["page-1"]))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = f.http.Transport
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: proxy}
	go server.Serve(listener) //nolint:errcheck // ends with Close
	defer server.Close()
	pageURL := "http://" + listener.Addr().String() + "/debug/fleet"

	chromiumArgs := func(extra ...string) []string {
		return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir()}, extra...)
	}
	dom, err := exec.CommandContext(ctx, chromium, chromiumArgs("--dump-dom", pageURL)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	page := string(dom)
	for _, r := range replicas {
		if !strings.Contains(page, `data-member="`+r+`"`) {
			t.Errorf("the page does not show member %s", r)
		}
	}
	owned := strings.Count(page, `data-partition=`) - strings.Count(page, `data-member=""`)
	if want, cells := shard.DefaultRingConfig.Partitions, strings.Count(page, `data-partition=`); cells != want || owned != want {
		t.Errorf("the page shows %d partition cells, %d with an owner; want %d and %d", cells, owned, want, want)
	}
	if strings.Contains(page, "ZgotmplZ") {
		t.Error("the page has values html/template refused (colours lost)")
	}
	if !strings.Contains(page, "page-1 (this replica)") {
		t.Error("the page does not say which replica serves it")
	}

	dir := os.Getenv("FCM_E2E_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "debug-fleet.png")
	if out, err := exec.CommandContext(ctx, chromium, chromiumArgs("--window-size=1200,1400", "--screenshot="+shot, pageURL)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	info, err := os.Stat(shot)
	if err != nil || info.Size() < 10_000 {
		t.Fatalf("screenshot %s missing or empty (%v)", shot, err)
	}
	png, _ := os.ReadFile(shot)
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("%s is not a PNG", shot)
	}
	t.Logf("screenshot of /debug/fleet: %s (%d bytes)", shot, info.Size())
}
