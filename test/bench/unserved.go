package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// A failure's blast radius: over a failover, the sum over namespaces of
// the time each had no controller manager serving it. A KCM failover stops
// every controller in every namespace until the standby holds the leader
// Lease; a fleet's stops only the namespaces of the victim's partitions,
// each until a live replica lists its partition running. Both are read
// from Leases, the moment the replacement starts its controllers, so the
// two systems are measured alike.

// unservedWatch is what a failover's blast radius is measured from: taken
// before the kill, finished after it.
type unservedWatch struct {
	// namespaces: every namespace of the cluster, by partition.
	namespaces map[int]int
	total      int
	// victimParts: the victim's partitions (fleet), or nil (KCM: all).
	victimParts []int
	victim      string
	// kcmHolder: the leader Lease's holder before the kill (KCM).
	kcmHolder string
}

// watchUnserved reads, before the kill, what the victim serves.
func (b *bench) watchUnserved(victim int) (*unservedWatch, error) {
	list, err := b.client.CoreV1().Namespaces().List(b.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("namespaces before the kill: %w", err)
	}
	w := &unservedWatch{namespaces: map[int]int{}, total: len(list.Items), victim: b.procs[victim].Name}
	for _, ns := range list.Items {
		w.namespaces[b.ring.NamespacePartition(ns.Name)]++
	}
	if !b.system.Fleet {
		l, err := b.client.CoordinationV1().Leases("kube-system").Get(b.ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return nil, fmt.Errorf("KCM leader lease before the kill: %w", err)
		}
		w.kcmHolder = *l.Spec.HolderIdentity
		return w, nil
	}
	st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
	if err != nil {
		return nil, err
	}
	for _, m := range st.Members {
		if m.Name == w.victim {
			w.victimParts = m.Partitions
		}
	}
	return w, nil
}

// blastRadius is what a failover left unserved: how many namespaces, and
// the namespace-seconds they went unserved.
type blastRadius struct {
	namespaces int
	seconds    float64
}

// finish polls the Leases from killed until every namespace the victim
// served is served again, and returns the blast radius.
func (w *unservedWatch) finish(ctx context.Context, b *bench, killed time.Time) (blastRadius, error) {
	servedAt := map[int]time.Duration{} // partition (fleet) or -1 (KCM) -> since the kill
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		now := time.Since(killed)
		if !b.system.Fleet {
			l, err := b.client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
			if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && *l.Spec.HolderIdentity != w.kcmHolder {
				servedAt[-1] = now
			}
			return len(servedAt) == 1, nil
		}
		st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
		if err != nil {
			return false, nil
		}
		for _, m := range st.Members {
			if m.Name == w.victim || m.Health == shard.MemberExpired {
				continue
			}
			for _, p := range m.Partitions {
				if _, ok := servedAt[p]; !ok {
					servedAt[p] = now
				}
			}
		}
		for _, p := range w.victimParts {
			if _, ok := servedAt[p]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return blastRadius{}, fmt.Errorf("namespaces served again after the kill: %w", err)
	}
	var r blastRadius
	if !b.system.Fleet {
		r = blastRadius{namespaces: w.total, seconds: float64(w.total) * servedAt[-1].Seconds()}
	}
	for _, p := range w.victimParts {
		r.namespaces += w.namespaces[p]
		r.seconds += float64(w.namespaces[p]) * servedAt[p].Seconds()
	}
	return r, nil
}
