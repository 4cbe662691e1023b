package informers

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A gain that lists nothing must still hand its controllers a cache at
// least as new as the server after the gain: the trunk carrying a
// namespace held everywhere may be behind (its watch waiting to resume,
// told 410 Gone, or stalled) while the partition's previous owner wrote,
// and a Job controller seeing no Pod for a Job whose Pod ran runs it
// again. Upstream's read-your-writes check
// (pkg/controller/util/consistency) knows only its own writes.

// catchUpRelistAfter is how long a gain waits for a source behind the
// server before making it list again: a watch kube-apiserver closed
// resumes within a few seconds, one stalled may not resume for long.
const catchUpRelistAfter = 5 * time.Second

// pollFast returns once done says so, asking at once and then every 20 ms,
// or ctx's error if it ends first.
func pollFast(ctx context.Context, done func() bool) error {
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return done(), nil })
}

// catchUp returns once the informer holds namespaces at least as they are
// on the server now. It lists them as a feeder does and waits for the
// store rather than hand the list over, as their source delivers the same
// objects in order; one still behind after catchUpRelistAfter relists.
func (lw *ownedListWatch) catchUp(ctx context.Context, namespaces []string, synced cache.InformerSynced) error {
	t, err := lw.target()
	if err != nil {
		return err
	}
	if err := pollFast(ctx, synced); err != nil {
		return fmt.Errorf("waiting for the %s informer's first list: %w", t.resource, err)
	}
	items, versions, err := lw.listNamespaces(ctx, t, namespaces)
	if err != nil {
		return fmt.Errorf("reading the %s of %d namespaces held already: %w", t.resource, len(namespaces), err)
	}
	listed := map[string][]keyVersion{}
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			continue
		}
		listed[m.GetNamespace()] = append(listed[m.GetNamespace()], keyVersion{key: m.GetNamespace() + "/" + m.GetName(), version: m.GetResourceVersion()})
	}
	logger := klog.FromContext(ctx).WithValues("resource", t.resource)
	start := time.Now()
	behind := slices.Clone(namespaces)
	lw.noteBehind(namespaces, 1)
	defer func() { lw.noteBehind(behind, -1) }()
	relisted := false
	err = pollFast(ctx, func() bool {
		behind = slices.DeleteFunc(behind, func(ns string) bool {
			if !lw.caughtUp(ns, listed[ns], versions[ns]) {
				return false
			}
			lw.noteBehind([]string{ns}, -1)
			return true
		})
		// A source waiting to resume a closed watch resumes now: its
		// watch delivers what the server has in order, where a list
		// would fold it (a ConfigMap created and deleted meanwhile).
		lw.wakeCarrier(behind)
		if len(behind) > 0 && !relisted && time.Since(start) >= catchUpRelistAfter {
			relisted = true
			catchUpRelists.WithLabelValues(t.resource).Inc()
			logger.Info("The owned cache is still behind the server for namespaces gained; its source lists them again", "behind", len(behind), "waited", time.Since(start).Round(time.Millisecond))
			lw.relistCarrier(behind)
		}
		return len(behind) == 0
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s informer to catch up with the server in %d namespaces: %w", t.resource, len(behind), err)
	}
	if waited := time.Since(start); waited >= time.Second || relisted {
		logger.V(2).Info("The owned cache caught up with the server for namespaces gained", "namespaces", len(namespaces), "waited", waited.Round(time.Millisecond))
	}
	catchUpWaits.WithLabelValues(t.resource).Observe(time.Since(start).Seconds())
	return nil
}

// caughtUp says whether the informer holds ns at least as a list read at
// version did (listed): each listed object at its version or newer, or
// absent with its deletion sent since (ns's source delivered past
// version), and no object the list lacks older than version.
func (lw *ownedListWatch) caughtUp(ns string, listed []keyVersion, version string) bool {
	lw.sendMu.Lock()
	lw.mu.Lock()
	passed, gone := lw.deliveredPast(ns, version)
	sent := map[string]bool{}
	for _, kv := range listed {
		_, name, _ := cache.SplitMetaNamespaceKey(kv.key)
		if _, ok := lw.ledger[ns][name]; ok {
			sent[kv.key] = true
		}
	}
	lw.mu.Unlock()
	lw.sendMu.Unlock()
	if gone {
		return true
	}
	indexer := lw.indexer()
	inList := make(map[string]bool, len(listed))
	for _, kv := range listed {
		inList[kv.key] = true
		obj, exists, err := indexer.GetByKey(kv.key)
		if err != nil {
			return false
		}
		if exists {
			m, err := meta.Accessor(obj)
			if err != nil || newerVersion(kv.version, m.GetResourceVersion()) {
				return false
			}
			continue
		}
		if !passed || sent[kv.key] {
			// Never delivered, or delivered and not stored yet.
			return false
		}
	}
	held, err := indexer.ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return false
	}
	for _, obj := range held {
		m, err := meta.Accessor(obj)
		if err != nil {
			return false
		}
		if !inList[ns+"/"+m.GetName()] && !newerVersion(m.GetResourceVersion(), version) {
			// Deleted before the list, and the deletion not stored yet.
			return false
		}
	}
	return true
}

// deliveredPast says whether the trunk carrying ns, not joining it, has
// delivered past version. A kept or leaving partition's namespace no
// source carries has had no event since the trunk's stream began, so it
// counts as carried. One neither loaded nor unclaimed (gone) was missing
// from the read that ended its partition's leaving: deleted with its
// objects (created again, it joins through a list). Called with sendMu
// and mu held.
func (lw *ownedListWatch) deliveredPast(ns, version string) (passed, gone bool) {
	unclaimed := lw.unclaimed(ns)
	if !lw.loaded[ns] && !unclaimed {
		return false, true
	}
	if t := lw.trunk(); t != nil && t.version != "" && (t.has(ns) || unclaimed) && t.joining[ns] == nil {
		passed = !newerVersion(version, t.delivered(ns))
	}
	return passed, false
}

// unclaimed says whether ns is no source's yet but the trunk's to take at
// its first event: its partition is kept or leaving. Called with mu held.
func (lw *ownedListWatch) unclaimed(ns string) bool {
	phase, ok := lw.phaseOf(ns)
	return !lw.loaded[ns] && ok && phase != partitionNaming
}

// noteBehind counts a catch-up waiting for namespaces (delta 1) or done
// (-1), for Waiting.
func (lw *ownedListWatch) noteBehind(namespaces []string, delta int) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for _, ns := range namespaces {
		if lw.behind[ns] += delta; lw.behind[ns] <= 0 {
			delete(lw.behind, ns)
		}
	}
}

// wakeCarrier cuts short the trunk's wait after a watch closed early,
// if it carries one of namespaces (sleep).
func (lw *ownedListWatch) wakeCarrier(namespaces []string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if t := lw.carrier(namespaces); t != nil {
		select {
		case t.wakeChan() <- struct{}{}:
		default:
		}
	}
}

// relistCarrier makes the trunk, if it carries one of namespaces, list
// again now rather than when its watch resumes.
func (lw *ownedListWatch) relistCarrier(namespaces []string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if t := lw.carrier(namespaces); t != nil {
		t.version = ""
		t.supersedeWatch()
	}
}

// carrier is the trunk if it has listed and carries one of namespaces
// (or will take one at its first event), else nil. Called with mu held.
func (lw *ownedListWatch) carrier(namespaces []string) *source {
	t := lw.trunk()
	if t == nil || t.version == "" || !slices.ContainsFunc(namespaces, t.has) && !slices.ContainsFunc(namespaces, lw.unclaimed) {
		return nil
	}
	return t
}
