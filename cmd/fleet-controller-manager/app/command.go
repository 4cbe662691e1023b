// Package app is the fleet-controller-manager command: kube-controller-
// manager's own options (every KCM flag means the same here) with leader
// election replaced by fleet membership, and the wiring of membership, shard,
// informers and controllers. It holds no logic of its own.
package app

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	restclient "k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// leaderMigrationFlags are KCM's; fleet membership replaces leader migration,
// so they are accepted (deployments that set them keep working) and
// ignored. The --leader-elect* flags keep their meaning: they name
// kube-controller-manager's leader Lease, which the fleet holds so that no
// KCM runs beside it.
var leaderMigrationFlags = []string{"enable-leader-migration", "leader-migration-config"}

const longHelp = `fleet-controller-manager runs kube-controller-manager's controllers on every
replica at once: replicas register with Leases, a consistent-hash ring splits the
controllers and the namespaces of the per-namespace controllers between them,
and no piece ever runs on two replicas. It takes kube-controller-manager's flags.
The fleet holds kube-controller-manager's leader Lease (--leader-elect-resource-*)
for as long as any replica may run a controller, so a kube-controller-manager
started beside it stays a standby; the fleet's own Leases are set by the fleet
flags.`

// NewCommand builds the fleet-controller-manager command.
func NewCommand() *cobra.Command {
	return NewCommandWithRunner(ControllersRunner)
}

// NewCommandWithRunner builds the command with newRunner running the
// pieces: a test's own main runs recording pieces through it.
func NewCommandWithRunner(newRunner RunnerBuilder) *cobra.Command {
	kcm, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		// Only fails on a broken build (default config conversion).
		panic(fmt.Sprintf("kube-controller-manager options: %v", err))
	}
	fleet := NewFleetOptions()
	fleet.defaultQPS = kcm.Generic.ClientConnection.QPS
	var showVersion bool
	cmd := &cobra.Command{
		Use:          "fleet-controller-manager",
		Short:        "Runs Kubernetes' built-in controllers sharded across an active-active fleet",
		Long:         longHelp,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// As KCM: it watches deprecated APIs on purpose.
			restclient.SetDefaultWarningHandler(restclient.NoWarnings{})
			return kcm.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				fmt.Fprintln(cmd.OutOrStdout(), versionString())
				return nil
			}
			if err := logsapi.ValidateAndApply(kcm.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			if err := fleet.Complete(); err != nil {
				return err
			}
			if err := fleet.Validate(); err != nil {
				return fmt.Errorf("invalid fleet flags: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return run(ctx, kcm, fleet, newRunner)
		},
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	named := kcm.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	kcm.ParsedFlags = &named
	global := named.FlagSet("global")
	global.BoolVar(&showVersion, "version", false, "Print the version and the Kubernetes version embedded, then exit.")
	globalflag.AddGlobalFlags(global, cmd.Name(), logs.SkipLoggingConfigurationFlags())
	fleet.AddFlags(named.FlagSet("fleet"))
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	for _, name := range leaderMigrationFlags {
		if fs.Lookup(name) != nil {
			_ = fs.MarkDeprecated(name, "ignored: fleet membership replaces leader migration (see --fleet-name)")
		}
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, named, cols)
	cmd.AddCommand(newStatusCommand())
	return cmd
}
