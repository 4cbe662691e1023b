package shard

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// TestLoadsInStatus: a partition a member's Lease says is loading shows
// in the status table with how long, and as STUCK once that is longer
// than the member's lease duration; a quick load is not stuck, nor is
// one of an expired member (its partitions are unowned, said elsewhere).
func TestLoadsInStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lease := func(name string, renewedAgo time.Duration, loading map[int]int64) coordinationv1.Lease {
		st := membership.State{Incarnation: "abc", Running: []string{"partition/1", "partition/2"}, Loading: loading}
		value, err := st.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{membership.StateAnnotation: value}},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)}, LeaseDurationSeconds: ptr.To[int32](15)},
		}
	}
	ago := func(d time.Duration) int64 { return now.Add(-d).Unix() }
	for _, tc := range []struct {
		name    string
		lease   coordinationv1.Lease
		loading string // a line the table must print ("": none)
		stuck   bool
	}{
		{name: "nothing loading", lease: lease("a", time.Second, nil)},
		{name: "a quick load", lease: lease("a", time.Second, map[int]int64{2: ago(3 * time.Second)}), loading: "a is loading partitions 2 (for 3s)"},
		{name: "a stuck load", lease: lease("a", time.Second, map[int]int64{1: ago(40 * time.Second)}), loading: "a is loading partitions 1 (for 40s)", stuck: true},
		{name: "an expired member's load", lease: lease("a", time.Minute, map[int]int64{1: ago(2 * time.Minute)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := FleetStatusFromLeases([]coordinationv1.Lease{tc.lease}, "kube-system", "f", 4, now)
			var out bytes.Buffer
			if err := st.WriteTable(&out); err != nil {
				t.Fatal(err)
			}
			table := out.String()
			if tc.loading != "" && !strings.Contains(table, tc.loading) {
				t.Errorf("the table does not say %q:\n%s", tc.loading, table)
			}
			if tc.loading == "" && strings.Contains(table, "loading") {
				t.Errorf("the table names a load:\n%s", table)
			}
			if got := strings.Contains(table, "STUCK: partition 1 has been loading on a for 40s, longer than a lease duration (15s)"); got != tc.stuck {
				t.Errorf("the table says the load is stuck: %v, want %v:\n%s", got, tc.stuck, table)
			}
			page := httptest.NewRecorder()
			local := []LocalLoad{{Partitions: []int{1}, Since: now, Waiting: []string{"pods: unlisted [ns-1]"}}}
			FleetPage(func(context.Context) (FleetStatus, error) { return st, nil }, func() Status { return Status{Identity: "a"} }, func() []LocalLoad { return local }).ServeHTTP(page, httptest.NewRequest("GET", "/debug/fleet", nil))
			body := page.Body.String()
			if got := strings.Contains(body, `class="health-expired stuck"`); got != tc.stuck {
				t.Errorf("the page says STUCK: %v, want %v", got, tc.stuck)
			}
			if !strings.Contains(body, "the owned cache waits for: pods: unlisted [ns-1]") {
				t.Errorf("the page does not say what this replica's load waits for:\n%s", body)
			}
		})
	}
}
