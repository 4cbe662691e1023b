package informers

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// LoadWait is what one informer of the owned cache has yet to do before
// the loads waiting on it return: for /debug/fleet's loading rows, a slow
// load's log line and the simulation's report of an unsettled schedule.
type LoadWait struct {
	Resource string `json:"resource"`
	// Unlisted: awaited namespaces whose first list is not handed over.
	Unlisted []string `json:"unlisted,omitempty"`
	// Unstored: awaited namespaces whose first list is not all stored.
	Unstored []string `json:"unstored,omitempty"`
	// Behind: namespaces a catch-up waits for.
	Behind []string `json:"behind,omitempty"`
	// Sources: each as trunk or feeder, its version and its namespaces.
	Sources []string `json:"sources,omitempty"`
}

// String is the wait in one line.
func (w LoadWait) String() string {
	var parts []string
	for _, f := range []struct {
		what       string
		namespaces []string
	}{{"unlisted", w.Unlisted}, {"listed, not stored", w.Unstored}, {"behind the server", w.Behind}} {
		if len(f.namespaces) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", f.what, abbreviate(f.namespaces, 5)))
		}
	}
	return fmt.Sprintf("%s: %s (sources: %s)", w.Resource, strings.Join(parts, "; "), strings.Join(w.Sources, ", "))
}

// Waiting lists, per informer with something left to do, what the loads
// in progress wait for (none: every load has what it waits for).
func (o *OwnedCache) Waiting() []LoadWait {
	o.mu.Lock()
	lws := o.listWatches()
	o.mu.Unlock()
	var out []LoadWait
	for _, lw := range lws {
		if w, ok := lw.waiting(); ok {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// listWatches is the informers' list-watches. Called with o.mu held.
func (o *OwnedCache) listWatches() []*ownedListWatch {
	lws := make([]*ownedListWatch, 0, len(o.informers))
	for _, i := range o.informers {
		lws = append(lws, i.lw)
	}
	return lws
}

// waiting is what lw's loads wait for; false if nothing.
func (lw *ownedListWatch) waiting() (LoadWait, bool) {
	t, err := lw.target()
	resource := "unresolved"
	if err == nil {
		resource = t.resource
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	w := LoadWait{Resource: resource}
	for _, ns := range slices.Sorted(maps.Keys(lw.awaited)) {
		if lw.awaited[ns] == nil {
			w.Unlisted = append(w.Unlisted, ns)
		} else {
			w.Unstored = append(w.Unstored, ns)
		}
	}
	w.Behind = slices.Sorted(maps.Keys(lw.behind))
	if len(w.Unlisted)+len(w.Unstored)+len(w.Behind) == 0 {
		return LoadWait{}, false
	}
	for s := range lw.sources {
		w.Sources = append(w.Sources, s.describe())
	}
	sort.Strings(w.Sources)
	w.Sources = append(w.Sources, fmt.Sprintf("partitions kept or naming %v", lw.partitionsDescribed()))
	return w, true
}

// describe names the source, its version and namespaces. Called with mu held.
func (s *source) describe() string {
	kind := "trunk"
	if s.feeds != nil {
		kind = "feeder"
	}
	version := s.version
	if version == "" {
		version = "listing"
	}
	out := fmt.Sprintf("%s at %s with %s", kind, version, abbreviate(s.namespaces, 3))
	if len(s.joining) > 0 {
		out += fmt.Sprintf(", %d joining", len(s.joining))
	}
	return out
}

// abbreviate names up to n of names and counts the rest.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return "[" + strings.Join(names, " ") + "]"
	}
	return fmt.Sprintf("[%s and %d more]", strings.Join(names[:n], " "), len(names)-n)
}
