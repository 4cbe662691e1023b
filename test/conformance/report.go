package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// testOutcome is one test's result under one controller manager.
type testOutcome struct {
	name   string
	status string // passed, failed, skipped
	took   time.Duration
	note   string
	// failure: ginkgo's message for a test that did not pass, printed
	// under the table so that a run that fails says why (CI keeps only
	// the output, not the e2e logs).
	failure string
}

// readJUnit reads ginkgo's JUnit report: the specs that ran or were
// skipped by the test itself (not those the focus left out).
func readJUnit(path string) ([]testOutcome, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var suites struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Status  string    `xml:"status,attr"`
				Time    float64   `xml:"time,attr"`
				Skipped *struct{} `xml:"skipped"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		return nil, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var out []testOutcome
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			if !strings.HasPrefix(c.Name, "[It] ") {
				continue // suite setup and teardown
			}
			name := withoutLabels(strings.TrimPrefix(c.Name, "[It] "))
			o := testOutcome{name: name, status: c.Status, took: time.Duration(c.Time * float64(time.Second))}
			if c.Failure != nil {
				o.failure = strings.TrimSpace(c.Failure.Message + "\n" + c.Failure.Text)
			}
			if o.status == "" {
				o.status = "passed"
				if c.Failure != nil {
					o.status = "failed"
				} else if c.Skipped != nil {
					o.status = "skipped"
				}
			}
			if o.status == "skipped" && o.took == 0 {
				continue // left out by the focus
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// withoutLabels drops the label list ginkgo appends to a spec's name in
// its reports ("... [Conformance] [sig-auth, Conformance]"): every spec
// here has one, its sig's at least.
func withoutLabels(name string) string {
	if i := strings.LastIndex(name, " ["); i > 0 && strings.HasSuffix(name, "]") {
		return name[:i]
	}
	return name
}

// failing says whether a test with status did not pass: ginkgo's JUnit
// report also says timedout, panicked, interrupted and aborted.
func failing(status string) bool {
	return status != "passed" && status != "skipped"
}

// report prints every test's outcome per system and fails when a test
// passed under kube-controller-manager and did not pass under a fleet
// (with no kube-controller-manager, when a test did not pass), or when a
// selected test has no outcome under a fleet (cut off by the suite's
// timeout, or its name no longer matches a test).
func report(w io.Writer, systems []controllerManager, results map[string][]testOutcome, selected []string) error {
	byTest, names := byTestName(results)
	var regressions []string
	for _, n := range selected {
		if _, ok := byTest[n]; !ok {
			byTest[n] = map[string]testOutcome{}
			names = append(names, n)
		}
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "test"
	for _, s := range systems {
		header += "\t" + s.name
	}
	fmt.Fprintln(tw, header)
	isSelected := map[string]bool{}
	for _, n := range selected {
		isSelected[n] = true
	}
	counts := map[string]map[string]int{}
	for _, n := range names {
		row := n
		kcm, haveKCM := byTest[n]["kube-controller-manager"]
		for _, s := range systems {
			o, ok := byTest[n][s.name]
			cell := "-"
			if ok {
				cell = fmt.Sprintf("%s %.1fs", o.status, o.took.Seconds())
				if o.note != "" {
					cell += " (" + o.note + ")"
				}
				if counts[s.name] == nil {
					counts[s.name] = map[string]int{}
				}
				counts[s.name][o.status]++
			}
			row += "\t" + cell
			switch {
			case s.replicas == 0:
			case !ok && isSelected[n]:
				regressions = append(regressions, fmt.Sprintf("%s has no outcome under the %s", n, s.name))
			case ok && failing(o.status) && (!haveKCM || kcm.status == "passed"):
				regressions = append(regressions, fmt.Sprintf("%s under the %s (%s)", n, s.name, o.status))
			}
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeSummary(w, systems, counts, byTest, names)
	if len(regressions) > 0 {
		return fmt.Errorf("%d tests do not pass under a fleet that pass under kube-controller-manager (or with no kube-controller-manager beside it): %s", len(regressions), strings.Join(regressions, "; "))
	}
	return nil
}

// writeSummary prints each system's counts under the table, then the
// message of every test that did not pass, so a CI log says why.
func writeSummary(w io.Writer, systems []controllerManager, counts map[string]map[string]int, byTest map[string]map[string]testOutcome, names []string) {
	for _, s := range systems {
		c := counts[s.name]
		other := 0
		for status, n := range c {
			if failing(status) && status != "failed" {
				other += n
			}
		}
		fmt.Fprintf(w, "%s: %d passed, %d failed, %d timed out or aborted, %d skipped\n", s.name, c["passed"], c["failed"], other, c["skipped"])
	}
	for _, n := range names {
		for _, s := range systems {
			if o, ok := byTest[n][s.name]; ok && failing(o.status) && o.failure != "" {
				fmt.Fprintf(w, "\n%s under the %s (%s):\n%s\n", n, s.name, o.status, o.failure)
			}
		}
	}
}

// byTestName turns outcomes per system into outcomes per test, and the
// tests' names, sorted.
func byTestName(results map[string][]testOutcome) (map[string]map[string]testOutcome, []string) {
	byTest := map[string]map[string]testOutcome{}
	for sys, outs := range results {
		for _, o := range outs {
			if byTest[o.name] == nil {
				byTest[o.name] = map[string]testOutcome{}
			}
			byTest[o.name][sys] = o
		}
	}
	names := make([]string, 0, len(byTest))
	for n := range byTest {
		names = append(names, n)
	}
	sort.Strings(names)
	return byTest, names
}
