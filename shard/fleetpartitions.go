package shard

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// The partition count is the fleet's, not each replica's: a replica
// started without --partitions runs what the fleet's Leases say, so the
// count is chosen once, when the fleet is created, and a rolling update
// keeps it. A wrong choice cannot run a piece twice: replicas with
// different counts publish different views (ViewID) and start nothing
// together; it can only stall, as a mismatched --partitions does.

// LegacyPartitions is the count of a member whose Lease does not say
// (membership.PartitionsAnnotation): every release before the annotation
// defaulted to 64 partitions. A fleet that ran those releases with
// another --partitions keeps setting it.
const LegacyPartitions = 64

// FleetPartitions is the partition count a replica started without
// --partitions runs, from the fleet's member Leases as seen at now, and
// where it came from, for the log, and whether a live member runs it:
//   - the oldest live member's (earliest acquire time): the members
//     running pieces were there first, and a joiner must agree with them;
//   - with no live member, the most recently renewed Lease's: a fleet
//     restarted after a crash keeps its count;
//   - with no Lease, DefaultRingConfig's: a new fleet.
//
// Leases with no readable state or renew time (not a member's) and those
// whose annotation is unreadable are skipped. One read judges
// expiry by the writers' renew times, as ReadFleet does; a skewed clock
// can only pick the count of another member of the same fleet.
func FleetPartitions(leases []coordinationv1.Lease, now time.Time) (partitions int, from string, live bool) {
	var oldest, latest *coordinationv1.Lease
	var liveCount, latestCount int
	for i := range leases {
		l := &leases[i]
		if _, err := membership.ParseState(l.Annotations[membership.StateAnnotation]); err != nil || l.Spec.RenewTime == nil {
			// Not a member's: a Lease under the fleet label that
			// someone else wrote.
			continue
		}
		count, err := membership.ParsePartitions(l.Annotations[membership.PartitionsAnnotation])
		if err != nil {
			continue
		}
		if count == 0 {
			count = LegacyPartitions
		}
		renewed := leaseTime(l.Spec.RenewTime)
		if leaseLive(l, now) {
			if oldest == nil || acquiredBefore(l, oldest) {
				oldest, liveCount = l, count
			}
			continue
		}
		if latest == nil || renewed.After(leaseTime(latest.Spec.RenewTime)) || (renewed.Equal(leaseTime(latest.Spec.RenewTime)) && l.Name < latest.Name) {
			latest, latestCount = l, count
		}
	}
	switch {
	case oldest != nil:
		return liveCount, "the oldest live member, " + oldest.Name, true
	case latest != nil:
		return latestCount, "the last member renewed, " + latest.Name + ", none live", false
	}
	return DefaultRingConfig.Partitions, "a new fleet: no member Lease", false
}

// acquiredBefore orders Leases by acquire time, then name.
func acquiredBefore(a, b *coordinationv1.Lease) bool {
	ta, tb := leaseTime(a.Spec.AcquireTime), leaseTime(b.Spec.AcquireTime)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
}

// leaseLive says whether l was renewed within its lease duration of now,
// by its writer's renew time: one read has no history to judge by the
// observer's clock, as membership does.
func leaseLive(l *coordinationv1.Lease, now time.Time) bool {
	renewed := leaseTime(l.Spec.RenewTime)
	var duration time.Duration
	if l.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return !renewed.IsZero() && now.Sub(renewed) <= duration
}

func leaseTime(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// ReadFleetPartitions lists the fleet's Leases and returns FleetPartitions.
func ReadFleetPartitions(ctx context.Context, store membership.LeaseStore, namespace, fleet string) (partitions int, from string, live bool, err error) {
	leases, err := store.List(ctx, namespace, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{membership.FleetLabel: fleet}).String(),
	})
	if err != nil {
		return 0, "", false, fmt.Errorf("listing the Leases of fleet %s in %s: %w", fleet, namespace, err)
	}
	partitions, from, live = FleetPartitions(leases.Items, time.Now())
	return partitions, from, live, nil
}
