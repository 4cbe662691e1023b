// Command fleet-recording-replica is fleet-controller-manager with
// recording pieces (package recordingpieces) in place of controllers: the
// same flags, membership, handover and serving, so that the handover tests
// prove from the records that no piece ran on two replicas at once. It is
// a test binary; the product holds none of it.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	// As the product: the same log formats and metrics.
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/fleet-controller-manager/fleet-controller-manager/cmd/fleet-controller-manager/app"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/recordingpieces"
)

func main() {
	var recordFile string
	singletons := []string{"garbagecollector", "namespace", "nodelifecycle", "podgc"}
	cmd := app.NewCommandWithRunner(func(_ context.Context, env app.RunnerEnv) (app.Pieces, error) {
		recorder, err := recordingpieces.NewRecorder(recordFile, env.Fleet.Identity, env.Member.Incarnation(), env.Member)
		if err != nil {
			return app.Pieces{}, err
		}
		return app.Pieces{Runner: recorder, Pieces: shard.AllPieces(env.Fleet.Ring.Partitions, singletons)}, nil
	})
	cmd.Use = "fleet-recording-replica"
	cmd.Flags().StringVar(&recordFile, "record-file", "", "File the pieces append their records to (required).")
	cmd.Flags().StringSliceVar(&singletons, "singletons", singletons, "Names of the singleton pieces.")
	os.Exit(cli.Run(cmd))
}
