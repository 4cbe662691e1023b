//go:build e2e && node

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRealNodeMigration runs operations.md's migration on a real node, as
// an operator would: KCM as kubeadm's static pod, the image imported into
// containerd, deploy/deployment applied with kubectl. It measures each
// step's time and checks what the docs say to watch:
//   - deployed beside a leading KCM, the fleet's pods run, unready, and
//     the Lease stays KCM's;
//   - KCM's manifest moved out: the fleet takes the Lease and every replica
//     turns Ready, and it serves a workload;
//   - a fleet pod deleted leaves gracefully (its Lease deleted) and the
//     fleet's own ReplicaSet controller replaces it;
//   - KCM's manifest back: KCM stands by; the fleet scaled to 0: KCM leads;
//   - every fleet pod deleted at once beside a standby KCM: KCM leads and
//     recreates them, and they wait for it.
func TestRealNodeMigration(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	d := newDeployedFleet(ctx, t)
	takeover, ready := d.migrate(ctx)
	t.Logf("migration: KCM's manifest moved out; the fleet held KCM's Lease %v later, 3 of 3 Ready %v later", takeover.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))

	createNamespace(ctx, t, d.client, "served")
	createDeployment(ctx, t, d.client, "served", "web", 5)
	waitDeploymentReady(ctx, t, d.client, "served", "web", 5, 2*time.Minute)

	d.checkGracefulLeave(ctx)

	d.moveKCM(true)
	time.Sleep(10 * time.Second)
	if holder := d.leaseHolder(ctx); !isFleetHolder(holder) {
		t.Fatalf("KCM's manifest back beside a running fleet: the Lease is %q's; want the fleet's (KCM stands by)", holder)
	}
	d.kubectl("-n", fleetNamespace, "scale", "deployment/"+fleetDeployment, "--replicas=0")
	back := waitTimed(ctx, t, "KCM to lead after the fleet scaled to 0", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return holder != "" && !isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	t.Logf("rollback: the fleet scaled to 0; KCM led %v later", back.Round(100*time.Millisecond))

	d.checkAllPodsDeleted(ctx)
}

// migrate is operations.md's migration: the fleet deployed beside a
// leading KCM waits, safely, and takes over once KCM's manifest is moved
// out; it returns when the fleet held KCM's Lease, and when every replica
// was Ready, after the move.
func (d *deployedFleet) migrate(ctx context.Context) (takeover, ready time.Duration) {
	t := d.t
	t.Helper()
	waitTimed(ctx, t, "KCM's static pod to lead", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return holder != "" && !isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	d.createPKISecret()
	d.kubectl("apply", "-k", d.overlayDir)
	waitTimed(ctx, t, "KCM to start the fleet's 3 pods", 2*time.Minute, func() (bool, string) {
		running, _, _ := d.fleetPods(ctx)
		return running == 3, fmt.Sprintf("%d running", running)
	})
	// They wait, safely: a while later none is Ready and KCM still leads.
	time.Sleep(10 * time.Second)
	if _, ready, _ := d.fleetPods(ctx); ready != 0 || isFleetHolder(d.leaseHolder(ctx)) {
		t.Fatalf("beside a leading KCM: %d fleet pods Ready, Lease held by %q; want 0 and KCM", ready, d.leaseHolder(ctx))
	}
	d.moveKCM(false)
	takeover = waitTimed(ctx, t, "the fleet to take KCM's Lease", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	return takeover, takeover + d.waitFleetReady(ctx, 3)
}

// waitFleetReady waits until want fleet pods are Ready.
func (d *deployedFleet) waitFleetReady(ctx context.Context, want int) time.Duration {
	d.t.Helper()
	return waitTimed(ctx, d.t, fmt.Sprintf("%d fleet pods Ready", want), 3*time.Minute, func() (bool, string) {
		running, ready, _ := d.fleetPods(ctx)
		return ready == want, fmt.Sprintf("%d running, %d ready", running, ready)
	})
}

// checkGracefulLeave deletes one fleet pod: its replica leaves (its Lease
// deleted) within the grace period, and the fleet replaces it itself.
func (d *deployedFleet) checkGracefulLeave(ctx context.Context) {
	d.t.Helper()
	_, _, names := d.fleetPods(ctx)
	victim := names[0]
	d.deletePods(ctx, victim)
	left := waitTimed(ctx, d.t, "the deleted replica's Lease to go", time.Minute, func() (bool, string) {
		_, err := d.client.CoordinationV1().Leases(fleetNamespace).Get(ctx, victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("lease %s: %v", victim, err)
	})
	replaced := d.waitFleetReady(ctx, 3)
	_, _, now := d.fleetPods(ctx)
	if slices.Contains(now, victim) {
		d.t.Errorf("the deleted pod %s is still listed: %v", victim, now)
	}
	d.t.Logf("graceful leave: pod %s deleted; its Lease gone %v later; 3 of 3 Ready again %v after that", victim, left.Round(100*time.Millisecond), replaced.Round(100*time.Millisecond))
}

// checkAllPodsDeleted brings the fleet back beside a standby KCM, then
// deletes every fleet pod at once: KCM leads and its ReplicaSet controller
// recreates them, unready, waiting for it.
func (d *deployedFleet) checkAllPodsDeleted(ctx context.Context) {
	d.t.Helper()
	d.kubectl("-n", fleetNamespace, "scale", "deployment/"+fleetDeployment, "--replicas=3")
	waitTimed(ctx, d.t, "KCM to start the 3 pods again", 2*time.Minute, func() (bool, string) {
		running, _, _ := d.fleetPods(ctx)
		return running == 3, fmt.Sprintf("%d running", running)
	})
	d.moveKCM(false)
	d.waitFleetReady(ctx, 3)
	d.moveKCM(true)
	time.Sleep(10 * time.Second)
	_, _, names := d.fleetPods(ctx)
	d.deletePods(ctx, names...)
	kcmLeads := waitTimed(ctx, d.t, "KCM to lead after every fleet pod was deleted", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return holder != "" && !isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	recreated := waitTimed(ctx, d.t, "3 new fleet pods running", 2*time.Minute, func() (bool, string) {
		running, _, now := d.fleetPods(ctx)
		for _, n := range now {
			if slices.Contains(names, n) {
				return false, "old pods still listed"
			}
		}
		return running == 3, fmt.Sprintf("%d running", running)
	})
	d.t.Logf("every fleet pod deleted beside a standby KCM: KCM led %v later; 3 new fleet pods running %v after that (waiting for KCM)",
		kcmLeads.Round(100*time.Millisecond), recreated.Round(100*time.Millisecond))
	createDeployment(ctx, d.t, d.client, "served", "after", 3)
	waitDeploymentReady(ctx, d.t, d.client, "served", "after", 3, 2*time.Minute)
}
