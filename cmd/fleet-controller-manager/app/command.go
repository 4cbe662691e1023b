// Package app is the fleet-controller-manager command: flags, validation and
// wiring of membership, shard and controllers. It holds no logic of its own.
package app

import (
	"fmt"

	"github.com/spf13/cobra"
)

// NewCommand builds the fleet-controller-manager command.
func NewCommand() *cobra.Command {
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
			return fmt.Errorf("not implemented yet: see --help")
		},
	}
	cmd.Flags().BoolVar(&showVersion, "version", false, "print the version and the Kubernetes version embedded, then exit")
	return cmd
}
