//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// TestJoinersRunTheFleetsPartitions: a fleet created with --partitions=32
// keeps that count as replicas without the flag join it, and after the
// replica that set it has left: a joiner runs what the fleet's Leases
// say, and every member's Lease says it.
func TestJoinersRunTheFleetsPartitions(t *testing.T) {
	inLane(t, laneLight)
	f := newFleet(t)
	f.partitions = 32
	all := names(4)
	f.start(all[0], "--partitions=32")
	f.waitSettled(all[:1], 2*time.Minute)
	f.start(all[1])
	f.start(all[2])
	f.waitSettled(all[:3], 2*time.Minute)

	// The replica that was told the count leaves; a new one learns it
	// from those left.
	f.stop(all[0])
	f.start(all[3])
	f.waitSettled(all[1:], 2*time.Minute)

	client, err := f.cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range all[1:] {
		l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Annotations[membership.PartitionsAnnotation]; got != "32" {
			t.Errorf("%s's Lease says %q partitions, want 32", name, got)
		}
	}
	f.alive()
	f.checkNoOverlap(1)
}
