// Command conformance runs Kubernetes' own end-to-end tests of the
// controllers (bin/kubernetes-<version>/e2e.test, built by `make
// conformance` from test/tools/e2e) against a fresh local control plane
// per system (kube-scheduler and kwok nodes, with upstream
// kube-controller-manager or a fleet), and prints each test's outcome and
// time side by side. It fails when a test passes under
// kube-controller-manager and fails under a fleet, or, with one system,
// when a test fails.
//
//	go run ./test/conformance -systems kcm,fleet3 -set all
//	go run ./test/conformance -systems fleet3 -set ci
//	go run ./test/conformance -systems fleet1 -focus 'kube-root-ca.crt exist' -repeat 10
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	var (
		systems   = flag.String("systems", "kcm,fleet3", "comma-separated systems: kcm, or fleetN for a fleet of N replicas")
		selection = flag.String("selection", "test/conformance/selection.txt", "the selection of tests")
		set       = flag.String("set", "all", "which tests of the selection: all, ci (those of the controllers whose pieces move, a few minutes), or node (those that need containers that run: on a control plane whose one node is the real node, make node-tools)")
		focus     = flag.String("focus", "", "run the tests matching this regular expression instead of the selection")
		repeat    = flag.Int("repeat", 1, "run the tests this many times in a row on one control plane, stopping at the first failure")
		binDir    = flag.String("bin", "bin", "where the fleet, the control plane's binaries and kubernetes-<version>/e2e.test are")
		e2e       = flag.String("e2e", "", "the end-to-end test binary (default: the newest bin/kubernetes-*/e2e.test)")
		keep      = flag.String("keep", "", "keep each system's control plane files and e2e output in this folder")
		timeout   = flag.Duration("timeout", 3*time.Hour, "the whole run's limit")
		suite     = flag.Duration("suite-timeout", 2*time.Hour, "each run of e2e.test's limit: ginkgo then stops and reports the tests it ran")
		procs     = flag.Int("procs", 1, "processes of e2e.test at once per system for the tests that may share a cluster (as ginkgo -p); [Serial] and [Disruptive] tests run alone after them")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, runOptions{systems: strings.Split(*systems, ","), selection: *selection, set: *set, focus: *focus, repeat: *repeat, binDir: *binDir, e2e: *e2e, keep: *keep, suiteTimeout: *suite, procs: *procs}); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// runOptions are the command's flags.
type runOptions struct {
	systems        []string
	selection, set string
	focus          string
	repeat         int
	binDir, e2e    string
	keep           string
	suiteTimeout   time.Duration
	procs          int
}

func run(ctx context.Context, o runOptions) error {
	bin, err := filepath.Abs(o.binDir)
	if err != nil {
		return fmt.Errorf("resolving -bin: %w", err)
	}
	if o.e2e == "" {
		matches, _ := filepath.Glob(filepath.Join(bin, "kubernetes-*", "e2e.test"))
		if len(matches) == 0 {
			return fmt.Errorf("no %s: build it with make conformance", filepath.Join(bin, "kubernetes-<version>", "e2e.test"))
		}
		o.e2e = matches[len(matches)-1]
	}
	focus, selected, err := o.focusList()
	if err != nil {
		return err
	}
	if selected != nil {
		if err := checkSelects(ctx, o.e2e, focus, len(selected)); err != nil {
			return err
		}
	}
	var systems []controllerManager
	for _, name := range o.systems {
		s, err := parseSystem(name)
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}
	// The systems run at once, each on its own control plane: the tests
	// mostly wait (for pods, rollouts, deletions), and one after another
	// the selection took an hour.
	// One order of the tests for every system.
	seed := time.Now().Unix()
	fmt.Printf("ginkgo seed %d\n", seed)
	results := map[string][]testOutcome{}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, s := range systems {
		wg.Go(func() {
			start := time.Now()
			out, err := runSystem(ctx, s, bin, o, focus, seed)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
				return
			}
			results[s.name] = out
			fmt.Printf("%s: %d tests in %v\n", s.name, len(out), time.Since(start).Round(time.Second))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return report(os.Stdout, systems, results, selected)
}

// focusList is one ginkgo focus per selected test, or -focus alone.
func (o runOptions) focusList() (focus, selected []string, err error) {
	if o.focus != "" {
		return []string{o.focus}, nil, nil
	}
	sel, err := readSelection(o.selection)
	if err != nil {
		return nil, nil, err
	}
	names, err := sel.names(o.set)
	if err != nil {
		return nil, nil, err
	}
	return focusOf(names), names, nil
}

// willRun is ginkgo's count of the specs a focus selects.
var willRun = regexp.MustCompile(`Will run (\d+) of \d+ specs`)

// checkSelects makes sure, by a dry run of e2e, that focus selects exactly
// want specs: a test renamed upstream selects none, and a focus that is a
// prefix of another test's name selects both.
func checkSelects(ctx context.Context, e2e string, focus []string, want int) error {
	args := []string{"--ginkgo.dry-run", "--ginkgo.no-color"}
	for _, f := range focus {
		args = append(args, "--ginkgo.focus="+f)
	}
	out, err := exec.CommandContext(ctx, e2e, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("dry run of %s: %w\n%s", filepath.Base(e2e), err, out)
	}
	m := willRun.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("dry run of %s: no %q in its output", filepath.Base(e2e), willRun)
	}
	if got, _ := strconv.Atoi(string(m[1])); got != want {
		return fmt.Errorf("the selection's %d tests select %d specs of %s: a test was renamed upstream, or a name selects another too", want, got, filepath.Base(e2e))
	}
	return nil
}
