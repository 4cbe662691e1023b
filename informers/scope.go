package informers

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"
)

// Scope is the set of namespace partitions a replica's partition
// controllers serve now. One controller set per replica sees the replica's
// shared informers through it: handlers receive events only of objects in
// owned partitions, listers show only those, and Gain and Lose deliver the
// objects of a partition that changes hands as additions and deletions, so
// the running controllers pick them up or drop their state as a starting or
// relisting informer would make them. The other partitions' objects are
// never re-delivered and their controllers never pause.
//
// A gated scope (GateNamespaces) also hides each namespace of an owned
// partition until the owned cache reports it held (Held): a controller
// that saw a namespace before its cache held it would write into it (the
// root-CA publisher creating kube-root-ca.crt) while the cache could
// still fold that write and a deletion after it into the namespace's
// first list, and never deliver either. Held then delivers the
// namespace's objects as Gain does a partition's.
type Scope struct {
	partitionOf func(namespace string) int
	owned       []atomic.Bool

	// gainMu orders Gain, Lose, Held and Dropped, so that an object of a
	// namespace that becomes visible is delivered once: by Gain when the
	// namespace was held first, by Held when the partition was owned
	// first.
	gainMu sync.Mutex
	// gated: HasNamespace also asks held (GateNamespaces).
	gated  bool
	heldMu sync.RWMutex
	held   map[string]bool

	mu       sync.Mutex
	handlers map[*scopedHandler]struct{}
}

// NewScope makes an empty scope over partitions partitions; partitionOf
// places a namespace (it must return a value in [0, partitions)).
func NewScope(partitions int, partitionOf func(namespace string) int) *Scope {
	return &Scope{partitionOf: partitionOf, owned: make([]atomic.Bool, partitions), handlers: map[*scopedHandler]struct{}{}}
}

// GateNamespaces makes the scope show a namespace only once it has been
// reported held (Held) and not dropped since. Call it before the scope is
// used.
func (s *Scope) GateNamespaces() {
	s.gated = true
	s.held = map[string]bool{}
}

// HasNamespace says whether namespace ns is in an owned partition and, in
// a gated scope, held.
func (s *Scope) HasNamespace(ns string) bool {
	p := s.partitionOf(ns)
	return p >= 0 && p < len(s.owned) && s.owned[p].Load() && s.isHeld(ns)
}

func (s *Scope) isHeld(ns string) bool {
	if !s.gated {
		return true
	}
	s.heldMu.RLock()
	defer s.heldMu.RUnlock()
	return s.held[ns]
}

// Held records that the owned cache holds namespaces (their first list is
// in every informer and their events flow), and delivers the cached
// objects of those in owned partitions to every scoped handler as
// additions, the Namespaces among them.
func (s *Scope) Held(namespaces []string) (delivered int) {
	s.gainMu.Lock()
	defer s.gainMu.Unlock()
	visible := map[string]bool{}
	s.heldMu.RLock()
	for _, ns := range namespaces {
		if !s.held[ns] && s.Owns(s.partitionOf(ns)) {
			visible[ns] = true
		}
	}
	s.heldMu.RUnlock()
	covers := func(ns string) bool { return visible[ns] }
	return s.change(false, covers, func() {
		s.heldMu.Lock()
		defer s.heldMu.Unlock()
		for _, ns := range namespaces {
			s.held[ns] = true
		}
	})
}

// Dropped records that the owned cache no longer holds namespaces (their
// partition was unloaded): they stay hidden until held again. Their
// partition has left the scope (Lose) already.
func (s *Scope) Dropped(namespaces []string) {
	s.gainMu.Lock()
	defer s.gainMu.Unlock()
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for _, ns := range namespaces {
		delete(s.held, ns)
	}
}

// Owns says whether partition p is owned.
func (s *Scope) Owns(p int) bool { return p >= 0 && p < len(s.owned) && s.owned[p].Load() }

// Gain adds partition p and delivers the cached objects of its namespaces
// to every scoped handler as additions. The caller serializes Gain and Lose.
func (s *Scope) Gain(p int) (delivered int) {
	s.gainMu.Lock()
	defer s.gainMu.Unlock()
	covers := func(ns string) bool { return s.partitionOf(ns) == p }
	return s.change(false, covers, func() { s.owned[p].Store(true) })
}

// Lose removes partition p, so that no event of its namespaces reaches a
// handler any more and listers no longer show its objects, then delivers
// its cached objects as deletions (with unknown final state, as a
// relisting informer does for objects that vanished while it was away):
// each controller drops its per-object state (expectations, trackers), and
// keys still queued resolve to "not found". The caller serializes Gain and
// Lose.
func (s *Scope) Lose(p int) (delivered int) {
	s.gainMu.Lock()
	defer s.gainMu.Unlock()
	// The namespaces visible until now: one held later stays hidden, and
	// its handlers never knew its objects.
	visible := map[string]bool{}
	s.heldMu.RLock()
	for ns := range s.held {
		if s.partitionOf(ns) == p {
			visible[ns] = true
		}
	}
	s.heldMu.RUnlock()
	covers := func(ns string) bool { return s.partitionOf(ns) == p && (!s.gated || visible[ns]) }
	return s.change(true, covers, func() { s.owned[p].Store(false) })
}

