// Command localcluster brings up the local control plane (etcd,
// kube-apiserver, and on request kube-scheduler, kwok fake nodes and upstream
// kube-controller-manager) in the foreground until interrupted. `make
// cluster` runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// state is what the command publishes about the cluster it runs, for tests
// and scripts that drive it from outside.
type state struct {
	Kubeconfig string `json:"kubeconfig"`
	URL        string `json:"url"`
	Dir        string `json:"dir"`
	Pids       []int  `json:"pids"`
}

func main() {
	var (
		kubeconfigOut = flag.String("kubeconfig-out", ".local/kubeconfig", "where to copy the admin kubeconfig")
		dir           = flag.String("dir", "", "directory for certificates, data and logs (default: a temporary one, removed on exit)")
		scheduler     = flag.Bool("scheduler", false, "start kube-scheduler")
		kwokNodes     = flag.Int("kwok-nodes", 0, "start kwok with this many fake nodes")
		kcm           = flag.Bool("kube-controller-manager", false, "start upstream kube-controller-manager")
		realNode      = flag.Bool("real-node", false, "start a real node (kubelet, containerd) beside kwok's; make node-tools builds it")
		stateFile     = flag.String("state-file", "", "write the cluster's kubeconfig path and process ids here as JSON once ready")
		replicas      = flag.Int("fleet-replicas", 0, "start this many fleet-controller-manager replicas")
		fleetBin      = flag.String("fleet-bin", "bin/fleet-controller-manager", "the fleet-controller-manager binary")
		sample        = flag.Bool("sample-workload", false, "create a sample workload in several namespaces")
		fleetArgs     = flag.String("fleet-args", "", "extra flags for every fleet replica, separated by spaces (e.g. --placement-by-weight)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "localcluster: unexpected arguments %q\n", flag.Args())
		os.Exit(1)
	}
	if *kwokNodes < 0 || *replicas < 0 {
		fmt.Fprintln(os.Stderr, "localcluster: --kwok-nodes and --fleet-replicas must not be negative")
		os.Exit(1)
	}
	if err := run(*kubeconfigOut, *dir, *stateFile, fleetOptions{replicas: *replicas, bin: *fleetBin, sample: *sample, args: strings.Fields(*fleetArgs)}, localcluster.Options{
		Scheduler: *scheduler, KwokNodes: *kwokNodes, KubeControllerManager: *kcm, RealNode: *realNode,
	}); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

type fleetOptions struct {
	replicas int
	bin      string
	sample   bool
	args     []string
}

func run(kubeconfigOut, dir, stateFile string, fleet fleetOptions, opts localcluster.Options) error {
	giveBack, err := takeForeground()
	if err != nil {
		return err
	}
	defer giveBack()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("resolving --dir: %w", err)
		}
		opts.Dir = abs
	}
	fmt.Println("Starting the local control plane (etcd, kube-apiserver" + optional(opts) + ")...")
	cluster, err := localcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		cluster.Stop()
		fmt.Println("Stopped: every process of the local cluster has exited.")
	}()

	if err := copyKubeconfig(cluster.AdminKubeconfig, kubeconfigOut); err != nil {
		return err
	}
	if fleet.replicas > 0 {
		bin, err := filepath.Abs(fleet.bin)
		if err != nil {
			return fmt.Errorf("resolving --fleet-bin: %w", err)
		}
		for i := range fleet.replicas {
			name := fmt.Sprintf("fleet-controller-manager-%d", i)
			fmt.Printf("Starting replica %s...\n", name)
			p, port, err := cluster.StartFleetReplica(ctx, bin, name, fleet.args...)
			if err != nil {
				return err
			}
			fmt.Printf("  %s: https://127.0.0.1:%d/healthz, log %s\n", name, port, p.LogPath)
		}
	}
	if fleet.sample {
		if err := sampleWorkload(ctx, cluster); err != nil {
			return err
		}
	}
	if stateFile != "" {
		st := state{Kubeconfig: cluster.AdminKubeconfig, URL: cluster.URL, Dir: cluster.Dir}
		for _, p := range cluster.Processes() {
			st.Pids = append(st.Pids, p.Pid())
		}
		data, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("encoding state: %w", err)
		}
		if err := os.WriteFile(stateFile, data, 0o644); err != nil {
			return fmt.Errorf("writing state file: %w", err)
		}
	}
	abs, _ := filepath.Abs(kubeconfigOut)
	fmt.Printf(`
The local control plane is up at %s.
Logs, certificates and data: %s

Use it with:
    export KUBECONFIG=%s
    kubectl get nodes

Press Ctrl-C to stop everything.
`, cluster.URL, cluster.Dir, abs)
	if fleet.replicas > 0 {
		go watchFleet(ctx, cluster)
	}
	<-ctx.Done()
	fmt.Println("\nStopping the local control plane...")
	return nil
}

func optional(opts localcluster.Options) string {
	s := ""
	if opts.Scheduler {
		s += ", kube-scheduler"
	}
	if opts.KwokNodes > 0 {
		s += fmt.Sprintf(", kwok with %d fake nodes", opts.KwokNodes)
	}
	if opts.RealNode {
		s += ", a real node (" + localcluster.RealNodeName + ")"
	}
	if opts.KubeControllerManager {
		s += ", kube-controller-manager"
	}
	return s
}

func copyKubeconfig(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading admin kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("creating kubeconfig dir: %w", err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
