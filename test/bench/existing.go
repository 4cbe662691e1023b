package main

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// existingSettle is how long (i) lets the system settle between its two
// phases, the same for every system: a fleet placing by weight
// (-fleet-args=--placement-by-weight,--placement-weight-hold=15s) adopts
// its table within it (weights measured every 10 s, reaching the Leases
// with the next renewal, then the hold and a handover).
const existingSettle = 45 * time.Second

// (i) the Deployments of namespaces that already exist scaled up at once,
// on a cluster that holds nothing else ((a)'s namespaces deleted first):
// as many namespaces and Deployments as (a), each Deployment first at one
// replica until all are available; then, after existingSettle, every one
// scaled to (a)'s replicas; time until all are available. A fleet's time
// is its busiest replica's, so the figure follows how evenly the
// namespaces' work is placed when the scale-up comes; the busiest
// replica's objects against the mean, from the Leases' weights, are
// reported at that moment and after. A second round scales them back to
// one replica and, once the namespaces have been placed for over a
// minute, up again (i_placed_converge_s).
func (b *bench) existingScaleUp() error {
	// (a)'s namespaces go first: idle, they would weigh in a placement by
	// what namespaces hold without adding to (i)'s work.
	if err := b.removeNamespaces(b.namespaces()); err != nil {
		return err
	}
	namespaces := make([]string, b.size.Namespaces)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("existing-%d", i)
		if err := b.createNamespace(namespaces[i]); err != nil {
			return err
		}
		for j := range b.size.Deployments {
			if err := b.createDeployment(namespaces[i], fmt.Sprintf("web-%d", j), 1); err != nil {
				return err
			}
		}
	}
	if err := b.waitDeployments(namespaces, func(d *appsv1.Deployment) bool { return available(d, 1) }); err != nil {
		return err
	}
	time.Sleep(existingSettle)
	if err := b.recordBusiest("i_busiest_before"); err != nil {
		return err
	}
	if err := b.recordNamespaceSpread("i_namespaces_busiest", namespaces); err != nil {
		return err
	}
	took, err := b.scaleNamespaces(namespaces, b.size.Replicas)
	if err != nil {
		return err
	}
	b.figures["i_converge_s"] = took.Seconds()
	if err := b.recordBusiest("i_busiest_after"); err != nil {
		return err
	}
	// The second round: the same Deployments back at one replica, the
	// namespaces placed for over a minute (past the young window, where
	// the weight keeper's hold balances what they hold), then scaled up
	// again, as a cluster's existing tenants scale up some time after
	// their creation.
	if _, err := b.scaleNamespaces(namespaces, 1); err != nil {
		return err
	}
	time.Sleep(existingSettle)
	if err := b.recordNamespaceSpread("i_placed_namespaces_busiest", namespaces); err != nil {
		return err
	}
	took, err = b.scaleNamespaces(namespaces, b.size.Replicas)
	if err != nil {
		return err
	}
	b.figures["i_placed_converge_s"] = took.Seconds()
	return nil
}

// scaleNamespaces scales every Deployment of namespaces to replicas at
// once and waits until all are available at that scale.
func (b *bench) scaleNamespaces(namespaces []string, replicas int) (time.Duration, error) {
	start := time.Now()
	for _, ns := range namespaces {
		for j := range b.size.Deployments {
			if err := b.scaleDeployment(ns, fmt.Sprintf("web-%d", j), replicas); err != nil {
				return 0, err
			}
		}
	}
	want := int32(replicas)
	if err := b.waitDeployments(namespaces, func(d *appsv1.Deployment) bool { return available(d, want) }); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// recordBusiest records, for a fleet, its busiest replica's objects over
// the mean, as its Leases' weights say.
func (b *bench) recordBusiest(key string) error {
	if !b.system.Fleet {
		return nil
	}
	st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
	if err != nil {
		return err
	}
	b.figures[key] = st.Busiest
	return nil
}

// recordNamespaceSpread records, for a fleet, the most of namespaces any
// one replica runs, as the Leases' partitions say (key), and
// len(namespaces) over it (key_speedup): at default client limits each
// replica's controllers spend their own client budgets, so with
// namespaces of equal work the fleet finishes when its busiest replica
// does, and its speed-up over KCM follows that figure (within 6% in 7 of
// 8 cells measured: docs/benchmarks/placement-by-weight).
func (b *bench) recordNamespaceSpread(key string, namespaces []string) error {
	if !b.system.Fleet || len(namespaces) == 0 {
		return nil
	}
	st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
	if err != nil {
		return err
	}
	busiest := busiestNamespaceCount(namespaces, st.PartitionOwners(), b.ring.NamespacePartition)
	if busiest == 0 {
		return fmt.Errorf("no replica runs any of %d namespaces", len(namespaces))
	}
	b.figures[key] = float64(busiest)
	b.figures[key+"_speedup"] = float64(len(namespaces)) / float64(busiest)
	return nil
}

// busiestNamespaceCount is the most namespaces one owner runs, by their
// partitions' owners (a namespace whose partition nobody runs counts for
// nobody).
func busiestNamespaceCount(namespaces []string, owner map[int]string, partition func(string) int) int {
	count := map[string]int{}
	busiest := 0
	for _, ns := range namespaces {
		if o := owner[partition(ns)]; o != "" {
			count[o]++
			busiest = max(busiest, count[o])
		}
	}
	return busiest
}
