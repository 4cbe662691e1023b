// Package app is the fleet-controller-manager command: flags, validation and
// wiring of membership, shard and controllers. It holds no logic of its own.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// NewCommand builds the fleet-controller-manager command.
func NewCommand() *cobra.Command {
	opts := NewFleetOptions()
	var showVersion bool
	cmd := &cobra.Command{
		Use:          "fleet-controller-manager",
		Short:        "Runs Kubernetes' built-in controllers sharded across an active-active fleet",
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				fmt.Fprintln(cmd.OutOrStdout(), versionString())
				return nil
			}
			if err := opts.Complete(); err != nil {
				return err
			}
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return run(ctx, opts)
		},
	}
	cmd.Flags().BoolVar(&showVersion, "version", false, "Print the version and the Kubernetes version embedded, then exit.")
	cmd.Flags().StringVar(&opts.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: in-cluster configuration).")
	opts.AddFlags(cmd.Flags())
	return cmd
}

// membershipQPS keeps Lease renewals off the controllers' rate limiters: a
// replica whose controllers are busy must still renew on time.
const (
	membershipQPS   = 20
	membershipBurst = 40
)

func run(ctx context.Context, opts *FleetOptions) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading client configuration: %w", err)
	}
	restConfig.QPS, restConfig.Burst = membershipQPS, membershipBurst
	restConfig.UserAgent = "fleet-controller-manager/" + opts.Identity + "/membership"
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("building membership client: %w", err)
	}
	member, err := membership.New(membership.Config{
		Client: client, Namespace: opts.Namespace, Fleet: opts.Name, Identity: opts.Identity,
		LeaseDuration: opts.LeaseDuration.D(), RenewDeadline: opts.RenewDeadline.D(), RetryPeriod: opts.RetryPeriod.D(),
	})
	if err != nil {
		return err
	}
	if !opts.DummyPieces {
		return errors.New("running controllers is not wired yet; only --dummy-pieces works")
	}
	runner, err := newDummyRunner(opts.DummyRecordFile, opts.Identity, member.Incarnation())
	if err != nil {
		return err
	}
	manager, err := shard.NewManager(member, runner, opts.Ring, shard.AllPieces(opts.Ring.Partitions, opts.DummySingletons))
	if err != nil {
		return err
	}
	klog.InfoS("Starting", "version", versionString(), "identity", opts.Identity, "fleet", opts.Name, "namespace", opts.Namespace)

	// Membership outlives the manager: leaving needs the Lease client.
	memberCtx, cancelMember := context.WithCancel(context.Background())
	defer cancelMember()
	memberErr := make(chan error, 1)
	go func() { memberErr <- member.Run(memberCtx) }()
	managerCtx, cancelManager := context.WithCancel(ctx)
	defer cancelManager()
	managerErr := make(chan error, 1)
	go func() { managerErr <- manager.Run(managerCtx) }()
	select {
	case err := <-managerErr:
		return err
	case err := <-memberErr:
		// Membership ended on its own: stop every piece before exiting.
		klog.ErrorS(err, "Membership ended; stopping every piece")
		cancelManager()
		<-managerErr
		return fmt.Errorf("membership: %w", err)
	}
}
