package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	opts := localcluster.Options{BinDir: bin, Scheduler: true, KwokNodes: 3, KubeControllerManager: s.replicas == 0}
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
		if _, _, err := cluster.StartFleetReplica(ctx, filepath.Join(bin, "fleet-controller-manager"), fmt.Sprintf("fcm-%d", i)); err != nil {
			return nil, err
		}
	}
	if s.replicas > 0 {
		if err := waitFleetRunning(ctx, cluster, s.replicas); err != nil {
			return nil, err
		}
	}
	var out []testOutcome
	passed := 0
	for i := range repeat {
		out, err = runE2E(ctx, s, cluster, e2e, focus, dir, i, seed, o.suiteTimeout)
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

// runE2E runs e2e.test once against cluster.
func runE2E(ctx context.Context, s controllerManager, cluster *localcluster.Cluster, e2e string, focus []string, dir string, run int, seed int64, suiteTimeout time.Duration) ([]testOutcome, error) {
	report := filepath.Join(dir, fmt.Sprintf("junit-%d.xml", run))
	args := []string{"--kubeconfig=" + cluster.AdminKubeconfig, "--provider=local", "--ginkgo.junit-report=" + report,
		"--ginkgo.no-color", "--ginkgo.timeout=" + suiteTimeout.String(), "--report-dir=" + dir, fmt.Sprintf("--ginkgo.seed=%d", seed)}
	for _, f := range focus {
		args = append(args, "--ginkgo.focus="+f)
	}
	logPath := filepath.Join(dir, fmt.Sprintf("e2e-%d.log", run))
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
		if o.status == "failed" {
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
