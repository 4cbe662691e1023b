//go:build e2e && long

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// weightHoldInTest: the replicas' --placement-weight-hold.
const weightHoldInTest = 5 * time.Second

// TestPlacementByWeight: a fleet of three with --placement-by-weight,
// its work piled into namespaces of one replica's partitions, adopts one
// weight table on every member, after which the busiest replica holds
// less than before and at most 1.3x the mean of the objects; with the
// load steady no new table follows for a minute; and every partition
// runs on one member.
func TestPlacementByWeight(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	replicas := []string{"wt-0", "wt-1", "wt-2"}
	for _, r := range replicas {
		if _, _, err := cluster.StartFleetReplica(ctx, bin, r, "--placement-by-weight", "--placement-weight-hold="+weightHoldInTest.String(), "-v=2"); err != nil {
			t.Fatal(err)
		}
	}
	waitFleetRunning(ctx, t, client, replicas)

	// Seven namespaces of 40 Pods, all in partitions of the member that
	// runs the most partitions without the colocated singletons, and a
	// few light ones elsewhere.
	status := fleetStatus(ctx, t, client)
	heavy := busiestPartitionOwner(status)
	owned := map[int]bool{}
	for _, m := range status.Members {
		if m.Name == heavy {
			for _, p := range m.Partitions {
				owned[p] = true
			}
		}
	}
	var hot, light []string
	for i := 0; len(hot) < 7 || len(light) < 5; i++ {
		ns := fmt.Sprintf("load-%d", i)
		if owned[shard.DefaultRingConfig.NamespacePartition(ns)] {
			if len(hot) < 7 {
				hot = append(hot, ns)
			}
		} else if len(light) < 5 {
			light = append(light, ns)
		}
	}
	t.Logf("%s runs the namespaces %v; the others %v", heavy, hot, light)
	for _, ns := range append(append([]string{}, hot...), light...) {
		createNamespace(ctx, t, client, ns)
		// Pods are admitted once the fleet's serviceaccount controller has
		// made the namespace's default ServiceAccount.
		poll(ctx, t, "the default ServiceAccount of "+ns, time.Minute, func() (bool, string) {
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
		pods := 2
		if slices.Contains(hot, ns) {
			pods = 40
		}
		for i := range pods {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: ns},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}}}
			if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	var before float64
	var table string
	poll(ctx, t, "one weight table on every member", 3*time.Minute, func() (bool, string) {
		s := fleetStatus(ctx, t, client)
		tables := map[string]bool{}
		for _, st := range memberStates(ctx, t, client) {
			tables[st.Table] = true
		}
		if len(tables) == 1 && !tables[""] {
			for tb := range tables {
				table = tb
			}
			return true, ""
		}
		before = max(before, s.Busiest)
		return false, fmt.Sprintf("tables %d, busiest %.2fx", len(tables), s.Busiest)
	})
	var after float64
	poll(ctx, t, "the busiest replica below where it was and within 1.3x the mean", 2*time.Minute, func() (bool, string) {
		s := fleetStatus(ctx, t, client)
		after = s.Busiest
		return len(s.UnownedPartitions) == 0 && after < before && after <= 1.3, fmt.Sprintf("busiest %.2fx (before %.2fx), unowned %v", after, before, s.UnownedPartitions)
	})
	t.Logf("busiest replica against the mean: %.2fx before the table, %.2fx after", before, after)
	time.Sleep(time.Minute)
	for _, st := range memberStates(ctx, t, client) {
		if st.Table != table {
			t.Errorf("a new table followed a steady load")
		}
	}
	if n := strings.Count(readLogs(t, cluster, replicas), "Adopting a new partition weight table"); n != 1 {
		t.Errorf("%d tables adopted, want 1", n)
	}
}

// fleetStatus reads the fleet's Leases as the status command does.
func fleetStatus(ctx context.Context, t *testing.T, client kubernetes.Interface) shard.FleetStatus {
	t.Helper()
	s, err := shard.ReadFleet(ctx, membership.NewLeaseStore(client), "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// memberStates are the states in the fleet's Leases.
func memberStates(ctx context.Context, t *testing.T, client kubernetes.Interface) []membership.State {
	t.Helper()
	leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: membership.FleetLabel})
	if err != nil {
		t.Fatal(err)
	}
	var out []membership.State
	for _, l := range leases.Items {
		st, err := membership.ParseState(l.Annotations[membership.StateAnnotation])
		if err != nil {
			t.Fatalf("lease %s: %v", l.Name, err)
		}
		out = append(out, st)
	}
	return out
}

// busiestPartitionOwner is the member that runs the most partitions
// among those that run no singleton of the colocated set.
func busiestPartitionOwner(s shard.FleetStatus) string {
	best := ""
	most := -1
	for _, m := range s.Members {
		if slices.Contains(m.Singletons, "garbage-collector-controller") {
			continue
		}
		if len(m.Partitions) > most {
			best, most = m.Name, len(m.Partitions)
		}
	}
	return best
}

// readLogs is every replica's log.
func readLogs(t *testing.T, cluster *localcluster.Cluster, replicas []string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range replicas {
		data, err := os.ReadFile(filepath.Join(cluster.Dir, r+".log"))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
