package main

// The workloads a run measures: Deployments created, scaled, Jobs, a
// kill -9 failover and a rolling restart, and the longest time a piece had
// no owner while they ran.

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

func (b *bench) createNamespace(name string) error {
	_, err := b.client.CoreV1().Namespaces().Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func (b *bench) createDeployment(ns, name string, replicas int) error {
	labels := map[string]string{"app": name}
	_, err := b.client.AppsV1().Deployments(ns).Create(b.ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/bench:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	return err
}

func available(d *appsv1.Deployment, replicas int32) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas == replicas &&
		d.Status.UpdatedReplicas == replicas && d.Status.Replicas == replicas
}

// waitDeployments waits until every Deployment in namespaces satisfies ok.
func (b *bench) waitDeployments(namespaces []string, ok func(*appsv1.Deployment) bool) error {
	pending := ""
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range namespaces {
			list, err := b.client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(list.Items) == 0 {
				pending = ns
				return false, nil
			}
			for i := range list.Items {
				if !ok(&list.Items[i]) {
					pending = ns + "/" + list.Items[i].Name
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for deployments (still %s): %w", pending, err)
	}
	return nil
}

// (a) every namespace's Deployments created at once; time until all are
// available.
func (b *bench) createDeployments() error {
	start := time.Now()
	defer b.profileConvergence(10 * time.Second)()
	for _, ns := range b.namespaces() {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
		for i := range b.size.Deployments {
			if err := b.createDeployment(ns, fmt.Sprintf("web-%d", i), b.size.Replicas); err != nil {
				return err
			}
		}
	}
	want := int32(b.size.Replicas)
	if err := b.waitDeployments(b.namespaces(), func(d *appsv1.Deployment) bool { return available(d, want) }); err != nil {
		return err
	}
	took := time.Since(start).Seconds()
	b.figures["a_converge_s"] = took
	b.figures["a_pods_per_s"] = float64(b.size.Namespaces*b.size.Deployments*b.size.Replicas) / took
	return b.recordNamespaceSpread("a_namespaces_busiest", b.namespaces())
}

// scaleDeployment sets ns/name's replicas.
func (b *bench) scaleDeployment(ns, name string, replicas int) error {
	_, err := b.client.AppsV1().Deployments(ns).UpdateScale(b.ctx, name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       autoscalingv1.ScaleSpec{Replicas: int32(replicas)},
	}, metav1.UpdateOptions{})
	return err
}

func (b *bench) scaleAll(replicas int) error {
	for _, ns := range b.namespaces() {
		for i := range b.size.Deployments {
			if err := b.scaleDeployment(ns, fmt.Sprintf("web-%d", i), replicas); err != nil {
				return err
			}
		}
	}
	want := int32(replicas)
	return b.waitDeployments(b.namespaces(), func(d *appsv1.Deployment) bool { return available(d, want) })
}

// (b) all Deployments scaled to 0 and back.
func (b *bench) scaleDownAndUp() error {
	start := time.Now()
	if err := b.scaleAll(0); err != nil {
		return err
	}
	b.figures["b_scale_down_s"] = time.Since(start).Seconds()
	// Pods of a scaled-down ReplicaSet are deleted gracefully; wait until
	// they are gone so scale-up measures creation only.
	if err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range b.namespaces() {
			pods, err := b.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil || len(pods.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("waiting for scaled-down pods to go: %w", err)
	}
	start = time.Now()
	if err := b.scaleAll(b.size.Replicas); err != nil {
		return err
	}
	b.figures["b_scale_up_s"] = time.Since(start).Seconds()
	return nil
}

// (c) Jobs of one pod each, spread over the namespaces, to completion.
func (b *bench) jobs() error {
	start := time.Now()
	namespaces := b.namespaces()
	for i := range b.size.Jobs {
		ns := namespaces[i%len(namespaces)]
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i), Namespace: ns},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "registry.invalid/job:1"}},
			}}},
		}
		if _, err := b.client.BatchV1().Jobs(ns).Create(b.ctx, job, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	done := 0
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		done = 0
		for _, ns := range namespaces {
			list, err := b.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, j := range list.Items {
				for _, c := range j.Status.Conditions {
					if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
						done++
					}
				}
			}
		}
		return done == b.size.Jobs, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d jobs complete: %w", done, b.size.Jobs, err)
	}
	took := time.Since(start).Seconds()
	b.figures["c_jobs_s"] = took
	b.figures["c_jobs_per_s"] = float64(b.size.Jobs) / took
	return nil
}

