//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestStalledWatchTakesItsShare: a replica whose watch streams are stalled
// while its other requests are answered (renewals succeed) still takes its
// share of a killed replica's partitions soon after the lease runs out,
// without waiting for the stall to end: it lists the Leases while its
// watch lags its own renewals (membership/watchlag.go). Without that it
// cannot see the survivor acknowledge the new view and its share waits
// for the stall (the chaos soak's stalled watches: partitions unserved
// 12.7 s). Every write is judged afterwards.
func TestStalledWatchTakesItsShare(t *testing.T) {
	inLane(t, laneLight)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{})
	keepLogsOnFailure(t, cluster)
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	if other := os.Getenv("CHAOS_FLEET_BIN"); other != "" {
		bin = other
	}
	c := &chaosRun{t: t, ctx: ctx, cluster: cluster, client: client, bin: bin, rng: rand.New(rand.NewSource(1)),
		deaths: map[int]time.Time{}, pauses: map[int][][2]time.Time{}, live: map[string]*chaosNamespace{}}
	c.grantLeastPrivilege()
	var names []string
	for _, name := range []string{"fcm-a", "fcm-b", "fcm-c"} {
		r := c.newChaosReplica(name)
		c.replicas = append(c.replicas, r)
		c.startReplica(r)
		names = append(names, name)
	}
	waitFleetRunning(ctx, t, client, names)
	survivor, stalled, victim := c.replicas[0], c.replicas[1], c.replicas[2]

	// The stall lasts until every partition runs or the bound has passed:
	// a share that waits for the stall to end fails the test.
	const bound = membership.DefaultLeaseDuration + 45*time.Second
	stalled.httpProxy.StallWatches(true)
	defer stalled.httpProxy.StallWatches(false)
	time.Sleep(3 * time.Second)
	c.kill(victim)
	killed := time.Now()
	poll(ctx, t, fmt.Sprintf("%s and %s to run every partition, %s's watches stalled", survivor.name, stalled.name, stalled.name), bound, func() (bool, string) {
		return partitionsRunBy(ctx, client, survivor.name, stalled.name)
	})
	took := time.Since(killed)
	stalled.httpProxy.StallWatches(false)
	t.Logf("%s killed; %s and %s ran every partition %v later, %s's watch streams stalled throughout", victim.name, survivor.name, stalled.name, took.Round(time.Millisecond), stalled.name)

	data, err := os.ReadFile(stalled.proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "Lease watch is behind this replica's own renewals") {
		t.Errorf("%s never said its Lease watch was behind", stalled.name)
	}
	runs := c.pieceRuns()
	violations, judged := ownershipViolations(t, cluster.AuditLog, runs, map[string]bool{"fcm-a": true, "fcm-b": true, "fcm-c": true}, nil, shard.DefaultRingConfig)
	for _, v := range violations {
		t.Errorf("ownership checker: %v", v)
	}
	t.Logf("every write judged: %d partition, %d singleton and %d own writes, %d violations", judged.partition, judged.singleton, judged.own, len(violations))
}

// partitionsRunBy says whether the Leases of members, together, list every
// partition as running; if not, how many.
func partitionsRunBy(ctx context.Context, client kubernetes.Interface, members ...string) (bool, string) {
	running := map[string]bool{}
	for _, name := range members {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, err := membership.ParseState(l.Annotations[membership.StateAnnotation])
		if err != nil {
			return false, fmt.Sprintf("%s's state: %v", name, err)
		}
		for _, p := range st.Running {
			if strings.HasPrefix(p, "partition/") {
				running[p] = true
			}
		}
	}
	want := shard.DefaultRingConfig.Partitions
	return len(running) == want, fmt.Sprintf("%d of %d partitions running", len(running), want)
}
