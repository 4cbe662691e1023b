// Command fleet-controller-manager runs Kubernetes' built-in controllers as
// an active-active fleet: see package app.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/fleet-controller-manager/fleet-controller-manager/cmd/fleet-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
