package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReportFailsOnRegression: a test that does not pass under a fleet
// (failed, timed out, panicked, interrupted, or no outcome at all) fails
// the run only where it passed under kube-controller-manager, or where no
// kube-controller-manager ran beside it.
func TestReportFailsOnRegression(t *testing.T) {
	kcm, fleet := controllerManager{name: "kube-controller-manager"}, controllerManager{name: "fleet of 3", replicas: 3}
	for _, tc := range []struct {
		name      string
		systems   []controllerManager
		kcm       string
		fleet     string
		wantError bool
	}{
		{"both pass", []controllerManager{kcm, fleet}, "passed", "passed", false},
		{"fails under the fleet only", []controllerManager{kcm, fleet}, "passed", "failed", true},
		{"fails under both", []controllerManager{kcm, fleet}, "failed", "failed", false},
		{"fails under KCM only", []controllerManager{kcm, fleet}, "failed", "passed", false},
		{"skipped under the fleet", []controllerManager{kcm, fleet}, "passed", "skipped", false},
		{"fleet alone fails", []controllerManager{fleet}, "", "failed", true},
		{"fleet alone passes", []controllerManager{fleet}, "", "passed", false},
		{"timed out under the fleet only", []controllerManager{kcm, fleet}, "passed", "timedout", true},
		{"panicked under the fleet only", []controllerManager{kcm, fleet}, "passed", "panicked", true},
		{"interrupted under the fleet alone", []controllerManager{fleet}, "", "interrupted", true},
		{"no outcome under the fleet", []controllerManager{kcm, fleet}, "passed", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := map[string][]testOutcome{}
			if tc.kcm != "" {
				results[kcm.name] = []testOutcome{{name: "[sig-x] a test", status: tc.kcm}}
			}
			if tc.fleet != "" {
				results[fleet.name] = []testOutcome{{name: "[sig-x] a test", status: tc.fleet, failure: "Unexpected address with IP: 10.0.0.1"}}
			}
			var out bytes.Buffer
			err := report(&out, tc.systems, results, []string{"[sig-x] a test"})
			if (err != nil) != tc.wantError {
				t.Errorf("report error %v, want an error: %v\n%s", err, tc.wantError, out.String())
			}
			if !strings.Contains(out.String(), "[sig-x] a test") {
				t.Errorf("the table does not name the test:\n%s", out.String())
			}
			if says := strings.Contains(out.String(), "Unexpected address with IP"); says != (tc.fleet != "" && failing(tc.fleet)) {
				t.Errorf("the report prints the fleet's failure message: %v, want %v:\n%s", says, !says, out.String())
			}
		})
	}
}

// TestReadSelection: sections, the sets they make, and a test left out
// without a reason refused.
func TestReadSelection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		text     string
		wantCI   int
		wantAll  int
		wantLeft int
		wantErr  bool
	}{
		{"sections", "# comment\n[ci]\n[sig-a] one\n[long]\n[sig-a] two\n[sig-a] three\n[left out]\n[sig-a] four | needs a StorageClass\n", 1, 3, 1, false},
		{"left out without why", "[left out]\n[sig-a] four\n", 0, 0, 0, true},
		{"outside a section", "[sig-a] one\n", 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "selection.txt")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := readSelection(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			ci, _ := s.names("ci")
			all, _ := s.names("all")
			if len(ci) != tc.wantCI || len(all) != tc.wantAll || len(s.leftOut) != tc.wantLeft {
				t.Errorf("ci %d, all %d, left out %d; want %d, %d, %d", len(ci), len(all), len(s.leftOut), tc.wantCI, tc.wantAll, tc.wantLeft)
			}
			if _, err := s.names("some"); err == nil {
				t.Error("an unknown set was accepted")
			}
		})
	}
}

// TestSelectionFileReads: the repository's selection parses and names no
// test twice.
func TestSelectionFileReads(t *testing.T) {
	s, err := readSelection("selection.txt")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := s.names("all")
	seen := map[string]bool{}
	for _, n := range all {
		if seen[n] {
			t.Errorf("%q selected twice", n)
		}
		if _, left := s.leftOut[n]; left {
			t.Errorf("%q both selected and left out", n)
		}
		seen[n] = true
	}
	if len(s.ci) == 0 {
		t.Error("no test for CI")
	}
}

func TestWithoutLabels(t *testing.T) {
	for name, want := range map[string]string{
		"[sig-auth] ServiceAccounts should guarantee kube-root-ca.crt exist in any namespace [Conformance] [sig-auth, Conformance]": "[sig-auth] ServiceAccounts should guarantee kube-root-ca.crt exist in any namespace [Conformance]",
		"[sig-apps] Job should delete pods when suspended [sig-apps]":                                                               "[sig-apps] Job should delete pods when suspended",
	} {
		if got := withoutLabels(name); got != want {
			t.Errorf("withoutLabels(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestSplitForProcs: the tests that may share a cluster are dealt into at
// most procs batches; [Serial] and [Disruptive] ones go apart, to run alone.
func TestSplitForProcs(t *testing.T) {
	focus := focusOf([]string{"[sig-a] one", "[sig-a] two [Serial]", "[sig-a] three", "[sig-a] four [Disruptive] [Serial]", "[sig-a] five", "[sig-a] six"})
	for _, tc := range []struct {
		procs       int
		wantBatches []int // sizes
	}{
		{1, []int{4}},
		{2, []int{2, 2}},
		{3, []int{2, 1, 1}},
		{8, []int{1, 1, 1, 1}},
	} {
		parallel, serial := splitForProcs(focus, tc.procs)
		var sizes []int
		for _, b := range parallel {
			sizes = append(sizes, len(b))
		}
		if !slices.Equal(sizes, tc.wantBatches) || len(serial) != 2 {
			t.Errorf("procs %d: batches of %v and %d alone, want %v and 2", tc.procs, sizes, len(serial), tc.wantBatches)
		}
	}
}