// IgnoreLosses marks a handler Lose does not call: one that rejects
// cache.DeletedFinalStateUnknown and keeps no state of the objects Lose
// would drop. The token controller's Secret filter is one: it logs an
// error for every such deletion and drops it, and each error passes
// apimachinery's 1 ms error backoff (runtime.ErrorHandlers), so a
// replica leaving with thousands of Secrets would spend seconds on them
// before its partitions were released. The handler still hears every
// event of owned namespaces and Gain's additions.
func IgnoreLosses(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return lossIgnoringHandler{h}
}

type lossIgnoringHandler struct{ cache.ResourceEventHandler }

// change reveals (or, hide, hides) the namespaces covers selects by
// calling flip, and delivers their cached objects to every scoped
// handler as additions (deletions with unknown final state). Each
// handler first opens a window on those namespaces (scopewindow.go), so
// that what it still has queued from before the store was read is
// sorted against what the delivery told it. Each object is read from the
// store under the handler's lock: one the informer deleted meanwhile is
// skipped (its deletion reaches the handler through the informer if the
// handler knew it), one whose namespace is no longer (hide: now) in
// scope too, and no event of the informer interleaves with the call.
// Called with gainMu held.
func (s *Scope) change(hide bool, covers func(namespace string) bool, flip func()) int {
	s.mu.Lock()
	byIndexer := map[cache.Indexer][]*scopedHandler{}
	for h := range s.handlers {
		if hide && h.ignoreLosses {
			continue
		}
		byIndexer[h.indexer] = append(byIndexer[h.indexer], h)
	}
	s.mu.Unlock()
	now := time.Now()
	windows := map[*scopedHandler]*scopeWindow{}
	for _, handlers := range byIndexer {
		for _, h := range handlers {
			h.mu.Lock()
			windows[h] = h.openWindow(hide, covers, now)
			h.mu.Unlock()
		}
	}
	flip()
	var n int
	for indexer, handlers := range byIndexer {
		byName := handlers[0].byName
		keys := s.keysOf(indexer, byName, func(ns string) bool { return covers(ns) && s.isHeld(ns) })
		for _, h := range handlers {
			w := windows[h]
			for _, key := range keys {
				h.mu.Lock()
				if obj, exists, err := indexer.GetByKey(key); err == nil && exists && s.HasNamespace(namespaceOfKey(key, byName)) != hide {
					if w.deliver(h, key, obj) {
						n++
					}
				}
				h.mu.Unlock()
			}
		}
	}
	return n
}

// keysOf lists the keys of the selected namespaces' objects in indexer,
// through the namespace index where there is one.
func (s *Scope) keysOf(indexer cache.Indexer, byName bool, selected func(namespace string) bool) []string {
	var keys []string
	if _, indexed := indexer.GetIndexers()[cache.NamespaceIndex]; indexed && !byName {
		for _, ns := range indexer.ListIndexFuncValues(cache.NamespaceIndex) {
			if !selected(ns) {
				continue
			}
			nsKeys, _ := indexer.IndexKeys(cache.NamespaceIndex, ns)
			keys = append(keys, nsKeys...)
		}
		return keys
	}
	for _, key := range indexer.ListKeys() {
		if selected(namespaceOfKey(key, byName)) {
			keys = append(keys, key)
		}
	}
	return keys
}

func (s *Scope) register(h *scopedHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[h] = struct{}{}
}

func (s *Scope) unregister(h *scopedHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.handlers, h)
}

// Handlers is how many handlers the scope delivers to (tests, metrics).
func (s *Scope) Handlers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.handlers)
}

// scopedHandler passes on the informer's events of owned namespaces, one
// call at a time: Gain and Lose call the handler from another goroutine
// than the informer's, and upstream handlers expect one caller.
type scopedHandler struct {
	scope   *Scope
	handler cache.ResourceEventHandler
	indexer cache.Indexer
	// byName: the objects are Namespaces, placed by their own name.
	byName bool
	// ignoreLosses: Lose skips this handler (IgnoreLosses).
	ignoreLosses bool

	// mu serializes the calls; it guards windows.
	mu sync.Mutex
	// windows: the scope's reveals and hides whose events may still be
	// queued (scopewindow.go), oldest first.
	windows []*scopeWindow
}

func (h *scopedHandler) inScope(obj any) bool {
	if h.byName {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return err == nil && h.scope.HasNamespace(key)
	}
	return h.scope.HasNamespace(namespaceOf(obj))
}

func (h *scopedHandler) OnAdd(obj any, isInInitialList bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pass(eventAdd, obj, h.inScope(obj)) {
		h.handler.OnAdd(obj, isInInitialList)
	}
}

func (h *scopedHandler) OnUpdate(oldObj, newObj any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pass(eventUpdate, newObj, h.inScope(newObj)) {
		h.handler.OnUpdate(oldObj, newObj)
	}
}

func (h *scopedHandler) OnDelete(obj any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pass(eventDelete, obj, h.inScope(obj)) {
		h.handler.OnDelete(obj)
	}
}

// namespaceOfKey is the namespace a store key places its object in; for
// Namespaces (byName) the key is the namespace.
func namespaceOfKey(key string, byName bool) string {
	if byName {
		return key
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return ns
}
