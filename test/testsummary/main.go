// Command testsummary reads `go test -json` on its standard input, prints
// the tests' output as `go test -v` would, and ends with the slowest tests
// and the time spent in each package, so every run shows where the test
// budget goes. It exits non-zero if a test or package failed, or if the
// input held no test event.
//
// A test that ran in a lane of the e2e tests (test/e2e/lanes_test.go)
// logs how long it waited for its lane; the summary lists the time it ran
// (go test's elapsed time less that wait) and the wait beside it. Such
// subtests (one per side of a comparison, or per mode) are listed with the
// top-level tests, since they are what holds a lane.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// outcome is how one test or package ended, and how long it took.
type outcome struct {
	name    string
	elapsed time.Duration // less the lane wait
	wait    time.Duration // for a lane
	action  string
}

// laneWait is the line test/e2e's inLane logs once a test has its lane.
var laneWait = regexp.MustCompile(`lane: \d+ of \d+ shares after waiting (\S+)`)

func main() {
	slowest := flag.Int("slowest", 15, "how many of the slowest tests to list")
	flag.Parse()
	tests, packages, failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	report(os.Stdout, tests, packages, *slowest)
	if failed || len(tests) == 0 {
		os.Exit(1)
	}
}

// summarize copies the output of in to out and collects the top-level
// tests' and the packages' results.
func summarize(in io.Reader, out io.Writer) (tests, packages []outcome, failed bool, err error) {
	waits := map[string]time.Duration{}
	// Top-level tests whose subtests took lanes: their own time is their
	// subtests' waits and runs, listed apart.
	lanedParents := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			// Not an event (a build error printed by go test itself).
			fmt.Fprintln(out, string(line))
			continue
		}
		switch e.Action {
		case "output", "build-output":
			fmt.Fprint(out, e.Output)
			if m := laneWait.FindStringSubmatch(e.Output); m != nil && e.Test != "" {
				if d, err := time.ParseDuration(m[1]); err == nil {
					waits[e.Package+"."+e.Test] = d
					if root, _, sub := strings.Cut(e.Test, "/"); sub {
						lanedParents[e.Package+"."+root] = true
					}
				}
			}
		case "build-fail":
			failed = true
		case "pass", "fail", "skip":
			if e.Action == "fail" {
				failed = true
			}
			d := time.Duration(e.Elapsed * float64(time.Second))
			name := e.Package + "." + e.Test
			wait, inLane := waits[name]
			switch {
			case e.Test == "":
				packages = append(packages, outcome{name: e.Package, elapsed: d, action: e.Action})
			case lanedParents[name]:
			case !strings.Contains(e.Test, "/") || inLane:
				tests = append(tests, outcome{name: name, elapsed: d - wait, wait: wait, action: e.Action})
			}
		}
	}
	return tests, packages, failed, sc.Err()
}

func report(out io.Writer, tests, packages []outcome, slowest int) {
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	sort.SliceStable(packages, func(i, j int) bool { return packages[i].elapsed > packages[j].elapsed })
	fmt.Fprintf(out, "\n=== slowest tests\n")
	for i, t := range tests {
		if i == slowest {
			break
		}
		lane := ""
		if t.wait > 0 {
			lane = fmt.Sprintf(" (after %v waiting for a lane)", t.wait.Round(100*time.Millisecond))
		}
		fmt.Fprintf(out, "%9s  %-4s %s%s\n", t.elapsed.Round(100*time.Millisecond), t.action, t.name, lane)
	}
	fmt.Fprintf(out, "=== time per package\n")
	var total time.Duration
	for _, p := range packages {
		total += p.elapsed
		fmt.Fprintf(out, "%9s  %-4s %s\n", p.elapsed.Round(100*time.Millisecond), p.action, p.name)
	}
	counts := map[string]int{}
	for _, t := range tests {
		counts[t.action]++
	}
	fmt.Fprintf(out, "%9s  in all\n", total.Round(100*time.Millisecond))
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", counts["pass"], counts["fail"], counts["skip"])
}
