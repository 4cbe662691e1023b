package shard

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// TestFleetPartitions: a replica without --partitions runs the oldest live
// member's count, a member that does not say counting as LegacyPartitions
// (a rolling upgrade from a release before the annotation); with no live
// member the last renewed Lease's; with none, a new fleet's default.
func TestFleetPartitions(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	state, err := membership.State{Incarnation: "i", Seq: 1}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	member := func(name, partitions string, acquired, renewed time.Duration) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{membership.StateAnnotation: state}}}
		if partitions != "" {
			l.Annotations[membership.PartitionsAnnotation] = partitions
		}
		l.Spec.LeaseDurationSeconds = ptr.To[int32](15)
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now.Add(-acquired)}
		l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-renewed)}
		return l
	}
	for _, tc := range []struct {
		name     string
		leases   []coordinationv1.Lease
		want     int
		wantLive bool
	}{
		{"a new fleet", nil, DefaultRingConfig.Partitions, false},
		{"members that say", []coordinationv1.Lease{member("a", "128", time.Hour, time.Second), member("b", "128", time.Minute, time.Second)}, 128, true},
		{"a release from before the annotation", []coordinationv1.Lease{member("old-0", "", time.Hour, time.Second)}, LegacyPartitions, true},
		{"upgrade: a joiner of this release beside an older live member", []coordinationv1.Lease{member("old-0", "", time.Hour, time.Second), member("new-0", "256", time.Second, time.Second)}, LegacyPartitions, true},
		{"disagreeing members: the oldest live one's", []coordinationv1.Lease{member("b", "32", time.Minute, time.Second), member("a", "128", time.Hour, 2*time.Second)}, 128, true},
		{"an expired older member does not count beside a live one", []coordinationv1.Lease{member("a", "32", 2*time.Hour, time.Hour), member("b", "128", time.Minute, time.Second)}, 128, true},
		{"none live: the last renewed", []coordinationv1.Lease{member("a", "32", 2*time.Hour, time.Hour), member("b", "128", time.Hour, time.Minute)}, 128, false},
		{"an unreadable annotation is skipped", []coordinationv1.Lease{member("a", "many", 2*time.Hour, time.Second), member("b", "128", time.Hour, time.Second)}, 128, true},
		{"a Lease someone else wrote under the fleet label is no member", []coordinationv1.Lease{func() coordinationv1.Lease {
			l := member("bad", "32", 2*time.Hour, time.Second)
			l.Annotations[membership.StateAnnotation] = "{not json"
			return l
		}()}, DefaultRingConfig.Partitions, false},
		{"only unreadable annotations: a new fleet", []coordinationv1.Lease{member("a", "0", 2*time.Hour, time.Second)}, DefaultRingConfig.Partitions, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, live := FleetPartitions(tc.leases, now)
			if got != tc.want || live != tc.wantLive {
				t.Errorf("got %d (from %s, live %v), want %d (live %v)", got, from, live, tc.want, tc.wantLive)
			}
		})
	}
}
