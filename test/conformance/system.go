package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// controllerManager is what the tests run against: upstream
// kube-controller-manager, or a fleet of replicas.
type controllerManager struct {
	name     string
	replicas int // 0: kube-controller-manager
}

var fleetName = regexp.MustCompile(`^fleet([1-9][0-9]?)$`)

func parseSystem(name string) (controllerManager, error) {
	if name == "kcm" {
		return controllerManager{name: "kube-controller-manager"}, nil
	}
	m := fleetName.FindStringSubmatch(name)
	if m == nil {
		return controllerManager{}, fmt.Errorf("system %q: want kcm or fleetN", name)
	}
	n, _ := strconv.Atoi(m[1])
	return controllerManager{name: fmt.Sprintf("fleet of %d", n), replicas: n}, nil
}

// runSystem starts a control plane with s, runs the focused tests
// repeat times and returns their outcomes (of the last run).
func runSystem(ctx context.Context, s controllerManager, bin string, o runOptions, focus []string, seed int64) ([]testOutcome, error) {
	e2e, repeat, keep := o.e2e, o.repeat, o.keep
	opts := localcluster.Options{BinDir: bin, Scheduler: true, KwokNodes: 3, KubeControllerManager: s.replicas == 0,
		APIServerArgs: []string{"--feature-gates=" + featureGates}, KubeControllerManagerArgs: controllerManagerArgs}
	if o.set == "node" {
		// The real node alone, open to every pod: a kwok node beside it
		// would take pods whose containers must run. One real node runs on
		// the machine at a time, so the systems take turns.
		opts.KwokNodes, opts.RealNode, opts.RealNodeSchedulable = 0, true, true
	}
	dir := ""
	if keep != "" {
		dir = filepath.Join(keep, strings.ReplaceAll(s.name, " ", "-"))
		opts.Dir = dir
	}
	cluster, err := localcluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer cluster.Stop()
	if dir == "" {
		dir = cluster.Dir
	}
	for i := range s.replicas {
		if _, _, err := cluster.StartFleetReplica(ctx, filepath.Join(bin, "fleet-controller-manager"), fmt.Sprintf("fcm-%d", i), controllerManagerArgs...); err != nil {
			return nil, err
		}
	}
	if s.replicas > 0 {
		if err := waitFleetRunning(ctx, cluster, s.replicas); err != nil {
			return nil, err
		}
	}
	if err := createDefaultStorageClass(ctx, cluster); err != nil {
		return nil, err
	}
	var out []testOutcome
	passed := 0
	for i := range repeat {
		out, err = runBatches(ctx, s, cluster, e2e, focus, o.procs, dir, i, seed, o.suiteTimeout)
		if err != nil {
			return nil, err
		}
		if failed(out) {
			break
		}
		passed++
	}
	if repeat > 1 {
		fmt.Printf("%s: %d of %d runs in a row passed\n", s.name, passed, repeat)
		for i := range out {
			out[i].note = fmt.Sprintf("%d of %d runs passed", passed, repeat)
		}
	}
	return out, nil
}

// serialMarks: a test named with one runs alone against the cluster, as
// upstream's ginkgo -p runs it.
var serialMarks = []string{regexp.QuoteMeta("[Serial]"), regexp.QuoteMeta("[Disruptive]")}

// splitForProcs deals the focused tests (quoted names, focusOf) into at
// most procs batches that may run at once, and the tests that must run
// alone.
func splitForProcs(focus []string, procs int) (parallel [][]string, serial []string) {
	procs = max(procs, 1)
	n := 0
	for _, f := range focus {
		if slices.ContainsFunc(serialMarks, func(m string) bool { return strings.Contains(f, m) }) {
			serial = append(serial, f)
			continue
		}
		if len(parallel) < procs {
			parallel = append(parallel, nil)
		}
		parallel[n%procs] = append(parallel[n%procs], f)
		n++
	}
	return parallel, serial
}

// runBatches runs the focused tests once: at most procs processes of
// e2e.test at once for the tests that may share the cluster, then one for
// those that must run alone.
func runBatches(ctx context.Context, s controllerManager, cluster *localcluster.Cluster, e2e string, focus []string, procs int, dir string, run int, seed int64, suiteTimeout time.Duration) ([]testOutcome, error) {
	parallel, serial := splitForProcs(focus, procs)
	var (
		mu   sync.Mutex
		out  []testOutcome
		errs []error
		wg   sync.WaitGroup
	)
	collect := func(got []testOutcome, err error) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for i, batch := range parallel {
		wg.Go(func() {
			collect(runE2E(ctx, s, cluster, e2e, batch, dir, fmt.Sprintf("%d-%d", run, i), seed, suiteTimeout))
		})
	}
	wg.Wait()
	if len(serial) > 0 {
		collect(runE2E(ctx, s, cluster, e2e, serial, dir, fmt.Sprintf("%d-serial", run), seed, suiteTimeout))
	}
	return out, errors.Join(errs...)
}

// runE2E runs e2e.test once against cluster.
func runE2E(ctx context.Context, s controllerManager, cluster *localcluster.Cluster, e2e string, focus []string, dir string, run string, seed int64, suiteTimeout time.Duration) ([]testOutcome, error) {
	report := filepath.Join(dir, fmt.Sprintf("junit-%s.xml", run))
	reportDir := filepath.Join(dir, "report-"+run)
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the e2e report folder: %w", err)
	}
	args := []string{"--kubeconfig=" + cluster.AdminKubeconfig, "--provider=local", "--ginkgo.junit-report=" + report,
		"--ginkgo.no-color", "--ginkgo.timeout=" + suiteTimeout.String(), "--report-dir=" + reportDir, fmt.Sprintf("--ginkgo.seed=%d", seed)}
	for _, f := range focus {
		args = append(args, "--ginkgo.focus="+f)
	}
	logPath := filepath.Join(dir, fmt.Sprintf("e2e-%s.log", run))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the e2e log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, e2e, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	fmt.Printf("%s: running %s (log %s)\n", s.name, filepath.Base(e2e), logPath)
	runErr := cmd.Run()
	out, err := readJUnit(report)
	if err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("e2e.test: %w (see %s)", runErr, logPath)
		}
		return nil, err
	}
	return out, nil
}

func failed(out []testOutcome) bool {
	for _, o := range out {
		if failing(o.status) {
			return true
		}
	}
	return false
}

// waitFleetRunning waits until every replica has joined and together they
// run every partition.
func waitFleetRunning(ctx context.Context, cluster *localcluster.Cluster, replicas int) error {
	client, err := cluster.Client()
	if err != nil {
		return err
	}
	var why string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		settled, reason, err := localcluster.FleetSettled(ctx, client, replicas)
		why = reason
		if err != nil {
			why = err.Error()
		}
		return settled, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the fleet: %s: %w", why, err)
	}
	return nil
}
