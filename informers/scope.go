package informers

import (
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Scope is the partitions a replica's partition controllers serve now
// (package doc). Gain and Lose reveal and hide one as a starting or
// relisting informer would, with no pause or re-delivery for the others.
//
// Gated (GateNamespaces), it also hides a namespace until the owned cache
// reports it held: a controller that saw it earlier could write into it
// (the root-CA publisher's kube-root-ca.crt) while the cache could still
// fold that write, and a deletion after it, into the namespace's first
// list and never deliver either.
type Scope struct {
	partitionOf func(namespace string) int
	owned       []atomic.Bool

	gated  bool
	heldMu sync.RWMutex
	held   map[string]bool

	// mu orders Gain, Lose, Held and Dropped against each other and
	// against handlers being added and removed; it guards dispatchers.
	mu          sync.Mutex
	dispatchers map[cache.SharedIndexInformer]*dispatcher
}

// NewScope makes an empty scope over partitions partitions; partitionOf
// places a namespace (it must return a value in [0, partitions)).
func NewScope(partitions int, partitionOf func(namespace string) int) *Scope {
	return &Scope{partitionOf: partitionOf, owned: make([]atomic.Bool, partitions), dispatchers: map[cache.SharedIndexInformer]*dispatcher{}}
}

// GateNamespaces makes the scope show a namespace only while held (Held,
// not Dropped since). Call it before the scope is used.
func (s *Scope) GateNamespaces() {
	s.gated = true
	s.held = map[string]bool{}
}

// HasNamespace says whether ns is in an owned partition and, if gated, held.
func (s *Scope) HasNamespace(ns string) bool { return s.Owns(s.partitionOf(ns)) && s.isHeld(ns) }

func (s *Scope) isHeld(ns string) bool {
	if !s.gated {
		return true
	}
	s.heldMu.RLock()
	defer s.heldMu.RUnlock()
	return s.held[ns]
}

// Held records namespaces the owned cache now holds and reveals those in
// owned partitions (their Namespace objects included).
func (s *Scope) Held(namespaces []string) (delivered int) { return s.setHeld(namespaces, true) }

// Dropped records namespaces the owned cache no longer holds (their
// partition unloaded): they stay hidden until held again.
func (s *Scope) Dropped(namespaces []string) { s.setHeld(namespaces, false) }

// setHeld records namespaces held or not and reveals or hides them.
func (s *Scope) setHeld(namespaces []string, held bool) (delivered int) {
	return s.change(namespaces, nil, func() {
		s.heldMu.Lock()
		defer s.heldMu.Unlock()
		for _, ns := range namespaces {
			if held {
				s.held[ns] = true
			} else {
				delete(s.held, ns)
			}
		}
	})
}

// Owns says whether partition p is owned.
func (s *Scope) Owns(p int) bool { return p >= 0 && p < len(s.owned) && s.owned[p].Load() }

// Gain adds partition p and reveals it. The caller serializes Gain and Lose.
func (s *Scope) Gain(p int) (delivered int) {
	return s.change(nil, func(ns string) bool { return s.partitionOf(ns) == p }, func() { s.owned[p].Store(true) })
}

// Lose removes partition p and hides it, as a relisting informer deletes
// what vanished: controllers drop per-object state (expectations,
// trackers) and queued keys resolve to "not found". The caller serializes
// Gain and Lose.
func (s *Scope) Lose(p int) (delivered int) {
	return s.change(nil, func(ns string) bool { return s.partitionOf(ns) == p }, func() { s.owned[p].Store(false) })
}

// IgnoreLosses marks a handler Lose does not call (it hears all else): one
// that rejects cache.DeletedFinalStateUnknown and keeps no state Lose would
// drop, as the token controller's Secret filter, each of whose errors costs
// apimachinery's 1 ms error backoff (seconds for thousands of Secrets).
func IgnoreLosses(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return lossIgnoringHandler{h}
}

type lossIgnoringHandler struct{ cache.ResourceEventHandler }

// change runs flip, then reveals or hides each namespace whose visibility
// it changed (those named, or known ones covers picks), and returns once
// the handlers were told: a caller waiting for the keys a hide queued
// relies on it. Every dispatcher stays locked across flip, so each queues
// the events before it with the old visibility and after it with the new.
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

// addHandler adds handler to the view of informer (byName: of Namespaces)
// through its dispatcher, made on first use; logger logs a handler crash.
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
