package controllers

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
)

func TestWithoutReregistrationErrors(t *testing.T) {
	var lines []string
	logger := withoutReregistrationErrors(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	already := prometheus.AlreadyRegisteredError{}
	for _, tc := range []struct {
		err  error
		kept bool
	}{
		{already, false},
		{fmt.Errorf("registering: %w", already), false},
		{errors.New("something else"), true},
	} {
		lines = nil
		logger.WithName("replicaset").WithValues("k", "v").Error(tc.err, "unable to register metrics")
		if got := len(lines) == 1; got != tc.kept {
			t.Errorf("error %v: logged %v, want %v", tc.err, got, tc.kept)
		}
	}
	lines = nil
	logger.Info("other lines pass")
	if len(lines) != 1 {
		t.Error("info lines must pass")
	}
}
