package controllers

import (
	"errors"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// withoutReregistrationErrors drops the errors logged when a controller
// registers its metrics a second time in one process. KCM builds each
// controller once; a replica builds a piece's controllers every time the
// piece comes back, and some of them (replicaset) register their metrics
// in their constructor without a sync.Once. The metrics stay registered
// and keep counting; only the log line is wrong.
func withoutReregistrationErrors(logger logr.Logger) logr.Logger {
	return logr.New(reregistrationFilter{logger.GetSink()})
}

type reregistrationFilter struct{ logr.LogSink }

func (f reregistrationFilter) Error(err error, msg string, keysAndValues ...any) {
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		return
	}
	f.LogSink.Error(err, msg, keysAndValues...)
}

func (f reregistrationFilter) WithValues(keysAndValues ...any) logr.LogSink {
	return reregistrationFilter{f.LogSink.WithValues(keysAndValues...)}
}

func (f reregistrationFilter) WithName(name string) logr.LogSink {
	return reregistrationFilter{f.LogSink.WithName(name)}
}

// WithCallDepth keeps klog's file:line pointing at the caller.
func (f reregistrationFilter) WithCallDepth(depth int) logr.LogSink {
	if s, ok := f.LogSink.(logr.CallDepthLogSink); ok {
		return reregistrationFilter{s.WithCallDepth(depth + 1)}
	}
	return f
}
