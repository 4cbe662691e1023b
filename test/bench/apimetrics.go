package main

// kube-apiserver's own figures of a run, from its /metrics: requests,
// watches, watchers it closed, events replayed to resuming watches and
// the watch events it sent.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// apiserverRequests is apiserver_request_total by verb (every client).
func (b *bench) apiserverRequests() (map[string]float64, error) {
	out := map[string]float64{}
	err := b.eachSample(func(name, line string, v float64) {
		if name == "apiserver_request_total" {
			out[labelValue(line, "verb")] += v
		}
	})
	return out, err
}

// watches is how many watches the apiserver holds open now.
func (b *bench) watches() (float64, error) {
	return b.apiserverMetricSum("apiserver_longrunning_requests", func(line string) bool { return labelValue(line, "verb") == "WATCH" })
}

// terminatedWatchers is how many watchers the apiserver's watch cache has
// closed for not keeping up (their buffer full past its time budget): each
// makes a client relist, and a relisting kwok replays pod stages.
func (b *bench) terminatedWatchers() (float64, error) {
	return b.apiserverMetricSum("apiserver_terminated_watchers_total", func(string) bool { return true })
}

// initEvents is how many events the apiserver's watch cache has replayed
// to watches starting at an older version (each watch first sends what
// happened since its version, before any new event).
func (b *bench) initEvents() (float64, error) {
	return b.apiserverMetricSum("apiserver_init_events_total", func(string) bool { return true })
}

// watchEventKinds are the resources whose watch events the report shows
// apart: the workloads' own kinds and the Leases the fleet writes.
var watchEventKinds = []string{"pods", "replicasets", "deployments", "leases"}

// watchEvents records the watch events the apiserver has sent to every
// watcher (one per event and watcher), in all, by the resources of
// watchEventKinds, and their bytes: what every client receives and
// decodes, the fleet's replicas each their own copy of every event of a
// kind they cache whole.
func (b *bench) watchEvents(figures map[string]float64) error {
	return b.eachSample(func(name, line string, v float64) {
		switch name {
		case "apiserver_watch_events_total":
			figures["watch_events"] += v
			if r := labelValue(line, "resource"); slices.Contains(watchEventKinds, r) {
				figures["watch_events_"+r] += v
			}
		case "apiserver_watch_events_sizes_sum":
			figures["watch_event_mib"] += v / (1 << 20)
		}
	})
}

// apiserverMetricSum sums the apiserver's samples of metric whose line
// match accepts.
func (b *bench) apiserverMetricSum(metric string, match func(line string) bool) (float64, error) {
	total := 0.0
	err := b.eachSample(func(name, line string, v float64) {
		if name == metric && match(line) {
			total += v
		}
	})
	return total, err
}

// eachSample reads the apiserver's /metrics and hands f every sample: its
// metric's name, the whole line (for labelValue) and its value.
func (b *bench) eachSample(f func(name, line string, v float64)) error {
	body, err := b.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.ctx)
	if err != nil {
		return fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		end := strings.IndexAny(line, "{ ")
		if end <= 0 || line[0] == '#' {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		f(line[:end], line, v)
	}
	return nil
}

func labelValue(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}