// (d) kill -9 the KCM leader or one fleet replica, then create one
// Deployment in a namespace it owned and one in a namespace it did not;
// time until each is available.
func (b *bench) failover() error {
	victim := 0
	owned, other := "", ""
	if b.system.Fleet {
		victim = len(b.procs) - 1
		st, err := shard.ReadFleet(b.ctx, membership.NewLeaseStore(b.client), "kube-system", "fleet-controller-manager", b.ring.Partitions)
		if err != nil {
			return err
		}
		parts := st.PartitionOwners()
		for i := 0; owned == "" || other == ""; i++ {
			ns := fmt.Sprintf("failover-%d", i)
			switch parts[b.ring.NamespacePartition(ns)] {
			case b.procs[victim].Name:
				if owned == "" {
					owned = ns
				}
			default:
				if other == "" {
					other = ns
				}
			}
		}
	} else {
		var err error
		if victim, err = b.leader(); err != nil {
			return err
		}
		owned, other = "failover-a", "failover-b"
	}
	for _, ns := range []string{owned, other} {
		if err := b.createNamespace(ns); err != nil {
			return err
		}
	}
	b.recordPeaks()
	unserved, err := b.watchUnserved(victim)
	if err != nil {
		return err
	}
	b.killedCPU += cpuSeconds(b.procs[victim].Pid())
	if err := b.procs[victim].Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-b.procs[victim].Done()
	killed := time.Now()
	radius := make(chan error, 1)
	go func() {
		r, err := unserved.finish(b.ctx, b, killed)
		b.figures["d_unserved_namespaces"], b.figures["d_unserved_ns_s"] = float64(r.namespaces), r.seconds
		radius <- err
	}()
	for _, ns := range []string{owned, other} {
		if err := b.createDeployment(ns, "after-kill", 2); err != nil {
			return err
		}
	}
	times := map[string]float64{}
	err = wait.PollUntilContextTimeout(b.ctx, 100*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for key, ns := range map[string]string{"d_owned_s": owned, "d_other_s": other} {
			if _, ok := times[key]; ok {
				continue
			}
			d, err := b.client.AppsV1().Deployments(ns).Get(ctx, "after-kill", metav1.GetOptions{})
			if err == nil && available(d, 2) {
				times[key] = time.Since(killed).Seconds()
			}
		}
		return len(times) == 2, nil
	})
	if err != nil {
		return fmt.Errorf("deployments after the kill: %w", err)
	}
	for k, v := range times {
		b.figures[k] = v
	}
	if err := <-radius; err != nil {
		return err
	}
	// Bring the victim back for (e).
	return b.bringBack(victim)
}

// bringBack starts the killed process victim again and, for a fleet, waits
// until the fleet has settled with it.
func (b *bench) bringBack(victim int) error {
	p, err := b.startOne(victim)
	if err != nil {
		return err
	}
	b.procs[victim] = p
	if b.system.Fleet {
		return b.waitFleetSettled(len(b.procs))
	}
	return nil
}

// (e) each replica (or KCM instance) restarted gracefully in turn while
// workload (a) is created again in fresh namespaces; the longest time any
// namespace partition (for KCM: the leader Lease) had no owner.
func (b *bench) rollingRestart() error {
	gaps := newOwnershipGaps(b)
	stopWatching := gaps.watch()
	start := time.Now()
	var namespaces []string
	for i := range b.size.Namespaces {
		ns := fmt.Sprintf("rolling-%02d", i)
		namespaces = append(namespaces, ns)
		if err := b.createNamespace(ns); err != nil {
			return err
		}
		for j := range b.size.Deployments {
			if err := b.createDeployment(ns, fmt.Sprintf("web-%d", j), b.size.Replicas); err != nil {
				return err
			}
		}
	}
	for i, p := range b.procs {
		b.recordPeaks()
		b.killedCPU += cpuSeconds(p.Pid())
		if err := p.Stop(time.Minute); err != nil {
			return fmt.Errorf("stopping %s: %w", p.Name, err)
		}
		np, err := b.startOne(i)
		if err != nil {
			return err
		}
		b.procs[i] = np
		if b.system.Fleet {
			// As a StatefulSet or Deployment rollout does: the next
			// replica goes once this one is ready (has taken its share).
			if err := b.waitReady(i); err != nil {
				return err
			}
		}
	}
	want := int32(b.size.Replicas)
	if err := b.waitDeployments(namespaces, func(d *appsv1.Deployment) bool { return available(d, want) }); err != nil {
		return err
	}
	b.figures["e_converge_s"] = time.Since(start).Seconds()
	b.figures["e_max_unowned_s"] = stopWatching()
	return nil
}

// ownershipGaps samples who owns what every 100 ms.
type ownershipGaps struct{ b *bench }

func newOwnershipGaps(b *bench) *ownershipGaps { return &ownershipGaps{b: b} }

// watch samples until the returned function is called, which returns the
// longest time any partition (fleet) or the leader Lease (KCM) was
// without a live holder.
func (g *ownershipGaps) watch() func() float64 {
	ctx, cancel := context.WithCancel(g.b.ctx)
	result := make(chan float64, 1)
	go func() {
		since := map[string]time.Time{}
		longest := 0.0
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				result <- longest
				return
			case <-ticker.C:
			}
			now := time.Now()
			var unowned []string
			if g.b.system.Fleet {
				st, err := shard.ReadFleet(ctx, membership.NewLeaseStore(g.b.client), "kube-system", "fleet-controller-manager", g.b.ring.Partitions)
				if err != nil {
					continue
				}
				for _, p := range st.UnownedPartitions {
					unowned = append(unowned, strconv.Itoa(p))
				}
			} else {
				l, err := g.b.client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
				if err != nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
					continue
				}
				// The leader steps down by releasing (holder emptied) or dies.
				if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" ||
					now.Sub(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
					unowned = []string{"leader"}
				}
			}
			current := map[string]bool{}
			for _, u := range unowned {
				current[u] = true
				if _, ok := since[u]; !ok {
					since[u] = now
				}
			}
			for u, t := range since {
				if !current[u] {
					if gap := now.Sub(t); gap > time.Second {
						klog.InfoS("Without an owner", "what", u, "from", t.Format("15:04:05.000"), "for", gap.Round(time.Millisecond))
					}
					longest = max(longest, now.Sub(t).Seconds())
					delete(since, u)
				}
			}
		}
	}()
	return func() float64 {
		cancel()
		return <-result
	}
}
