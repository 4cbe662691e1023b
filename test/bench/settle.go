package main

// Waiting, after the workloads, for the writes they caused to end, so
// that every system's CPU is counted over the same work.

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Writes after the workloads' last condition held: KCM's one event sink
// sends its Events one at a time, so in workload (a) at raised limits
// most of its 1,100 Event creates reached kube-apiserver after every
// Deployment was available (median 0.7 s, last 2.7 s after), while a
// fleet's sinks, one per replica, had sent theirs by then (audit log,
// docs/benchmarks/selected-watch). Read at the condition, the apiserver's
// CPU left out most of KCM's Events and none of the fleet's.
const (
	// settleQuiet: no write but a Lease's for this long ends the wait.
	settleQuiet = 2 * time.Second
	// settleMax bounds the wait for a system that never stops writing.
	settleMax = 30 * time.Second
)

// settleWrites waits until kube-apiserver has served no create, update,
// patch or delete of anything but Leases (which the fleet renews for
// ever) for settleQuiet, at most settleMax, and returns how long it
// waited.
func (b *bench) settleWrites(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	last, quietSince := -1.0, start
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, settleMax, true, func(context.Context) (bool, error) {
		n, err := b.nonLeaseWrites()
		if err != nil {
			return false, err
		}
		if n != last {
			last, quietSince = n, time.Now()
		}
		return time.Since(quietSince) >= settleQuiet, nil
	})
	switch {
	case err == nil:
	case ctx.Err() == nil && wait.Interrupted(err):
		klog.InfoS("The writes did not end; reading the figures anyway", "after", settleMax)
	default:
		return time.Since(start), fmt.Errorf("waiting for the writes to end: %w", err)
	}
	return time.Since(start), nil
}

// nonLeaseWrites is how many writes of anything but Leases
// kube-apiserver has served (apiserver_request_total, every client).
func (b *bench) nonLeaseWrites() (float64, error) {
	return b.apiserverMetricSum("apiserver_request_total", func(line string) bool {
		switch labelValue(line, "verb") {
		case "POST", "PUT", "PATCH", "DELETE":
			return labelValue(line, "resource") != "leases"
		}
		return false
	})
}
