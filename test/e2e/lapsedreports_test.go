//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// Events a fleet replica dropped once its authority had lapsed are left
// out of the end-state comparison, each with a log line. A replica whose
// Lease renewal runs late (CI's parallel lanes starve its apiserver of
// CPU: "Renewing lease failed ... context deadline exceeded") stops its
// pieces and may write nothing more, Events included, since another
// replica may own them from then on; a controller's broadcaster that
// sends a report after that is refused, retries after sleeping, holding
// back every report queued behind it, and drops them all once the
// partition has moved ("Server rejected event"). The next owner finds the
// work done and reports nothing. KCM, which exits when it misses its
// renew deadline, loses its queued reports the same way; the comparison
// runs it without such a lapse. Only a report the replica's own log shows
// dropped after its lapse began is left out, so a report lost any other
// way still counts as a difference.

// klogDroppedEvent matches client-go's event broadcaster giving up on an
// Event: its time, and the Event's involved kind, namespace and reason.
var klogDroppedEvent = regexp.MustCompile(`^[IWE](\d{4} \d\d:\d\d:\d\d\.\d{6}) .*"(?:Server rejected event \(will not retry!\)|Unable to write event \(retry limit exceeded!\)|Unable to write event \(broadcaster is shut down\))".*InvolvedObject:ObjectReference\{Kind:([A-Za-z]+),Namespace:([a-z0-9-]+),.*,Reason:([A-Za-z]+),`)

// klogLapse matches the Manager stopping a piece because the replica's
// authority ran out.
var klogLapse = regexp.MustCompile(`^[IWE](\d{4} \d\d:\d\d:\d\d\.\d{6}) .*"Stopping piece" .* authority=false`)

// reportsDroppedAfterLapse reads a replica's log lines and returns the
// event facts (settledEventFacts' keys) of the Events it dropped after its
// authority first lapsed, each with why.
func reportsDroppedAfterLapse(replica string, lines []string) map[string]string {
	out := map[string]string{}
	lapsedAt := ""
	for _, line := range lines {
		if m := klogLapse.FindStringSubmatch(line); m != nil && lapsedAt == "" {
			lapsedAt = m[1]
			continue
		}
		m := klogDroppedEvent.FindStringSubmatch(line)
		// klog's "MMDD hh:mm:ss.uuuuuu" orders as text within a run.
		if m == nil || lapsedAt == "" || m[1] < lapsedAt {
			continue
		}
		out[fmt.Sprintf("%s/event/%s/%s", m[3], m[2], m[4])] = fmt.Sprintf("%s dropped it at %s, its authority having lapsed at %s", replica, m[1], lapsedAt)
	}
	return out
}

// fleetReportsDroppedAfterLapse is reportsDroppedAfterLapse for every
// fleet replica of cluster.
func fleetReportsDroppedAfterLapse(t *testing.T, cluster *localcluster.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range cluster.Processes() {
		if !strings.HasPrefix(p.Name, "fcm-") {
			continue
		}
		data, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatalf("reading %s's log: %v", p.Name, err)
		}
		for k, v := range reportsDroppedAfterLapse(p.Name, strings.Split(string(data), "\n")) {
			out[k] = v
		}
	}
	return out
}

func TestReportsDroppedAfterLapse(t *testing.T) {
	const lapse = `I1203 12:33:43.208791     917 manager.go:344] "Stopping piece" piece="partition/1" authority=false authorityUntil="2026-12-03T12:33:42.645950008Z" authorityLeft="-563ms" leaving=false`
	const moved = `I1203 12:33:28.803869     917 manager.go:344] "Stopping piece" piece="partition/25" authority=true authorityUntil="2026-12-03T12:33:36.994332511Z" authorityLeft="8.191s" leaving=false`
	rejected := func(at string) string {
		return `E1203 ` + at + `     917 logr.go:301] "Server rejected event (will not retry!)" err="this replica does not run the namespace's partition (it moved); write refused: POST /api/v1/namespaces/eq-d/events" logger="deployment-controller" event="&Event{ObjectMeta:{web-1.18edbe7182937cc2  eq-d    0 0001-01-01 00:00:00 +0000 UTC <nil> <nil> map[] map[] [] [] []},InvolvedObject:ObjectReference{Kind:Deployment,Namespace:eq-d,Name:web-1,UID:b7,APIVersion:apps/v1,ResourceVersion:1103,FieldPath:,},Reason:ScalingReplicaSet,Message:Scaled up replica set web-1-7996c5f8cd from 0 to 10,Source:EventSource{Component:deployment-controller,Host:,},}"`
	}
	const retrying = `E1203 12:33:42.656653     917 logr.go:301] "Unable to write event (may retry after sleeping)" err="Post \"https://127.0.0.1:22092/api/v1/namespaces/eq-c/events\": this replica's fleet authority ran out with the write in flight" event="&Event{ObjectMeta:{web-2.1  eq-c},InvolvedObject:ObjectReference{Kind:Deployment,Namespace:eq-c,Name:web-2,UID:a,APIVersion:apps/v1,ResourceVersion:1,FieldPath:,},Reason:ScalingReplicaSet,Message:m,}"`
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"dropped after a lapse", []string{lapse, rejected("12:33:45.400614")}, []string{"eq-d/event/Deployment/ScalingReplicaSet"}},
		{"dropped before the lapse", []string{rejected("12:33:40.000000"), lapse}, nil},
		{"dropped after a move, with no lapse", []string{moved, rejected("12:33:45.400614")}, nil},
		{"still retrying", []string{lapse, retrying}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for k := range reportsDroppedAfterLapse("fcm-1", tc.lines) {
				got = append(got, k)
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("left out %v, want %v", got, tc.want)
			}
		})
	}
}
