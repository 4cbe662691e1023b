package controllers

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// A load that does not finish is never silent: the partition table
// publishes the load in progress to the replica's Lease (status), to
// /debug/fleet and /debug/fleet/cache with what the owned cache waits
// for, and to the metrics the FleetPartitionLoadStuck alert reads, and
// logs it once it has gone on for longer than a lease duration. A load
// takes milliseconds to seconds: its lists, and the store taking them.

// loadWatchInterval: how often the gauges of a load in progress move.
const loadWatchInterval = time.Second

// Loads is the load in progress, if any, with what it waits for.
func (t *partitionTable) Loads() []shard.LocalLoad {
	t.mu.Lock()
	partitions, since := append([]int(nil), t.loading...), t.loadingSince
	t.mu.Unlock()
	if len(partitions) == 0 {
		return nil
	}
	load := shard.LocalLoad{Partitions: partitions, Since: since}
	if t.owned != nil {
		for _, w := range t.owned.Waiting() {
			load.Waiting = append(load.Waiting, w.String())
		}
	}
	return []shard.LocalLoad{load}
}

// published tells publishLoading the load in progress (none: empty).
func (t *partitionTable) published() {
	if t.publishLoading == nil {
		return
	}
	t.mu.Lock()
	loading := make(map[int]time.Time, len(t.loading))
	for _, p := range t.loading {
		loading[p] = t.loadingSince
	}
	t.mu.Unlock()
	t.publishLoading(loading)
}

// watchLoad moves the gauges of the load in progress until ctx ends (the
// load returned or was cancelled), and logs it once, with what it waits
// for, when it has gone on for longer than stuckAfter.
func (t *partitionTable) watchLoad(ctx context.Context) {
	t.mu.Lock()
	partitions, since := len(t.loading), t.loadingSince
	t.mu.Unlock()
	partitionsLoading.Set(float64(partitions))
	defer func() {
		partitionsLoading.Set(0)
		partitionLoadSeconds.Set(0)
		partitionLoadsStuck.Set(0)
	}()
	ticker := time.NewTicker(loadWatchInterval)
	defer ticker.Stop()
	logged := false
	for {
		select {
		case <-ctx.Done():
			if logged {
				klog.FromContext(ctx).Info("A partition load that was stuck has ended", "took", time.Since(since).Round(time.Millisecond))
			}
			return
		case <-ticker.C:
		}
		took := time.Since(since)
		partitionLoadSeconds.Set(took.Seconds())
		if t.stuckAfter <= 0 || took <= t.stuckAfter {
			continue
		}
		partitionLoadsStuck.Set(1)
		if !logged {
			logged = true
			for _, load := range t.Loads() {
				klog.FromContext(ctx).Error(nil, "A partition load has gone on for longer than a lease duration: its controllers do not serve these partitions until it ends", "partitions", load.Partitions, "took", took.Round(time.Second), "waitingFor", load.Waiting)
			}
		}
	}
}
