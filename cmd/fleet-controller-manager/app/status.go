package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// newStatusCommand is `fleet-controller-manager status`: the fleet as its
// Leases show it, for an operator with kubectl access.
func newStatusCommand() *cobra.Command {
	var kubeconfig, fleetName, namespace, output, leaderNamespace, leaderName string
	var partitions int
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the fleet's members, their health, and the controllers and namespace partitions each runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output must be table or json, not %q", output)
			}
			if partitions < 0 {
				return fmt.Errorf("--partitions must be 0 (the fleet's) or more, not %d", partitions)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			status, err := readStatus(ctx, kubeconfig, namespace, fleetName, partitions, leaderNamespace, leaderName)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(status)
			}
			return status.WriteTable(cmd.OutOrStdout())
		},
	}
	// The root command's help lists KCM's flags; this one has its own.
	usage := func(c *cobra.Command) string {
		return fmt.Sprintf("Usage:\n  %s\n\nFlags:\n%s", c.UseLine(), c.LocalFlags().FlagUsages())
	}
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		_, err := fmt.Fprint(c.OutOrStderr(), usage(c))
		return err
	})
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) {
		fmt.Fprintf(c.OutOrStdout(), "%s\n\n%s", c.Short, usage(c))
	})
	defaults := NewFleetOptions()
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster).")
	fs.StringVar(&fleetName, "fleet-name", defaults.Name, "Name of the fleet.")
	fs.StringVar(&namespace, "fleet-namespace", defaults.Namespace, "Namespace of the members' Leases.")
	fs.IntVar(&partitions, "partitions", partitions, "Number of namespace partitions the fleet runs with (to list partitions no member runs). 0: what the members' Leases say.")
	fs.StringVarP(&output, "output", "o", "table", "Output format: table or json.")
	fs.StringVar(&leaderNamespace, "leader-elect-resource-namespace", "kube-system", "Namespace of kube-controller-manager's leader Lease.")
	fs.StringVar(&leaderName, "leader-elect-resource-name", "kube-controller-manager", "Name of kube-controller-manager's leader Lease (empty: do not read it).")
	return cmd
}

// readStatus reads the fleet's Leases, and KCM's leader Lease unless
// leaderName is empty, with kubeconfig's credentials.
func readStatus(ctx context.Context, kubeconfig, namespace, fleetName string, partitions int, leaderNamespace, leaderName string) (shard.FleetStatus, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return shard.FleetStatus{}, fmt.Errorf("loading kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return shard.FleetStatus{}, fmt.Errorf("client: %w", err)
	}
	store := membership.NewLeaseStore(client)
	status, err := shard.ReadFleet(ctx, store, namespace, fleetName, partitions)
	if err != nil {
		return status, err
	}
	if leaderName != "" {
		status.LeaderLease, err = shard.ReadLeaderLease(ctx, store, leaderNamespace, leaderName, namespace, fleetName)
	}
	return status, err
}
