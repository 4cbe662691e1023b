// Command fleet-controller-manager runs Kubernetes' built-in controllers as
// an active-active fleet: see package app.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as kube-controller-manager

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as kube-controller-manager
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics (rest_client_*, reflector, workqueue), as kube-controller-manager
	_ "k8s.io/component-base/metrics/prometheus/version"  // kubernetes_build_info, as kube-controller-manager

	"github.com/fleet-controller-manager/fleet-controller-manager/cmd/fleet-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
