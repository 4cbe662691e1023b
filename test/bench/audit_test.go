package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAuditCounts(t *testing.T) {
	const (
		kcm   = `"user":{"username":"system:kube-controller-manager"}`
		sa    = `"user":{"username":"system:serviceaccount:kube-system:job-controller"}`
		sched = `"user":{"username":"system:kube-scheduler"}`
		kwok  = `"user":{"username":"kwok"}`
	)
	for _, tc := range []struct {
		name  string
		lines []string
		want  auditCounts
	}{
		{
			name: "a watch counts once, when its response starts",
			lines: []string{
				`{"stage":"ResponseStarted","verb":"watch",` + kcm + `,"objectRef":{"resource":"pods"}}`,
				`{"stage":"ResponseComplete","verb":"watch",` + kcm + `,"objectRef":{"resource":"pods"}}`,
				`{"stage":"ResponseStarted","verb":"watch",` + sched + `,"objectRef":{"resource":"pods"}}`,
			},
			want: auditCounts{writes: map[string]float64{}, cmWatches: 1, otherWatches: 1},
		},
		{
			name: "lists by client; a controller's service account is a controller manager",
			lines: []string{
				`{"stage":"ResponseComplete","verb":"list",` + sa + `,"objectRef":{"resource":"jobs"}}`,
				`{"stage":"ResponseComplete","verb":"list",` + sched + `,"objectRef":{"resource":"nodes"}}`,
				`{"stage":"ResponseComplete","verb":"list",` + sched + `,"objectRef":{"resource":"pods"}}`,
			},
			want: auditCounts{writes: map[string]float64{}, cmLists: 1, otherLists: 2},
		},
		{
			name: "writes by controller managers only, Leases apart",
			lines: []string{
				`{"stage":"ResponseComplete","verb":"create",` + kcm + `,"objectRef":{"resource":"pods"}}`,
				`{"stage":"ResponseComplete","verb":"update",` + kcm + `,"objectRef":{"resource":"leases"}}`,
				`{"stage":"ResponseComplete","verb":"create",` + sched + `,"objectRef":{"resource":"bindings"}}`,
			},
			want: auditCounts{writes: map[string]float64{"create": 1, "update": 1}, leaseWrites: 1},
		},
		{
			name: "controller managers' Event creates and patches",
			lines: []string{
				`{"stage":"ResponseComplete","verb":"create",` + sa + `,"objectRef":{"resource":"events"}}`,
				`{"stage":"ResponseComplete","verb":"patch",` + sa + `,"objectRef":{"resource":"events"}}`,
				`{"stage":"ResponseComplete","verb":"create",` + sched + `,"objectRef":{"resource":"events"}}`,
			},
			want: auditCounts{writes: map[string]float64{"create": 1, "patch": 1}, cmEventWrites: 2},
		},
		{
			name: "kwok's Pod watches and status patches, refused ones apart",
			lines: []string{
				`{"stage":"ResponseStarted","verb":"watch",` + kwok + `,"objectRef":{"resource":"pods"}}`,
				`{"stage":"ResponseComplete","verb":"watch",` + kwok + `,"objectRef":{"resource":"pods"}}`,
				`{"stage":"ResponseStarted","verb":"watch",` + kwok + `,"objectRef":{"resource":"nodes"}}`,
				`{"stage":"ResponseComplete","verb":"patch",` + kwok + `,"objectRef":{"resource":"pods","subresource":"status"},"responseStatus":{"code":200}}`,
				`{"stage":"ResponseComplete","verb":"patch",` + kwok + `,"objectRef":{"resource":"pods","subresource":"status"},"responseStatus":{"code":422}}`,
				`{"stage":"ResponseComplete","verb":"patch",` + kwok + `,"objectRef":{"resource":"nodes","subresource":"status"},"responseStatus":{"code":422}}`,
			},
			want: auditCounts{writes: map[string]float64{}, otherWatches: 2, kwokPodWatches: 1, kwokPodPatches: 2, kwokPodPatchesRefused: 1},
		},
		{
			name: "a line still being written ends the count",
			lines: []string{
				`{"stage":"ResponseComplete","verb":"list",` + kcm + `,"objectRef":{"resource":"pods"}}`,
				`{"stage":"ResponseComplete","verb":"li`,
			},
			want: auditCounts{writes: map[string]float64{}, cmLists: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if err := os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readAuditCounts(path, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.cmLists != tc.want.cmLists || got.otherLists != tc.want.otherLists || got.cmWatches != tc.want.cmWatches ||
				got.otherWatches != tc.want.otherWatches || got.leaseWrites != tc.want.leaseWrites || len(got.writes) != len(tc.want.writes) ||
				got.cmEventWrites != tc.want.cmEventWrites || got.kwokPodWatches != tc.want.kwokPodWatches ||
				got.kwokPodPatches != tc.want.kwokPodPatches || got.kwokPodPatchesRefused != tc.want.kwokPodPatchesRefused {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for verb, n := range tc.want.writes {
				if got.writes[verb] != n {
					t.Errorf("%s writes: got %v, want %v", verb, got.writes[verb], n)
				}
			}
		})
	}
}
