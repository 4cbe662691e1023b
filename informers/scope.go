package informers

import (
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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

	// gated: HasNamespace also asks held (GateNamespaces).
	gated  bool
	heldMu sync.RWMutex
	held   map[string]bool

	// mu orders Gain, Lose, Held and Dropped against each other and
	// against handlers coming and going (scopedispatch.go); it guards
	// dispatchers.
	mu          sync.Mutex
	dispatchers map[cache.SharedIndexInformer]*dispatcher
}

// NewScope makes an empty scope over partitions partitions; partitionOf
// places a namespace (it must return a value in [0, partitions)).
func NewScope(partitions int, partitionOf func(namespace string) int) *Scope {
	return &Scope{partitionOf: partitionOf, owned: make([]atomic.Bool, partitions), dispatchers: map[cache.SharedIndexInformer]*dispatcher{}}
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
	return s.change(namespaces, nil, func() {
		s.heldMu.Lock()
		defer s.heldMu.Unlock()
		for _, ns := range namespaces {
			s.held[ns] = true
		}
	})
}

// Dropped records that the owned cache no longer holds namespaces (their
// partition was unloaded): they stay hidden until held again.
func (s *Scope) Dropped(namespaces []string) {
	s.change(namespaces, nil, func() {
		s.heldMu.Lock()
		defer s.heldMu.Unlock()
		for _, ns := range namespaces {
			delete(s.held, ns)
		}
	})
}

// Owns says whether partition p is owned.
func (s *Scope) Owns(p int) bool { return p >= 0 && p < len(s.owned) && s.owned[p].Load() }

// Gain adds partition p and delivers the cached objects of its namespaces
// to every scoped handler as additions. The caller serializes Gain and Lose.
func (s *Scope) Gain(p int) (delivered int) {
	return s.change(nil, func(ns string) bool { return s.partitionOf(ns) == p }, func() { s.owned[p].Store(true) })
}

// Lose removes partition p, so that no event of its namespaces reaches a
// handler any more and listers no longer show its objects, then delivers
// its cached objects as deletions (with unknown final state, as a
// relisting informer does for objects that vanished while it was away):
// each controller drops its per-object state (expectations, trackers), and
// keys still queued resolve to "not found". The caller serializes Gain and
// Lose.
func (s *Scope) Lose(p int) (delivered int) {
	return s.change(nil, func(ns string) bool { return s.partitionOf(ns) == p }, func() { s.owned[p].Store(false) })
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

// change flips what the scope shows (flip), and tells every scoped
// handler the known objects of each namespace whose visibility the flip
// changed: additions of those revealed, deletions with unknown final
// state of those hidden; it returns once the handlers have been told, as
// a caller waiting for the keys a hide queued relies on. The namespaces
// it may change are named, or chosen by covers. Every dispatcher is
// locked across the flip, so that each queues its events before the flip
// with the visibility before it, and after the flip with the visibility
// after it.
func (s *Scope) change(named []string, covers func(namespace string) bool, flip func()) (queued int) {
	var told sync.WaitGroup
	defer told.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.dispatchers {
		d.mu.Lock()
		defer d.mu.Unlock()
	}
	was := map[string]bool{}
	for _, ns := range named {
		was[ns] = s.HasNamespace(ns)
	}
	if covers != nil {
		for _, d := range s.dispatchers {
			for ns := range d.known {
				if _, seen := was[ns]; !seen && covers(ns) {
					was[ns] = s.HasNamespace(ns)
				}
			}
		}
	}
	flip()
	for _, d := range s.dispatchers {
		queued += d.deliverChanges(was, &told)
	}
	return queued
}

// addHandler adds handler to the scope's view of informer (byName: of
// Namespaces), through the informer's dispatcher, made on first use;
// logger logs a crash of the handler (cache.HandlerOptions.Logger).
func (s *Scope) addHandler(informer cache.SharedIndexInformer, byName bool, handler cache.ResourceEventHandler, logger klog.Logger) (*scopedHandler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dispatchers[informer]
	if d == nil {
		d = newDispatcher(s, informer, byName)
		r, err := informer.AddEventHandler(d)
		if err != nil {
			return nil, err
		}
		d.registration = r
		s.dispatchers[informer] = d
	}
	h := newScopedHandler(d, handler, logger)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.add(h)
	return h, nil
}

// removeHandler stops h; the last handler of an informer takes its
// dispatcher off the informer.
func (s *Scope) removeHandler(h *scopedHandler) error {
	d := h.dispatcher
	s.mu.Lock()
	d.mu.Lock()
	empty := d.remove(h)
	if empty && s.dispatchers[d.informer] == d {
		delete(s.dispatchers, d.informer)
	}
	d.mu.Unlock()
	s.mu.Unlock()
	if !empty {
		return nil
	}
	return d.informer.RemoveEventHandler(d.registration)
}
