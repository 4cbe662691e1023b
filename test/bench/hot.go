package main

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// hotNamespace is the busy tenant of workload (h).
const hotNamespace = "hot-tenant"

// (h) one busy tenant: as many Deployments as (a), half of them (and so
// half of the Pods) in one namespace, the rest spread over as many
// namespaces as (a) has; time until all are available, and the CPU and
// memory of the process serving the busy namespace (KCM: its leader). A
// fleet places the whole namespace on one replica: that replica does half
// the work however many replicas the fleet has.
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
	owner, err := b.servingProcess(hotNamespace)
	if err != nil {
		return err
	}
	cpuBefore := cpuSeconds(b.procs[owner].Pid())
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
	if err := b.waitDeployments(all, func(d *appsv1.Deployment) bool { return available(d, want) }); err != nil {
		return err
	}
	b.figures["h_converge_s"] = time.Since(start).Seconds()
	b.figures["h_owner_cpu_s"] = cpuSeconds(b.procs[owner].Pid()) - cpuBefore
	b.figures["h_owner_peak_rss_mib"] = peakRSSMiB(b.procs[owner].Pid())
	return nil
}

// servingProcess is the index of the process that serves namespace: the
// fleet replica running its partition, or KCM's leader.
func (b *bench) servingProcess(namespace string) (int, error) {
	if !b.system.Fleet {
		return b.leader()
	}
	st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
	if err != nil {
		return 0, err
	}
	p := shard.DefaultRingConfig.NamespacePartition(namespace)
	for _, m := range st.Members {
		for _, owned := range m.Partitions {
			if owned != p {
				continue
			}
			for i, proc := range b.procs {
				if proc.Name == m.Name {
					return i, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no replica runs partition %d of namespace %s", p, namespace)
}
