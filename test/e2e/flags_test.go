//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlacementFlags: the built binary places by weight unless told
// otherwise, and refuses a colocated share that is not a fraction from
// 0 to 1 with an error naming the flag, before it reads a kubeconfig.
func TestPlacementFlags(t *testing.T) {
	inLane(t, laneLight)
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	for _, tc := range []struct {
		name string
		args []string
		says string
		ok   bool
	}{
		{"placement by weight is the default", []string{"--help"}, "whatever they hold. (default true)", true},
		{"the colocated share's defaults are told", []string{"--help"}, "Default: 1 placing by weight", true},
		{"a share that is not a number", []string{"--colocated-partition-share=half"}, `invalid argument "half" for "--colocated-partition-share" flag: want a fraction from 0 to 1`, false},
		{"a share above one", []string{"--colocated-partition-share=2", "--kubeconfig=/nonexistent"}, "colocated share must be between 0 and 1, got 2", false},
		{"a share below zero", []string{"--colocated-partition-share=-0.5", "--placement-by-weight=false", "--kubeconfig=/nonexistent"}, "colocated share must be between 0 and 1, got -0.5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.CommandContext(t.Context(), bin, tc.args...).CombinedOutput()
			if (err == nil) != tc.ok {
				t.Errorf("%v: exit error %v, want success %v:\n%s", tc.args, err, tc.ok, out)
			}
			if !strings.Contains(string(out), tc.says) {
				t.Errorf("%v: the output does not say %q:\n%s", tc.args, tc.says, out)
			}
		})
	}
}
