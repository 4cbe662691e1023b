package informers

import (
	"context"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// HeldReporter hears which namespaces the cache holds (package doc:
// held); a reader acting on a namespace only while held misses no event.
type HeldReporter interface {
	// Held: namespaces now held.
	Held(namespaces []string) int
	// Dropped: namespaces no longer held (their partition unloaded).
	Dropped(namespaces []string)
}

// heldPoll paces a join's looks for its namespaces' first lists, which the
// controllers' writes wait for: a quiet namespace's list takes a few ms, so
// looks start 1 ms apart and slow to 5 ms, sparing the informers' locks.
var heldPoll = wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: 5 * time.Millisecond, Steps: math.MaxInt32}

// ReportTo makes the cache report to r which namespaces it holds, from
// now on. Set it before the first Load or Include.
func (o *OwnedCache) ReportTo(r HeldReporter) {
	o.reportMu.Lock()
	defer o.reportMu.Unlock()
	o.reporter = r
}

// join loads the namespaces created in loaded partitions (and, for the
// informers held everywhere, in any), then reports the former held once
// every informer holds their first list.
func (o *OwnedCache) join() {
	o.mu.Lock()
	var namespaces []string
	born := map[string]string{}
	for _, ns := range o.created {
		// A gain still reading its partition's namespaces loads it.
		if p := o.config.PartitionOf(ns); o.partitions[p] && o.naming[p] == 0 && !o.held[ns] {
			namespaces = append(namespaces, ns)
			if v := o.born[ns]; v != "" {
				born[ns] = v
			}
		}
	}
	for _, i := range o.informers {
		// A kind kept by partition has kept it from its first event.
		i.lw.load(namespaces, true, born)
		if i.everywhere > 0 {
			i.lw.load(o.created, false, nil)
		}
	}
	lws := o.listWatches()
	o.created, o.born = nil, map[string]string{}
	stop := o.stop
	o.mu.Unlock()
	if len(namespaces) == 0 {
		return
	}
	ownedNamespaces.Add(float64(len(namespaces)))
	ctx := wait.ContextForChannel(stop)
	start := time.Now()
	waitCtx, cancelWait := context.WithTimeout(ctx, heldWaitMax)
	defer cancelWait()
	err := heldPoll.DelayFunc().Until(waitCtx, true, false, func(context.Context) (bool, error) {
		return allHold(lws, namespaces, true), nil
	})
	if ctx.Err() != nil {
		return // the cache stops
	}
	if err != nil {
		// Shown unheld rather than never: a namespace the controllers
		// never see is never served.
		namespacesHeldLate.Add(float64(len(namespaces)))
		o.config.Logger.Error(err, "Namespaces joining the owned cache were not held in time; shown to the controllers anyway", "namespaces", namespaces, "waiting", notLoadedInto(lws, namespaces), "after", heldWaitMax)
	}
	held := o.markHeld(namespaces)
	o.config.Logger.V(4).Info("Namespaces joined the owned cache", "namespaces", held, "took", time.Since(start).Round(time.Millisecond))
}

// heldWaitMax bounds a join's wait (a failing list is retried meanwhile).
const heldWaitMax = time.Minute

// notLoadedInto names the resources of lws not holding namespaces' first list.
func notLoadedInto(lws []*ownedListWatch, namespaces []string) []string {
	var out []string
	for _, lw := range lws {
		if lw.loadedInto(namespaces) {
			continue
		}
		if t, err := lw.target(); err == nil {
			out = append(out, t.resource)
		}
	}
	return out
}

// markHeld records namespaces held whose partitions are still loaded
// and reports those not held before.
func (o *OwnedCache) markHeld(namespaces []string) []string {
	o.reportMu.Lock()
	defer o.reportMu.Unlock()
	o.mu.Lock()
	var added []string
	for _, ns := range namespaces {
		if o.partitions[o.config.PartitionOf(ns)] && !o.held[ns] {
			o.held[ns] = true
			added = append(added, ns)
		}
	}
	o.mu.Unlock()
	if o.reporter != nil && len(added) > 0 {
		o.reporter.Held(added)
	}
	return added
}

// allHold says whether every one of lws holds the first list of
// namespaces and, with ready, can show them (ownedListWatch.ready).
func allHold(lws []*ownedListWatch, namespaces []string, ready bool) bool {
	for _, lw := range lws {
		if !lw.loadedInto(namespaces) || ready && slices.ContainsFunc(namespaces, func(ns string) bool { return !lw.ready(ns) }) {
			return false
		}
	}
	return true
}
