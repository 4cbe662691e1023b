package main

// The ladder's steps that change the processes: a kill -9 failover, a
// whole restart, and a fourth replica joining.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// failover kills -9 one fleet replica (KCM: the leader, its standby
// running) and, right after, scales web-0 in a sample of the namespaces it
// owned: the time until the first and the last of them are served, and
// until every piece it ran (KCM: the leader Lease) has a live owner. The
// victim then starts again, as a kubelet would restart it.
func (sc *scaleCell) failover() error {
	if sc.system.Replicas < 2 {
		return nil
	}
	victim, owned, err := sc.victim()
	if err != nil {
		return err
	}
	sample := spread(owned, scaleFailoverSample)
	ownerBack, err := sc.ownerBack(victim)
	if err != nil {
		return err
	}
	unserved, err := sc.watchUnserved(victim)
	if err != nil {
		return err
	}
	if err := sc.procs[victim].Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-sc.procs[victim].Done()
	killed := time.Now()
	radius := make(chan error, 1)
	go func() {
		r, err := unserved.finish(sc.ctx, sc.bench, killed)
		sc.figures["s_failover_unserved_namespaces"], sc.figures["s_failover_unserved_ns_s"] = float64(r.namespaces), r.seconds
		radius <- err
	}()
	if err := sc.scaleTo(sample, sc.replicas+1); err != nil {
		return err
	}
	first, last, err := sc.waitServed(sample, killed)
	if err != nil {
		return err
	}
	sc.figures["s_failover_first_s"], sc.figures["s_failover_last_s"] = first, last
	back, err := ownerBack()
	if err != nil {
		return err
	}
	sc.figures["s_failover_owner_s"] = back.Sub(killed).Seconds()
	if err := <-radius; err != nil {
		return err
	}
	return sc.bringBack(victim)
}

// victim picks the process a failover kills and the namespaces it owns.
func (sc *scaleCell) victim() (int, []string, error) {
	if !sc.system.Fleet {
		leader, err := sc.leader()
		return leader, sc.namespaces, err
	}
	victim := len(sc.procs) - 1
	owned, err := sc.ownedBy(victim)
	return victim, owned, err
}

// ownedBy is the namespaces of the partitions fleet replica i runs, as
// its Lease says.
func (sc *scaleCell) ownedBy(i int) ([]string, error) {
	st, err := shard.ReadFleet(sc.ctx, membership.NewLeaseStore(sc.client), "kube-system", "fleet-controller-manager", sc.ring.Partitions)
	if err != nil {
		return nil, err
	}
	parts := map[int]bool{}
	for _, m := range st.Members {
		if m.Name == sc.procs[i].Name {
			for _, p := range m.Partitions {
				parts[p] = true
			}
		}
	}
	var owned []string
	for _, ns := range sc.namespaces {
		if parts[sc.ring.NamespacePartition(ns)] {
			owned = append(owned, ns)
		}
	}
	if len(owned) == 0 {
		return nil, fmt.Errorf("%s owns none of the %d namespaces", sc.procs[i].Name, len(sc.namespaces))
	}
	return owned, nil
}

