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

// weightHoldInTest: the replicas' --placement-weight-hold, longer than
// the minute for which the hold leaves the partitions a deal moved where
// they are, so that the load piled right after the deals is balanced by
// one table, with every partition free to move.
const weightHoldInTest = 70 * time.Second

// TestPlacementByWeight: a fleet of three with its default placement
// (by weight) deals namespaces created one by one as they appear, so
// that no replica runs more than its even share of them and a
// partition's worth; then, its work piled into the
// namespaces of one replica, it adopts one table by the hold on every
// member, after which the busiest replica holds less than
// before and at most 1.3x the mean of the objects; with the load steady
// no new table follows for a minute; and every partition runs on one
// member.
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
		if _, _, err := cluster.StartFleetReplica(ctx, bin, r, "--placement-weight-hold="+weightHoldInTest.String(), "-v=2"); err != nil {
			t.Fatal(err)
		}
	}
	waitFleetRunning(ctx, t, client, replicas)
	// A keeper moves nothing before it has weights for the table.
	poll(ctx, t, "every partition's weight in the Leases", time.Minute, func() (bool, string) {
		measured := map[int]bool{}
		for _, st := range memberStates(ctx, t, client) {
			for p := range st.Weights {
				measured[p] = true
			}
		}
		return len(measured) == shard.DefaultRingConfig.Partitions, fmt.Sprintf("%d measured", len(measured))
	})

	const dealtNamespaces = 12
	var namespaces []string
	for i := range dealtNamespaces {
		ns := fmt.Sprintf("load-%d", i)
		namespaces = append(namespaces, ns)
		createNamespace(ctx, t, client, ns)
		// Pods are admitted once the fleet's serviceaccount controller has
		// made the namespace's default ServiceAccount.
		poll(ctx, t, "the default ServiceAccount of "+ns, time.Minute, func() (bool, string) {
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
	}
	perMember := map[string][]string{}
	poll(ctx, t, "the namespaces dealt, every partition running", time.Minute, func() (bool, string) {
		s := fleetStatus(ctx, t, client)
		owners := s.PartitionOwners()
		perMember = map[string][]string{}
		for _, ns := range namespaces {
			o := owners[shard.DefaultRingConfig.NamespacePartition(ns)]
			perMember[o] = append(perMember[o], ns)
		}
		most := 0
		for _, nss := range perMember {
			most = max(most, len(nss))
		}
		// An even share of 12 is 4 (the colocated singletons' owner
		// has an even share placed by weight), and a deal may miss it
		// by one partition.
		return len(s.UnownedPartitions) == 0 && most <= 5, fmt.Sprintf("namespaces per replica %v", perMember)
	})
	if n := strings.Count(readLogs(t, cluster, replicas), "dealing new namespaces"); n == 0 {
		t.Errorf("no deal logged")
	}
	t.Logf("namespaces dealt: %v", perMember)

	// Most of the work, in the namespaces of the replica that runs the
	// most of them without the colocated singletons.
	status := fleetStatus(ctx, t, client)
	heavy := ""
	for _, m := range status.Members {
		if !slices.Contains(m.Singletons, "garbage-collector-controller") && (heavy == "" || len(perMember[m.Name]) > len(perMember[heavy])) {
			heavy = m.Name
		}
	}
	hot := perMember[heavy]
	t.Logf("%s runs the namespaces %v", heavy, hot)
	for _, ns := range namespaces {
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
	dealt := memberStates(ctx, t, client)[0].Table
	poll(ctx, t, "one new weight table on every member", 3*time.Minute, func() (bool, string) {
		s := fleetStatus(ctx, t, client)
		tables := map[string]bool{}
		for _, st := range memberStates(ctx, t, client) {
			tables[st.Table] = true
		}
		if len(tables) == 1 && !tables[""] && !tables[dealt] {
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
	if n := strings.Count(readLogs(t, cluster, replicas), "the busiest member stayed above the bound"); n != 1 {
		t.Errorf("%d tables adopted by the hold, want 1", n)
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
