//go:build e2e && long

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// previousReleaseBin is the release before this one, built from its tag
// in the repository's history (make test-long: PREVIOUS_RELEASE). It
// reads and writes Lease state versions 1 to previousNewestState and
// places pieces by count by default (PlacementColocatedShare at newest);
// it has never heard of PlacementWeightedEvenShare.
func previousReleaseBin(t *testing.T) string {
	t.Helper()
	release := os.Getenv("FCM_PREVIOUS_RELEASE")
	if release == "" {
		t.Fatal("FCM_PREVIOUS_RELEASE is not set: make test-long builds the previous release and names it")
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager-"+release)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the previous release %s: %v (make %s builds it)", release, err, bin)
	}
	return bin
}

// previousNewestState is the newest Lease state version the previous
// release reads.
const previousNewestState = 4

// thisRelease's replicas run with their defaults: they place pieces by
// weight, the colocated owner's share even, a placement the previous
// release does not know, so the upgrade switches placement (and the
// state version, when this release reads a newer one).
var thisRelease []string

// TestRollingUpgradeAndRollback replaces a fleet of three replicas of the
// previous release (its own binary) one by one with this release, as a
// Deployment's rolling update does (the new replica ready before the old
// one leaves), under a workload, then rolls back the same way. While any
// replica of the previous release takes part, every replica places pieces
// its way and writes the Lease state version it reads; once the last one
// has left, the fleet switches to placement by weight (and the newest
// state version), moving only what it moves; the rollback switches back as soon as the
// first old replica joins. No piece is without an owner for more than 2 s,
// every write of the partition controllers falls inside its writer's runs
// (the audit-log checker), and the workload converges after each phase.
func TestRollingUpgradeAndRollback(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Three nodes: createWorkload's DaemonSet is ready on three.
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 3, KwokPodParallelism: 32})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	previous, current := previousReleaseBin(t), filepath.Join(binDir(t), "fleet-controller-manager")
	u := &upgrade{t: t, ctx: ctx, cluster: cluster, client: client, logs: map[string]string{}, ports: map[string]int{}}
	old := []string{"old-0", "old-1", "old-2"}
	for _, name := range old {
		u.start(previous, name)
	}
	waitFleetRunning(ctx, t, client, old)
	u.checkPlacement(old, shard.PlacementColocatedShare)
	u.checkStateVersion(old, previousNewestState)
	newest := slices.Max(membership.StateVersions)
	// One namespace of workload now; each roll adds one halfway, and one
	// more runs under the newer placement.
	namespaces := []string{"upgrade-0"}
	createWorkload(ctx, t, client, namespaces[0])
	waitWorkload(ctx, t, client, namespaces[0])

	from := time.Now()
	upgraded := u.roll(old, []string{"new-0", "new-1", "new-2"}, current, thisRelease, &namespaces)
	waitFleetRunning(ctx, t, client, upgraded)
	// The new replicas run the old fleet's partition count, which its
	// Leases do not say, not a new fleet's.
	u.checkPartitions(upgraded, shard.LegacyPartitions)
	// The new replicas placed pieces the old way while an old one took
	// part (else they could not have agreed with it and turned ready).
	u.checkPlacementUsed(upgraded[0], shard.PlacementColocatedShare)
	u.checkPlacement(upgraded, shard.PlacementWeightedEvenShare)
	u.logSwitch(upgraded, shard.PlacementWeightedEvenShare)
	// The new replicas wrote the previous release's newest state version
	// while an old one read their Leases, and their own once the last had
	// left.
	u.checkStateVersion(upgraded, newest)
	if newest != previousNewestState {
		u.checkVersionSwitch(upgraded[0], previousNewestState, newest)
	}
	// The controllers work under the newer placement.
	ns := fmt.Sprintf("upgrade-%d", len(namespaces))
	namespaces = append(namespaces, ns)
	createWorkload(ctx, t, client, ns)
	for _, ns := range namespaces {
		waitWorkload(ctx, t, client, ns)
	}
	upgradeGap := u.longestUnowned(from, time.Now())

	from = time.Now()
	rolledBack := u.roll(upgraded, []string{"back-0", "back-1", "back-2"}, previous, nil, &namespaces)
	waitFleetRunning(ctx, t, client, rolledBack)
	u.checkPlacement(rolledBack, shard.PlacementColocatedShare)
	u.logSwitch(upgraded, shard.PlacementColocatedShare)
	u.checkStateVersion(rolledBack, previousNewestState)
	// The replicas of this release went back to the previous release's
	// version when the first old one joined, before they left.
	if newest != previousNewestState {
		u.checkVersionSwitch(upgraded[len(upgraded)-1], newest, previousNewestState)
	}
	for _, ns := range namespaces {
		waitWorkload(ctx, t, client, ns)
	}
	rollbackGap := u.longestUnowned(from, time.Now())

	for phase, gap := range map[string]unownedGap{"upgrade": upgradeGap, "rollback": rollbackGap} {
		t.Logf("%s: longest time a piece had no owner: %v (%s)", phase, gap.length.Round(time.Millisecond), gap.piece)
		if gap.length > 2*time.Second {
			t.Errorf("%s: %s had no owner for %v, more than 2 s", phase, gap.piece, gap.length.Round(time.Millisecond))
		}
	}
	// The previous release's fleet runs the partition count of a release
	// from before the count was published, and this release's replicas
	// kept it throughout.
	legacy := shard.DefaultRingConfig
	legacy.Partitions = shard.LegacyPartitions
	violations, judged := checkRunsAgainstAudit(t, cluster.AuditLog, u.logs, nil, nil, namespaces, legacy)
	t.Logf("ownership: %d partition controller writes (%d into the workload's namespaces) and %d singleton writes checked against the runs of %d replicas; %d writes of the previous release's clients whose piece its user agents do not tell", judged.partition, judged.inNamespaces, judged.singleton, len(u.logs), judged.unattributed)
	if judged.inNamespaces == 0 {
		t.Error("no partition-controller write was checked")
	}
	for _, v := range violations {
		t.Errorf("write outside its writer's runs: %v", v)
	}
}

