//go:build e2e && long

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestKillServesVictimNamespacesWithinLease kills one of three replicas
// with SIGKILL while every partition holds a namespace, and checks that each
// of the victim's namespaces (about 20 partitions' worth) is served again,
// a Deployment created there after the kill given its ReplicaSet, within
// the lease duration plus 3 s of the kill: the survivors wait one lease
// duration to be sure the victim stopped, then load everything they gained
// together. Its bound is on time, so it is built only with the long tag
// (make test-long) and runs alone there, before the tests that share the
// machine.
func TestKillServesVictimNamespacesWithinLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	procs := startRunningFleet(ctx, t, cluster, client, "fcm-0", "fcm-1", "fcm-2")

	// One namespace in every partition, each served before the kill.
	ring := shard.DefaultRingConfig
	byPartition := map[int]string{}
	for i := 0; len(byPartition) < ring.Partitions; i++ {
		ns := fmt.Sprintf("kill-%d", i)
		if p := ring.NamespacePartition(ns); byPartition[p] == "" {
			byPartition[p] = ns
		}
	}
	for _, ns := range byPartition {
		createNamespace(ctx, t, client, ns)
		createDeployment(ctx, t, client, ns, "before", 1)
	}
	waitReplicaSets(ctx, t, client, "before", slices.Collect(maps.Values(byPartition)), time.Minute)

	victim := "fcm-2"
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	state, err := membership.ParseState(lease.Annotations[membership.StateAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	var victimNamespaces []string
	for _, piece := range state.Running {
		var p int
		if _, err := fmt.Sscanf(piece, "partition/%d", &p); err == nil {
			victimNamespaces = append(victimNamespaces, byPartition[p])
		}
	}
	if len(victimNamespaces) < ring.Partitions/6 {
		t.Fatalf("%s runs %d partitions; want about a third of %d", victim, len(victimNamespaces), ring.Partitions)
	}

	killed := time.Now()
	if err := procs[victim].Signal(9); err != nil {
		t.Fatal(err)
	}
	for _, ns := range victimNamespaces {
		createDeployment(ctx, t, client, ns, "after", 1)
	}
	served := waitReplicaSets(ctx, t, client, "after", victimNamespaces, 2*time.Minute)
	var longest time.Duration
	var last string
	for ns, at := range served {
		if d := at.Sub(killed); d > longest {
			longest, last = d, ns
		}
	}
	bound := membership.DefaultLeaseDuration + 3*time.Second
	t.Logf("%d namespaces of %s's %d partitions served again at most %v after the kill (%s; bound %v)",
		len(victimNamespaces), victim, len(victimNamespaces), longest.Round(time.Millisecond), last, bound)
	if longest > bound {
		t.Errorf("namespace %s served again %v after the kill, more than the lease duration + 3 s (%v)", last, longest.Round(time.Millisecond), bound)
	}
}

// waitReplicaSets waits until the Deployment name has a ReplicaSet in each
// of namespaces, and returns when each was first seen (polled every 100 ms,
// so a time is at most that late).
func waitReplicaSets(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, namespaces []string, timeout time.Duration) map[string]time.Time {
	t.Helper()
	seen := map[string]time.Time{}
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := client.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, nil
		}
		now := time.Now()
		for _, rs := range list.Items {
			if _, ok := seen[rs.Namespace]; !ok {
				seen[rs.Namespace] = now
			}
		}
		missing = missing[:0]
		for _, ns := range namespaces {
			if _, ok := seen[ns]; !ok {
				missing = append(missing, ns)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("ReplicaSets of %s: %d namespaces without one (%s): %v", name, len(missing), strings.Join(missing[:min(len(missing), 5)], ", "), err)
	}
	return seen
}
