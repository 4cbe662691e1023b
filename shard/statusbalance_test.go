package shard

import (
	"bytes"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// TestBalanceExplained: the status says in one line why the busiest
// member stays above the bound, from what the Leases say: too few
// partitions holding objects, one partition heavier than a fair share,
// a fleet placing by count, or a keeper waiting out its hold; nothing
// when the members are within the bound.
func TestBalanceExplained(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	lease := func(name string, placements []string, weights map[int]uint64) coordinationv1.Lease {
		st := membership.State{Version: 3, Incarnation: "abc", Weights: weights}
		for p := range weights {
			st.Running = append(st.Running, string(PartitionPiece(p)))
		}
		value, err := st.Encode()
		if err != nil {
			t.Fatal(err)
		}
		supports, err := membership.Supports{Placements: placements, StateVersions: membership.StateVersions}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{membership.StateAnnotation: value, membership.SupportsAnnotation: supports}},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-time.Second)}, LeaseDurationSeconds: ptr.To[int32](15)},
		}
	}
	spread := func(first, n int, each uint64) map[int]uint64 {
		out := map[int]uint64{}
		for p := first; p < first+n; p++ {
			out[p] = each
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		leases []coordinationv1.Lease
		says   string // "": no line
	}{
		{"even", []coordinationv1.Lease{
			lease("a", Placements, spread(0, 4, 100)), lease("b", Placements, spread(4, 4, 100)), lease("c", Placements, spread(8, 4, 100)),
		}, ""},
		{"fewer partitions holding objects than members", []coordinationv1.Lease{
			lease("a", Placements, map[int]uint64{0: 500, 1: 0}), lease("b", Placements, map[int]uint64{2: 500, 3: 0}), lease("c", Placements, map[int]uint64{4: 0, 5: 0}),
		}, "only 2 partitions hold objects, fewer than the 3 members"},
		{"one partition heavier than a fair share", []coordinationv1.Lease{
			lease("a", Placements, map[int]uint64{0: 2000, 1: 10}), lease("b", Placements, spread(4, 4, 100)), lease("c", Placements, spread(8, 4, 100)),
		}, "partition 0 alone holds"},
		{"placed by count", []coordinationv1.Lease{
			lease("a", PlacementsByCount, spread(0, 8, 100)), lease("b", Placements, spread(8, 2, 100)), lease("c", Placements, spread(10, 2, 100)),
		}, "the fleet places by count"},
		{"placed by weight, the keeper holding", []coordinationv1.Lease{
			lease("a", Placements, spread(0, 8, 100)), lease("b", Placements, spread(8, 2, 100)), lease("c", Placements, spread(10, 2, 100)),
		}, "partitions move once the busiest member has stayed above 1.1x the mean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := FleetStatusFromLeases(tc.leases, "kube-system", "f", 64, now)
			var out bytes.Buffer
			if err := st.WriteTable(&out); err != nil {
				t.Fatal(err)
			}
			table := out.String()
			if tc.says == "" {
				if st.Balance != "" || strings.Contains(table, "uneven") {
					t.Errorf("busiest %.2fx: the status explains an imbalance: %q\n%s", st.Busiest, st.Balance, table)
				}
				return
			}
			if !strings.Contains(st.Balance, tc.says) || !strings.Contains(table, st.Balance) {
				t.Errorf("busiest %.2fx: want a line saying %q, got %q\n%s", st.Busiest, tc.says, st.Balance, table)
			}
			if n := strings.Count(table, "uneven"); n != 1 {
				t.Errorf("%d lines explain the imbalance, want 1:\n%s", n, table)
			}
			t.Logf("\n%s", table)
		})
	}
}
