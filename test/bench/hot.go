package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// hotNamespace is the busy tenant of workload (h).
const hotNamespace = "hot-tenant"

// (h) one busy tenant: as many Deployments as (a), half of them (and so
// half of the Pods) in one namespace, the rest spread over as many
// namespaces as (a) has; when each other tenant's are available, when all
// are, and the CPU and memory of the process serving the busy namespace
// (KCM: its two instances, of which the standby idles). A fleet places the
// whole namespace on one replica: that replica does half the work however
// many replicas the fleet has.
func (b *bench) hotTenant() error {
	total := b.size.Namespaces * b.size.Deployments
	spread := make([]string, b.size.Namespaces)
	for i := range spread {
		spread[i] = fmt.Sprintf("tenant-%d", i)
	}
	all := append([]string{hotNamespace}, spread...)
	for _, ns := range all {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
	}
	owners, err := b.servingProcesses(hotNamespace)
	if err != nil {
		return err
	}
	cpuBefore := 0.0
	for _, i := range owners {
		cpuBefore += cpuSeconds(b.procs[i].Pid())
	}
	start := time.Now()
	for i := range total / 2 {
		if err := b.createDeployment(hotNamespace, fmt.Sprintf("hot-%d", i), b.size.Replicas); err != nil {
			return err
		}
	}
	for i := range total - total/2 {
		if err := b.createDeployment(spread[i%len(spread)], fmt.Sprintf("web-%d", i), b.size.Replicas); err != nil {
			return err
		}
	}
	want := int32(b.size.Replicas)
	isAvailable := func(d *appsv1.Deployment) bool { return available(d, want) }
	// The other tenants first: what a busy neighbour costs them is the
	// question (h) asks of a fleet, whose replicas other than the busy
	// one's serve them meanwhile.
	done, err := b.waitEachNamespace(spread, isAvailable)
	if err != nil {
		return err
	}
	times := make([]float64, 0, len(done))
	for _, at := range done {
		times = append(times, at.Sub(start).Seconds())
	}
	slices.Sort(times)
	b.figures["h_rest_median_s"] = times[len(times)/2]
	b.figures["h_rest_converge_s"] = times[len(times)-1]
	if err := b.recordNeighbours(spread); err != nil {
		return err
	}
	if err := b.waitDeployments(all, isAvailable); err != nil {
		return err
	}
	b.figures["h_converge_s"] = time.Since(start).Seconds()
	cpuAfter, rss := 0.0, 0.0
	for _, i := range owners {
		cpuAfter += cpuSeconds(b.procs[i].Pid())
		rss = max(rss, peakRSSMiB(b.procs[i].Pid()))
	}
	b.figures["h_owner_cpu_s"] = cpuAfter - cpuBefore
	b.figures["h_owner_peak_rss_mib"] = rss
	return nil
}

// servingProcesses are the indexes of the processes that may serve
// namespace: the fleet replica running its partition, or every KCM
// instance (the leader does the work and the standby idles; after a
// failover the logs no longer tell which one leads). A partition a deal
// is moving has no owner in any Lease for the tens of milliseconds
// between its old owner's release and its new owner's start (the
// namespaces were just created, so deals are likely), so the Leases are
// read again until one claims it, for at most 10 s.
func (b *bench) servingProcesses(namespace string) ([]int, error) {
	if !b.system.Fleet {
		all := make([]int, len(b.procs))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	var owners []int
	var lastErr error
	err := wait.PollUntilContextTimeout(b.ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		owners, lastErr = b.partitionOwnerProcess(namespace)
		return lastErr == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (waited 10 s: %w)", lastErr, err)
	}
	return owners, nil
}

// partitionOwnerProcess is the index of the fleet replica whose Lease
// claims namespace's partition.
func (b *bench) partitionOwnerProcess(namespace string) ([]int, error) {
	st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
	if err != nil {
		return nil, err
	}
	p := b.ring.NamespacePartition(namespace)
	for _, m := range st.Members {
		for _, owned := range m.Partitions {
			if owned != p {
				continue
			}
			for i, proc := range b.procs {
				if proc.Name == m.Name {
					return []int{i}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no replica runs partition %d of namespace %s", p, namespace)
}

// recordNeighbours records, for a fleet, how many of the other tenants
// the busy tenant's replica runs when they are all available, as the
// Leases' partitions say: those wait behind the busy tenant's work in one
// client budget and one work queue per controller, as every tenant does
// under KCM.
func (b *bench) recordNeighbours(others []string) error {
	if !b.system.Fleet {
		return nil
	}
	st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
	if err != nil {
		return err
	}
	b.figures["h_neighbours"] = float64(neighbourCount(hotNamespace, others, st.PartitionOwners(), b.ring.NamespacePartition))
	return nil
}

// neighbourCount is how many of others run on the owner of ns's
// partition; none when nobody runs it.
func neighbourCount(ns string, others []string, owner map[int]string, partition func(string) int) int {
	o := owner[partition(ns)]
	if o == "" {
		return 0
	}
	n := 0
	for _, other := range others {
		if owner[partition(other)] == o {
			n++
		}
	}
	return n
}

// waitEachNamespace waits until every Deployment of every namespace is ok
// and says when each namespace's were first seen so (to the poll's 250 ms).
func (b *bench) waitEachNamespace(namespaces []string, ok func(*appsv1.Deployment) bool) (map[string]time.Time, error) {
	done := map[string]time.Time{}
	pending := ""
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		pending = ""
		for _, ns := range namespaces {
			if _, seen := done[ns]; seen {
				continue
			}
			list, err := b.client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err == nil && len(list.Items) > 0 && !slices.ContainsFunc(list.Items, func(d appsv1.Deployment) bool { return !ok(&d) }) {
				done[ns] = time.Now()
			} else if pending == "" {
				pending = ns
			}
		}
		return len(done) == len(namespaces), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for deployments (%d of %d namespaces available, still %s): %w", len(done), len(namespaces), pending, err)
	}
	return done, nil
}
