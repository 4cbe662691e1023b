package shard

import (
	"html/template"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

func TestCompactRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "-"},
		{[]int{4}, "4"},
		{[]int{0, 1, 2, 3, 7, 9, 10}, "0-3,7,9-10"},
		{[]int{1, 3, 5}, "1,3,5"},
	} {
		if got := CompactRanges(tc.in); got != tc.want {
			t.Errorf("CompactRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestShortRanges: a table row shows whole ranges up to the width and
// marks what it leaves out.
func TestShortRanges(t *testing.T) {
	for _, tc := range []struct {
		in    []int
		width int
		want  string
	}{
		{[]int{0, 1, 2, 3, 7, 9, 10}, 40, "0-3,7,9-10"},
		{[]int{0, 1, 2, 3, 7, 9, 10}, 10, "0-3,7,9-10"},
		{[]int{0, 1, 2, 3, 7, 9, 10}, 9, "0-3,7,..."},
		{[]int{0, 1, 2, 3, 7, 9, 10}, 5, "0-3,7,..."},
		{[]int{0, 1, 2, 3, 7, 9, 10}, 4, "0-3,..."},
		{[]int{100, 101, 102}, 3, "100..."},
	} {
		if got := shortRanges(tc.in, tc.width); got != tc.want {
			t.Errorf("shortRanges(%v, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

func TestFleetStatusFromLeases(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	lease := func(name string, renewedAgo time.Duration, st *membership.State, raw string) coordinationv1.Lease {
		value := raw
		if st != nil {
			st.Version, st.Incarnation = membership.StateVersion, "abc"
			v, err := st.Encode()
			if err != nil {
				t.Fatal(err)
			}
			value = v
		}
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{membership.StateAnnotation: value}},
			Spec: coordinationv1.LeaseSpec{
				RenewTime:            &metav1.MicroTime{Time: now.Add(-renewedAgo)},
				LeaseDurationSeconds: ptr.To[int32](15),
			},
		}
	}
	leases := []coordinationv1.Lease{
		lease("c", 2*time.Second, &membership.State{Running: []string{"partition/2", "partition/3", "singleton/namespace"}, Weights: map[int]uint64{2: 300}}, ""),
		lease("a", time.Second, &membership.State{Running: []string{"partition/0"}, Weights: map[int]uint64{0: 100}}, ""),
		lease("b", time.Minute, &membership.State{Running: []string{"partition/1"}, Weights: map[int]uint64{1: 5000}}, ""),
		lease("d", time.Second, &membership.State{Joining: true}, ""),
		lease("e", time.Second, &membership.State{Leaving: true}, ""),
		lease("f", time.Second, nil, "{not json"),
	}
	s := FleetStatusFromLeases(leases, "kube-system", "fleet", 5, now)
	health := map[string]string{}
	for _, m := range s.Members {
		health[m.Name] = m.Health
	}
	want := map[string]string{"a": MemberReady, "b": MemberExpired, "c": MemberReady, "d": MemberJoining, "e": MemberLeaving, "f": MemberUnreadable}
	if !reflect.DeepEqual(health, want) {
		t.Errorf("health = %v, want %v", health, want)
	}
	if s.Members[0].Name != "a" || !reflect.DeepEqual(s.Members[2].Partitions, []int{2, 3}) || !reflect.DeepEqual(s.Members[2].Singletons, []string{"namespace"}) {
		t.Errorf("members = %+v", s.Members)
	}
	// b expired: its partition counts as unowned, as does 4 that nobody lists.
	if !reflect.DeepEqual(s.UnownedPartitions, []int{1, 4}) {
		t.Errorf("unowned = %v, want [1 4]", s.UnownedPartitions)
	}
	if got, want := s.PartitionOwners(), map[int]string{0: "a", 2: "c", 3: "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("partition owners = %v, want %v", got, want)
	}
	// b expired: its objects are not the fleet's; c's partition 3 is not
	// measured yet.
	a, c := membership.Quantized(100), membership.Quantized(300)
	if s.Objects != a+c || s.Members[2].Objects != c || s.Members[2].Measured != 1 {
		t.Errorf("objects = %d, c's %d in %d partitions; want %d, %d in 1", s.Objects, s.Members[2].Objects, s.Members[2].Measured, a+c, c)
	}
	if want := float64(c) * 2 / float64(a+c); s.Busiest != want {
		t.Errorf("busiest = %g, want %g", s.Busiest, want)
	}
	var b strings.Builder
	if err := s.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"c       ready", "2: 2-3", "namespace", "partitions no live member runs: 1,4", "303 (76%), 1 of 2 partitions measured", "the busiest member holds 1.51x the mean"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, b.String())
		}
	}
}

func TestFleetPageColours(t *testing.T) {
	fleet := FleetStatus{Fleet: "f", Partitions: 2, Members: []MemberStatus{{Name: "a", Health: MemberReady, Partitions: []int{0}}}, UnownedPartitions: []int{1}}
	var b strings.Builder
	if err := fleetPageTemplate.Execute(&b, newFleetPageData(fleet, Status{Identity: "a"})); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "ZgotmplZ") {
		t.Fatal("html/template replaced a colour: cells would show no owner colour")
	}
	if !strings.Contains(page, string(memberColor(0))) || !strings.Contains(page, "#f28b82") {
		t.Fatal("member and no-owner colours missing")
	}
	seen := map[template.CSS]bool{}
	for i := range 8 {
		if seen[memberColor(i)] {
			t.Fatalf("members %d and another share colour %s", i, memberColor(i))
		}
		seen[memberColor(i)] = true
	}
}
