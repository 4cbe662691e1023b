package controllers

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// notFoundQueues are the workqueues (by their metrics name) of the
// partition controllers whose per-object state is cleared by the "not
// found" sync of a key their delete handler queued, not in the handler
// itself (docs/controllers.md): the Job controller's expectations and
// finalizer expectations, the StatefulSet controller's consistency store,
// the disruption controller's queues, the endpoints controllers' trackers.
// A partition regained before those keys were worked off keeps that state
// as it was when the partition left (a Job's deletion expectation could
// hold its Job for five minutes).
var notFoundQueues = []string{
	"job", "job_orphan_pod", "statefulset",
	"disruption", "disruption_recheck", "stale_pod_disruption",
	"endpoint", "endpoint_slice", "endpoint_slice_mirroring",
}

// queueDrain tells whether the notFoundQueues have worked off every key
// added to them before a given time, from the workqueue metrics every
// upstream queue keeps (component-base's provider, in legacyregistry): a
// key added to a queue not already holding it counts in
// workqueue_adds_total, and is counted in workqueue_work_duration_seconds
// once a worker called Done for it, so when the Done count read first
// equals the adds read after it, nothing added by the first reading is
// queued or in a worker.
//
// A partition that comes back within minOutOfScope waits for this rather
// than the rest of the time, because a rolling restart moves partitions
// onto the next replica to restart and back within a fraction of a
// second, and each would otherwise wait seconds unserved.
type queueDrain struct {
	gatherer prometheus.Gatherer
	queues   map[string]bool
	// minInterval spaces the readings (each gathers the whole registry)
	// however many gains wait.
	minInterval time.Duration

	mu sync.Mutex
	// drainedAt: when the last reading that found nothing outstanding
	// began; checkedAt: when the last reading began.
	drainedAt, checkedAt time.Time
}

func newQueueDrain(g prometheus.Gatherer) *queueDrain {
	d := &queueDrain{gatherer: g, queues: map[string]bool{}, minInterval: 50 * time.Millisecond}
	for _, q := range notFoundQueues {
		d.queues[q] = true
	}
	return d
}

// drainedSince reports whether the queues were seen with nothing
// outstanding at a moment after t. It reads the metrics at most once per
// minInterval.
func (d *queueDrain) drainedSince(t time.Time) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drainedAt.After(t) {
		return true, nil
	}
	now := time.Now()
	if now.Sub(d.checkedAt) < d.minInterval && d.checkedAt.After(t) {
		return false, nil
	}
	d.checkedAt = now
	done, err := d.read()
	if err != nil {
		return false, err
	}
	added, err := d.read()
	if err != nil {
		return false, err
	}
	for q, n := range added {
		if n[0] != done[q][1] {
			return false, nil
		}
	}
	d.drainedAt = now
	return now.After(t), nil
}

// read returns, per queue, the adds and the Done count.
func (d *queueDrain) read() (map[string][2]uint64, error) {
	families, err := d.gatherer.Gather()
	if err != nil {
		return nil, fmt.Errorf("reading the workqueue metrics: %w", err)
	}
	out := map[string][2]uint64{}
	for _, f := range families {
		var slot int
		switch f.GetName() {
		case "workqueue_adds_total":
			slot = 0
		case "workqueue_work_duration_seconds":
			slot = 1
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			q := queueName(m)
			if !d.queues[q] {
				continue
			}
			v := out[q]
			if slot == 0 {
				v[0] = uint64(m.GetCounter().GetValue())
			} else {
				v[1] = m.GetHistogram().GetSampleCount()
			}
			out[q] = v
		}
	}
	return out, nil
}

func queueName(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "name" {
			return l.GetValue()
		}
	}
	return ""
}
