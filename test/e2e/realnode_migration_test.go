//go:build e2e && node

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	forEachFleetKind(t, testMigration)
}

func testMigration(ctx context.Context, t *testing.T, d *deployedFleet) {
	takeover, ready := d.migrate(ctx, true)
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
	rss, err := d.kcmRSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("standby: KCM's static pod beside the leading fleet holds %.0f MiB", rss)
	d.kubectl("-n", fleetNamespace, "scale", d.workload, "--replicas=0")
	back := waitTimed(ctx, t, "KCM to lead after the fleet scaled to 0", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return holder != "" && !isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	t.Logf("rollback: the fleet scaled to 0; KCM led %v later", back.Round(100*time.Millisecond))

	d.checkAllPodsDeleted(ctx)
	d.checkAllPodsDeletedWithoutStandby(ctx)
}

// checkAllPodsDeleted brings the fleet back beside a standby KCM, then
// deletes every fleet pod at once. Either KCM leads and its ReplicaSet or
// StatefulSet controller recreates them (they wait for it), or, for a
// Deployment, the fleet's own ReplicaSet controller replaced the pods
// while they terminated and the new ones carried the fleet on. Either way
// the cluster's controllers run again: a new Deployment is served.
func (d *deployedFleet) checkAllPodsDeleted(ctx context.Context) {
	d.t.Helper()
	d.kubectl("-n", fleetNamespace, "scale", d.workload, "--replicas=3")
	waitTimed(ctx, d.t, "KCM to start the 3 pods again", 2*time.Minute, func() (bool, string) {
		running, _, _ := d.fleetPods(ctx)
		return running == 3, fmt.Sprintf("%d running", running)
	})
	d.moveKCM(false)
	d.waitFleetReady(ctx, 3)
	d.moveKCM(true)
	time.Sleep(10 * time.Second)
	outcome, took := d.deleteEveryPod(ctx, true)
	d.t.Logf("every fleet pod deleted beside a standby KCM: %s %v later", outcome, took.Round(100*time.Millisecond))
	createDeployment(ctx, d.t, d.client, "served", "after", 3)
	waitDeploymentReady(ctx, d.t, d.client, "served", "after", 3, 2*time.Minute)
}

// The ways a fleet comes out of losing every pod at once.
const (
	kcmRecreated  = "KCM led and started 3 new fleet pods (waiting for it)"
	fleetReplaced = "the fleet's own controller had replaced them: the fleet led with 3 new pods Ready"
	noneRecreated = "every pod gone, nothing recreated them"
)

// deleteEveryPod deletes every fleet pod at once and returns what became
// of the fleet, and when.
func (d *deployedFleet) deleteEveryPod(ctx context.Context, standby bool) (outcome string, took time.Duration) {
	d.t.Helper()
	_, _, before := d.fleetPods(ctx)
	d.deletePods(ctx, before...)
	took = waitTimed(ctx, d.t, "the fleet's pods after deleting every one", 2*time.Minute, func() (bool, string) {
		running, ready, now := d.fleetPods(ctx) // the terminating ones left out
		holder := d.leaseHolder(ctx)
		switch {
		case holder != "" && !isFleetHolder(holder) && running == 3:
			outcome = kcmRecreated
		case isFleetHolder(holder) && ready == 3 && gone(before, now) == len(before):
			outcome = fleetReplaced
		case !standby && holder == "" && len(now) == 0 && d.podsListed(ctx) == 0:
			outcome = noneRecreated
		}
		return outcome != "", fmt.Sprintf("holder %q, %d running, %d ready", holder, running, ready)
	})
	if outcome == noneRecreated {
		time.Sleep(15 * time.Second)
		if n := d.podsListed(ctx); n != 0 {
			d.t.Fatalf("every fleet pod was gone with no KCM standing by, and then %d came back", n)
		}
	}
	return outcome, took
}

// podsListed counts the fleet's pods, terminating ones too.
func (d *deployedFleet) podsListed(ctx context.Context) int {
	list, err := d.client.CoreV1().Pods(fleetNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleetSelector})
	if err != nil {
		return -1
	}
	return len(list.Items)
}

// checkAllPodsDeletedWithoutStandby deletes every fleet pod where no KCM
// stands by. If nothing recreates them (a StatefulSet's replacement waits
// for the old pod to go, and every replica has gone by then), operations.md's
// recovery, KCM's manifest back until the fleet's pods run and then out
// again, brings the fleet back.
func (d *deployedFleet) checkAllPodsDeletedWithoutStandby(ctx context.Context) {
	t := d.t
	t.Helper()
	d.moveKCM(false)
	d.waitFleetReady(ctx, 3)
	outcome, took := d.deleteEveryPod(ctx, false)
	t.Logf("every fleet pod deleted, no KCM standing by: %s %v later", outcome, took.Round(100*time.Millisecond))
	if outcome != noneRecreated {
		return
	}
	d.moveKCM(true)
	kcmLeads := waitTimed(ctx, t, "KCM to lead once its manifest is back", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return holder != "" && !isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	running := kcmLeads + waitTimed(ctx, t, "KCM to start the fleet's 3 pods", 2*time.Minute, func() (bool, string) {
		running, _, _ := d.fleetPods(ctx)
		return running == 3, fmt.Sprintf("%d running", running)
	})
	d.moveKCM(false)
	takeover := waitTimed(ctx, t, "the fleet to take KCM's Lease", 2*time.Minute, func() (bool, string) {
		return isFleetHolder(d.leaseHolder(ctx)), d.leaseHolder(ctx)
	})
	ready := takeover + d.waitFleetReady(ctx, 3)
	t.Logf("recovery: KCM's manifest back: KCM led %v later, the fleet's 3 pods ran %v later; moved out again: the fleet held the Lease %v later, 3 of 3 Ready %v later",
		kcmLeads.Round(100*time.Millisecond), running.Round(100*time.Millisecond), takeover.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
}