// upgrade drives the replicas of TestRollingUpgradeAndRollback.
type upgrade struct {
	t       *testing.T
	ctx     context.Context
	cluster *localcluster.Cluster
	client  kubernetes.Interface
	byName  map[string]*localcluster.Process
	logs    map[string]string
	ports   map[string]int
	// rollStarted is when the last roll began.
	rollStarted time.Time
}

func (u *upgrade) start(bin, name string, args ...string) {
	u.t.Helper()
	proc, port, err := u.cluster.StartFleetReplica(u.ctx, bin, name, args...)
	if err != nil {
		u.t.Fatal(err)
	}
	if u.byName == nil {
		u.byName = map[string]*localcluster.Process{}
	}
	u.byName[name], u.logs[name], u.ports[name] = proc, proc.LogPath, port
}

// roll replaces each of from with one of to, bin started with args: the new
// replica ready first, then the old one stopped with SIGTERM (a rolling
// update with maxSurge 1, maxUnavailable 0). A namespace of workload is
// created halfway, so the controllers work while pieces move.
func (u *upgrade) roll(from, to []string, bin string, args []string, namespaces *[]string) []string {
	u.t.Helper()
	u.rollStarted = time.Now()
	for i := range from {
		start := time.Now()
		u.start(bin, to[i], args...)
		u.waitReady(to[i])
		if err := u.byName[from[i]].Stop(time.Minute); err != nil {
			u.t.Fatal(err)
		}
		u.t.Logf("%s replaced %s in %v", to[i], from[i], time.Since(start).Round(time.Millisecond))
		if i == 1 {
			ns := fmt.Sprintf("upgrade-%d", len(*namespaces))
			*namespaces = append(*namespaces, ns)
			createWorkload(u.ctx, u.t, u.client, ns)
		}
	}
	return to
}

// waitReady waits for the replica's /readyz: joined and running its share.
func (u *upgrade) waitReady(name string) {
	u.t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	poll(u.ctx, u.t, name+" ready", 2*time.Minute, func() (bool, string) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", u.ports[name]))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("HTTP %d", resp.StatusCode)
	})
}

// checkStateVersion: each of replicas' Leases holds a state of version.
func (u *upgrade) checkStateVersion(replicas []string, version int) {
	u.t.Helper()
	for _, name := range replicas {
		lease, err := u.client.CoordinationV1().Leases("kube-system").Get(u.ctx, name, metav1.GetOptions{})
		if err != nil {
			u.t.Errorf("%s's Lease: %v", name, err)
			continue
		}
		var st struct {
			V int `json:"v"`
		}
		if err := json.Unmarshal([]byte(lease.Annotations[membership.StateAnnotation]), &st); err != nil || st.V != version {
			u.t.Errorf("%s's Lease holds state version %d (%v), want %d", name, st.V, err, version)
		}
	}
}

