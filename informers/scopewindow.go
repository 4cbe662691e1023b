package informers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Sorting the events a handler still has queued when the scope reveals
// or hides namespaces.
//
// The informer applies a change to its store first and queues the
// notification for each handler after; a handler's events run behind
// the store. When the scope reveals namespaces (Gain, Held) it reads the
// store, so a change already in the store can still be queued for the
// handler: a deletion whose object the read could not deliver, or an
// update older than the version it delivered. When it hides namespaces
// (Lose) it reads the store too: a deletion still queued is of an object
// the handler knows but the read no longer finds, and the scope's filter
// would drop it. Upstream informers never tell a handler of a deletion
// of an object it did not know, nor keep one it was told of; a scope
// window keeps that promise across a reveal or hide, at the price of
// the keys of the namespaces it covers, for as long as it lasts.

// scopeWindowLength is how long a window sorts a handler's events after
// the scope reveals or hides namespaces. The events it must sort were
// queued before the scope read the store: a handler's queue behind its
// store is as long as its handler takes to enqueue what is queued, far
// below this.
const scopeWindowLength = 10 * time.Second

// scopeWindow is what one handler was told of the namespaces one reveal
// or hide covers, while the events queued before it may still arrive.
type scopeWindow struct {
	// hide: the window follows a Lose; otherwise a Gain or Held.
	hide   bool
	until  time.Time
	covers func(namespace string) bool
	// keys, of a reveal: the objects the handler knows in the covered
	// namespaces and their resourceVersions, from the scope's delivery
	// and the events since. Of a hide: the objects the handler was not
	// told of or was told are gone (the scope's deletions, additions
	// that arrived hidden).
	keys map[string]string
}

// openWindow starts a window on h; the caller holds h.mu.
func (h *scopedHandler) openWindow(hide bool, covers func(string) bool, now time.Time) *scopeWindow {
	h.pruneWindows(now)
	w := &scopeWindow{hide: hide, until: now.Add(scopeWindowLength), covers: covers, keys: map[string]string{}}
	h.windows = append(h.windows, w)
	return w
}

// pruneWindows drops the windows that ended; the caller holds h.mu.
func (h *scopedHandler) pruneWindows(now time.Time) {
	kept := h.windows[:0]
	for _, w := range h.windows {
		if now.Before(w.until) {
			kept = append(kept, w)
		}
	}
	clear(h.windows[len(kept):])
	h.windows = kept
}

// windowOf is the newest open window covering namespace ns, or nil; the
// caller holds h.mu.
func (h *scopedHandler) windowOf(ns string) *scopeWindow {
	if len(h.windows) == 0 {
		return nil
	}
	h.pruneWindows(time.Now())
	for i := len(h.windows) - 1; i >= 0; i-- {
		if h.windows[i].covers(ns) {
			return h.windows[i]
		}
	}
	return nil
}

// scopeEvent is one notification as a window sorts it.
type scopeEvent int

const (
	eventAdd scopeEvent = iota
	eventUpdate
	eventDelete
)

// pass says whether an event of obj (key in namespace ns, visible now or
// not) reaches the handler, and records it in the window covering ns;
// the caller holds h.mu.
func (h *scopedHandler) pass(e scopeEvent, obj any, visible bool) bool {
	if len(h.windows) == 0 {
		// Every event of every handler passes here: without a window it
		// costs no key.
		return visible
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return visible
	}
	w := h.windowOf(namespaceOfKey(key, h.byName))
	switch {
	case w == nil:
		return visible
	case w.hide && visible, !w.hide && !visible:
		// Hidden since a reveal, or shown since a hide: the newer change
		// opened a window of its own where it mattered.
		return visible
	case w.hide:
		return w.passHidden(e, key, h.revealBefore(w, namespaceOfKey(key, h.byName)))
	default:
		return w.passRevealed(e, key, obj)
	}
}

// passHidden: the namespace was hidden by the window's Lose. An addition
// arriving now was never told; a deletion reaches the handler unless
// the object is one it was not told of (it knew the object, and the
// scope's read found it deleted already). revealed, when the namespace
// was revealed by a window still open before the Lose, says what the
// handler knew then: a deletion queued from before that reveal, of an
// object the reveal's read found deleted already, was never told and is
// not now.
func (w *scopeWindow) passHidden(e scopeEvent, key string, revealed *scopeWindow) bool {
	switch e {
	case eventAdd:
		w.keys[key] = ""
		return false
	case eventDelete:
		if _, untold := w.keys[key]; untold {
			delete(w.keys, key)
			return false
		}
		if revealed != nil {
			if _, knew := revealed.keys[key]; !knew {
				return false
			}
		}
		return true
	}
	return false
}

// revealBefore is the newest open reveal window older than hide that
// covers namespace ns, or nil; the caller holds h.mu.
func (h *scopedHandler) revealBefore(hide *scopeWindow, ns string) *scopeWindow {
	older := false
	for i := len(h.windows) - 1; i >= 0; i-- {
		w := h.windows[i]
		if w == hide {
			older = true
			continue
		}
		if older && w.covers(ns) {
			if w.hide {
				return nil // hidden before that reveal: the older hide's keys decide
			}
			return w
		}
	}
	return nil
}

// passRevealed: the namespace was revealed by the window's Gain or Held.
// An event older than what the handler knows was queued before the
// scope's read, which delivered newer; an update or deletion of an
// object the handler does not know is of one the read found deleted.
func (w *scopeWindow) passRevealed(e scopeEvent, key string, obj any) bool {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// A relist's: the handler may not know it (as from a plain
		// informer's relist), and must forget it if it does.
		delete(w.keys, key)
		return true
	}
	version := versionOf(obj)
	known, knows := w.keys[key]
	switch e {
	case eventAdd, eventUpdate:
		if e == eventUpdate && !knows || knows && older(version, known) {
			return false
		}
		w.keys[key] = version
		return true
	default:
		// Not ordered by version: the owned cache's deletions of objects
		// a relist no longer has carry the store's copy, which may be
		// older than an update sent before them. One that ended an
		// earlier object of the same name is followed by that object's
		// queued addition.
		if !knows {
			return false
		}
		delete(w.keys, key)
		return true
	}
}

// older says whether version a is not newer than b; versions that
// cannot be ordered (a client that sets none) count as newer.
func older(a, b string) bool {
	return a != "" && b != "" && !newerVersion(a, b)
}

// versionOf is obj's resourceVersion, or "" when it has none.
func versionOf(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

// deliver tells h of obj as the window's change does, an addition (not
// one older than the handler knows) or a deletion with unknown final
// state, and records it; the caller holds h.mu.
func (w *scopeWindow) deliver(h *scopedHandler, key string, obj any) bool {
	if w.hide {
		w.keys[key] = ""
		h.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: obj})
		return true
	}
	version := versionOf(obj)
	if known, knows := w.keys[key]; knows && older(version, known) {
		return false
	}
	w.keys[key] = version
	h.handler.OnAdd(obj, false)
	return true
}