// ownerBack reads, before the kill, what victim holds, and returns a
// function that waits until a live process holds all of it again: for a
// fleet, every partition and singleton the victim ran is run by another
// member; for KCM, the leader Lease has another holder.
func (sc *scaleCell) ownerBack(victim int) (func() (time.Time, error), error) {
	if !sc.system.Fleet {
		l, err := sc.client.CoordinationV1().Leases("kube-system").Get(sc.ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return nil, fmt.Errorf("KCM's leader Lease: %w", err)
		}
		holder := *l.Spec.HolderIdentity
		return func() (time.Time, error) {
			var at time.Time
			err := wait.PollUntilContextTimeout(sc.ctx, 100*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
				l, err := sc.client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
				if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == holder {
					return false, nil
				}
				at = time.Now()
				if l.Spec.AcquireTime != nil {
					at = l.Spec.AcquireTime.Time
				}
				return true, nil
			})
			return at, err
		}, nil
	}
	name := sc.procs[victim].Name
	st, err := shard.ReadFleet(sc.ctx, membership.NewLeaseStore(sc.client), "kube-system", "fleet-controller-manager", sc.ring.Partitions)
	if err != nil {
		return nil, err
	}
	var singletons []string
	for _, m := range st.Members {
		if m.Name == name {
			singletons = m.Singletons
		}
	}
	return func() (time.Time, error) {
		var at time.Time
		err := wait.PollUntilContextTimeout(sc.ctx, 100*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
			st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(sc.client), "kube-system", "fleet-controller-manager", sc.ring.Partitions)
			if err != nil {
				return false, nil
			}
			partitions := map[int]bool{}
			var running []string
			for _, m := range st.Members {
				if m.Name == name || m.Health == shard.MemberExpired {
					continue
				}
				for _, p := range m.Partitions {
					partitions[p] = true
				}
				running = append(running, m.Singletons...)
			}
			for _, s := range singletons {
				if !slices.Contains(running, s) {
					return false, nil
				}
			}
			if len(partitions) < st.Partitions {
				return false, nil
			}
			at = time.Now()
			return true, nil
		})
		return at, err
	}, nil
}

// restart stops every process gracefully, scales web-0 in every namespace
// while none runs, and starts them all again: the time from the start
// until the first and the last namespace are served (an upgrade of every
// replica at once, or a control-plane node's reboot).
func (sc *scaleCell) restart() error {
	var wg sync.WaitGroup
	errs := make([]error, len(sc.procs))
	for i, p := range sc.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Stop(time.Minute); err != nil {
				errs[i] = fmt.Errorf("stopping %s: %w", p.Name, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if err := sc.scaleTo(sc.namespaces, sc.replicas+1); err != nil {
		return err
	}
	start := time.Now()
	for i := range sc.procs {
		p, err := sc.startOne(i)
		if err != nil {
			return err
		}
		sc.procs[i] = p
	}
	first, last, err := sc.waitServed(sc.namespaces, start)
	if err != nil {
		return err
	}
	sc.figures["s_restart_first_s"], sc.figures["s_restart_last_s"] = first, last
	if sc.system.Fleet {
		return sc.waitFleetSettled(len(sc.procs))
	}
	return nil
}

// join adds a fourth replica to a fleet of three: the longest time any
// partition had no owner while it joined, the time until 20 of the
// namespaces it gained are served (scaled up and available), and the
// LISTs the controller managers made until then (audit log). The joiner
// lists what it gained once its pieces start, after the fleet has
// settled on the view, so the LISTs are counted until its namespaces are
// served, not until the fleet settled.
func (sc *scaleCell) join() error {
	if !sc.system.Fleet || sc.system.Replicas != 3 {
		return nil
	}
	auditFrom := fileSize(sc.cluster.AuditLog)
	gaps := newOwnershipGaps(sc.bench)
	stopWatching := gaps.watch()
	start := time.Now()
	p, err := sc.startOne(len(sc.procs))
	if err != nil {
		return err
	}
	sc.procs = append(sc.procs, p)
	if err := sc.waitFleetSettled(len(sc.procs)); err != nil {
		return err
	}
	sc.figures["s_join_s"] = time.Since(start).Seconds()
	sc.figures["s_join_max_unowned_s"] = stopWatching()
	gained, err := sc.ownedBy(len(sc.procs) - 1)
	if err != nil {
		return err
	}
	sample := spread(gained, scaleFailoverSample)
	if err := sc.scaleTo(sample, sc.replicas+1); err != nil {
		return err
	}
	if _, sc.figures["s_join_served_s"], err = sc.waitServed(sample, start); err != nil {
		return err
	}
	audit, err := readAuditCounts(sc.cluster.AuditLog, auditFrom)
	if err != nil {
		return err
	}
	sc.figures["s_join_cm_lists"] = audit.cmLists
	return nil
}