// checkVersionSwitch: replica logged moving from one state version to
// another (the members it observed all read the new one).
func (u *upgrade) checkVersionSwitch(replica string, from, to int) {
	u.t.Helper()
	data, err := os.ReadFile(u.logs[replica])
	if err != nil {
		u.t.Fatal(err)
	}
	want := fmt.Sprintf(`"Writing another state version: the members observed read it" version=%d was=%d`, to, from)
	if !strings.Contains(string(data), want) {
		u.t.Errorf("%s never logged %s", replica, want)
	}
}

var (
	appliedPlacementRE = regexp.MustCompile(`"Applied view".* placement="([^"]+)"`)
	appliedViewRE      = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Applied view" view="([0-9a-f]+)" epoch=\d+ placement="([^"]+)"`)
	startingPieceRE    = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Starting piece" piece="([^"]+)" view="([0-9a-f]+)"`)
)

// checkPlacementUsed: replica applied at least one view placed by placement.
func (u *upgrade) checkPlacementUsed(replica, placement string) {
	u.t.Helper()
	data, err := os.ReadFile(u.logs[replica])
	if err != nil {
		u.t.Fatal(err)
	}
	for _, m := range appliedPlacementRE.FindAllStringSubmatch(string(data), -1) {
		if m[1] == placement {
			return
		}
	}
	u.t.Errorf("%s never applied a view placed by %s", replica, placement)
}

// logSwitch logs how long after the first of replicas applied a view placed
// by placement the last of them did, and how many pieces they started under
// the first such view of each (what the switch moved).
func (u *upgrade) logSwitch(replicas []string, placement string) {
	u.t.Helper()
	var first, last time.Time
	moved := 0
	for _, name := range replicas {
		data, err := os.ReadFile(u.logs[name])
		if err != nil {
			u.t.Fatal(err)
		}
		view := ""
		for _, line := range strings.Split(string(data), "\n") {
			if m := appliedViewRE.FindStringSubmatch(line); m != nil && view == "" && m[3] == placement {
				at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", time.Now().Year(), m[1]), time.Local)
				if err != nil {
					u.t.Fatal(err)
				}
				if !at.Before(u.rollStarted) {
					view = m[2]
					if first.IsZero() || at.Before(first) {
						first = at
					}
					if at.After(last) {
						last = at
					}
				}
			}
			if m := startingPieceRE.FindStringSubmatch(line); m != nil && view != "" && m[3] == view {
				moved++
			}
		}
		if view == "" {
			u.t.Errorf("%s applied no view placed by %s", name, placement)
		}
	}
	u.t.Logf("switch to %s: applied by all %d replicas within %v; %d pieces started under it", placement, len(replicas), last.Sub(first).Round(time.Millisecond), moved)
}

// checkPartitions: each of replicas logged that it runs the fleet's
// partition count, partitions, read from the Leases.
func (u *upgrade) checkPartitions(replicas []string, partitions int) {
	u.t.Helper()
	want := fmt.Sprintf(`"Running the fleet's partition count" partitions=%d `, partitions)
	for _, name := range replicas {
		data, err := os.ReadFile(u.logs[name])
		if err != nil {
			u.t.Fatal(err)
		}
		if !strings.Contains(string(data), want) {
			u.t.Errorf("%s did not log %s", name, want)
		}
	}
}

// checkPlacement: the last view each of replicas applied used placement.
func (u *upgrade) checkPlacement(replicas []string, placement string) {
	u.t.Helper()
	for _, name := range replicas {
		data, err := os.ReadFile(u.logs[name])
		if err != nil {
			u.t.Fatal(err)
		}
		matches := appliedPlacementRE.FindAllStringSubmatch(string(data), -1)
		if len(matches) == 0 {
			u.t.Errorf("%s logged no applied view", name)
			continue
		}
		if got := matches[len(matches)-1][1]; got != placement {
			u.t.Errorf("%s's last view placed pieces by %s, want %s", name, got, placement)
		}
	}
}

// longestUnowned is the longest time within [from, to] that a piece ran on
// no replica, from every replica's runs (the log lines the ownership
// checker reads).
func (u *upgrade) longestUnowned(from, to time.Time) unownedGap {
	u.t.Helper()
	return longestUnowned(readPieceRuns(u.t, u.logs), from, to)
}
