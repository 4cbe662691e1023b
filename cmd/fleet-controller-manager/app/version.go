package app

import (
	"fmt"

	"k8s.io/component-base/version"
)

// fleetVersion is stamped by the Makefile (-ldflags -X).
var fleetVersion = "v0.0.0-dev"

// versionString names this build and the Kubernetes it embeds.
func versionString() string {
	return fmt.Sprintf("fleet-controller-manager %s (Kubernetes %s)", fleetVersion, version.Get().GitVersion)
}
