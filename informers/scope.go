package informers

import (
	"sync"
	"sync/atomic"

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
type Scope struct {
	partitionOf func(namespace string) int
	owned       []atomic.Bool

	mu       sync.Mutex
	handlers map[*scopedHandler]struct{}
}

// NewScope makes an empty scope over partitions partitions; partitionOf
// places a namespace (it must return a value in [0, partitions)).
func NewScope(partitions int, partitionOf func(namespace string) int) *Scope {
	return &Scope{partitionOf: partitionOf, owned: make([]atomic.Bool, partitions), handlers: map[*scopedHandler]struct{}{}}
}

// HasNamespace says whether namespace ns is in an owned partition.
func (s *Scope) HasNamespace(ns string) bool {
	p := s.partitionOf(ns)
	return p >= 0 && p < len(s.owned) && s.owned[p].Load()
}

// Owns says whether partition p is owned.
func (s *Scope) Owns(p int) bool { return p >= 0 && p < len(s.owned) && s.owned[p].Load() }

// Gain adds partition p and delivers the cached objects of its namespaces
// to every scoped handler as additions. The caller serializes Gain and Lose.
func (s *Scope) Gain(p int) (delivered int) {
	s.owned[p].Store(true)
	return s.deliver(p, func(h *scopedHandler, obj any) { h.handler.OnAdd(obj, false) }, true)
}

// Lose removes partition p, so that no event of its namespaces reaches a
// handler any more and listers no longer show its objects, then delivers
// its cached objects as deletions (with unknown final state, as a
// relisting informer does for objects that vanished while it was away):
// each controller drops its per-object state (expectations, trackers), and
// keys still queued resolve to "not found". The caller serializes Gain and
// Lose.
func (s *Scope) Lose(p int) (delivered int) {
	s.owned[p].Store(false)
	return s.deliver(p, func(h *scopedHandler, obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		h.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: obj})
	}, false)
}

// IgnoreLosses marks a handler Lose does not call: one that rejects
// cache.DeletedFinalStateUnknown and keeps no state of the objects Lose
// would drop. The token controller's Secret filter is one: it logs an
// error for every such deletion and drops it, and each error passes
// apimachinery's 1 ms error backoff (runtime.ErrorHandlers), so one
// replica's shutdown in the memory benchmark spent 4.3 s on 6,550 Secrets
// before its partitions were released. The handler still hears every
// event of owned namespaces and Gain's additions.
func IgnoreLosses(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return lossIgnoringHandler{h}
}

type lossIgnoringHandler struct{ cache.ResourceEventHandler }

// deliver calls call for every cached object of partition p, per handler,
// reading each object from the store under the handler's lock: an object
// the informer has deleted meanwhile is skipped (its deletion reaches the
// handler through the informer), and no event of the informer interleaves
// with the call.
func (s *Scope) deliver(p int, call func(*scopedHandler, any), owned bool) int {
	s.mu.Lock()
	byIndexer := map[cache.Indexer][]*scopedHandler{}
	for h := range s.handlers {
		if !owned && h.ignoreLosses { // Lose
			continue
		}
		byIndexer[h.indexer] = append(byIndexer[h.indexer], h)
	}
	s.mu.Unlock()
	var n int
	for indexer, handlers := range byIndexer {
		keys := s.keysOf(indexer, handlers[0].byName, p)
		for _, h := range handlers {
			for _, key := range keys {
				h.mu.Lock()
				if obj, exists, err := indexer.GetByKey(key); err == nil && exists && s.Owns(p) == owned {
					call(h, obj)
					n++
				}
				h.mu.Unlock()
			}
		}
	}
	return n
}

// keysOf lists the keys of partition p's objects in indexer, through the
// namespace index where there is one.
func (s *Scope) keysOf(indexer cache.Indexer, byName bool, p int) []string {
	var keys []string
	if _, indexed := indexer.GetIndexers()[cache.NamespaceIndex]; indexed && !byName {
		for _, ns := range indexer.ListIndexFuncValues(cache.NamespaceIndex) {
			if s.partitionOf(ns) != p {
				continue
			}
			nsKeys, _ := indexer.IndexKeys(cache.NamespaceIndex, ns)
			keys = append(keys, nsKeys...)
		}
		return keys
	}
	for _, key := range indexer.ListKeys() {
		if s.partitionOf(namespaceOfKey(key, byName)) == p {
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

	mu sync.Mutex
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
	if h.inScope(obj) {
		h.handler.OnAdd(obj, isInInitialList)
	}
}

func (h *scopedHandler) OnUpdate(oldObj, newObj any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inScope(newObj) {
		h.handler.OnUpdate(oldObj, newObj)
	}
}

func (h *scopedHandler) OnDelete(obj any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inScope(obj) {
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
