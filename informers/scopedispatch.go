package informers

import (
	"sync"

	"k8s.io/client-go/tools/cache"
)

// dispatcher is a Scope's one handler on a shared informer (package doc).
// client-go orders a new handler's initial list before later events under
// the informer's private lock; the dispatcher orders events, reveals and
// hides under its own mu, reading reveals from known, not the store (which
// runs ahead of the events). So no handler hears an update or deletion of
// an object it was not told of, an older version after a newer one, or an
// object twice.
type dispatcher struct {
	scope    *Scope
	informer cache.SharedIndexInformer
	// byName: the objects are Namespaces, placed by their own name.
	byName       bool
	registration cache.ResourceEventHandlerRegistration

	// mu orders the dispatched events against the Scope's changes; it
	// guards known and handlers.
	mu sync.Mutex
	// known: namespace -> name -> object as of the events dispatched so
	// far, keyed by the objects' own strings so an event allocates no key.
	known    map[string]map[string]any
	handlers []*scopedHandler
}

func newDispatcher(s *Scope, informer cache.SharedIndexInformer, byName bool) *dispatcher {
	return &dispatcher{scope: s, informer: informer, byName: byName, known: map[string]map[string]any{}}
}

func (d *dispatcher) OnAdd(obj any, initial bool) { d.dispatch(eventAdd, nil, obj, initial) }
func (d *dispatcher) OnUpdate(oldObj, newObj any) { d.dispatch(eventUpdate, oldObj, newObj, false) }
func (d *dispatcher) OnDelete(obj any)            { d.dispatch(eventDelete, nil, obj, false) }

// dispatch records an event in known and queues it if its namespace shows.
func (d *dispatcher) dispatch(op scopeEvent, oldObj, obj any, isInInitialList bool) {
	ns, name, ok := placeOf(obj, d.byName)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if op == eventDelete {
		delete(d.known[ns], name)
		if len(d.known[ns]) == 0 {
			delete(d.known, ns)
		}
	} else {
		objects := d.known[ns]
		if objects == nil {
			objects = map[string]any{}
			d.known[ns] = objects
		}
		objects[name] = obj
	}
	if !d.scope.HasNamespace(ns) {
		return
	}
	for _, h := range d.handlers {
		h.push(notification{op: op, oldObj: oldObj, obj: obj, initial: isInInitialList})
	}
}

// placeOf is the namespace and name of an object or a deletion with
// unknown final state; for Namespaces (byName) both are its name.
func placeOf(obj any, byName bool) (ns, name string, ok bool) {
	n, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		return "", "", false
	}
	if byName {
		return n.Name, n.Name, true
	}
	return n.Namespace, n.Name, true
}

// deliverChanges reveals or hides each namespace of was whose visibility
// changed, then queues a barrier on told to each handler it queued to; it
// returns how many notifications it queued. Called with d.mu held.
func (d *dispatcher) deliverChanges(was map[string]bool, told *sync.WaitGroup) (queued int) {
	queuedTo := map[*scopedHandler]bool{}
	for ns, before := range was {
		now := d.scope.HasNamespace(ns)
		if now == before {
			continue
		}
		for name, obj := range d.objectsOf(ns) {
			key := name
			if !d.byName {
				key = ns + "/" + name
			}
			for _, h := range d.handlers {
				switch {
				case now:
					h.push(notification{op: eventAdd, obj: obj})
				case h.ignoreLosses:
					continue
				default:
					h.push(notification{op: eventDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: obj}})
				}
				queuedTo[h] = true
				queued++
			}
		}
	}
	for h := range queuedTo {
		told.Add(1)
		h.push(notification{op: eventBarrier, told: told})
	}
	return queued
}

// objectsOf is known's objects in namespace ns, by name (the store's
// under the reveal-from-store plant).
func (d *dispatcher) objectsOf(ns string) map[string]any {
	if !plantedRevealFromStore || d.byName {
		return d.known[ns]
	}
	objects := map[string]any{}
	stored, _ := d.informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	for _, obj := range stored {
		if _, name, ok := placeOf(obj, false); ok {
			objects[name] = obj
		}
	}
	return objects
}

// add starts h, telling it of the visible known objects as the
// informer's initial list. Called with d.mu held.
func (d *dispatcher) add(h *scopedHandler) {
	d.handlers = append(d.handlers, h)
	d.eachVisible(func(obj any) { h.push(notification{op: eventAdd, obj: obj, initial: true}) })
	go h.run()
	go h.awaitSync(d.registration.HasSyncedChecker())
}

// remove stops h and says whether no handler is left. Called with d.mu held.
func (d *dispatcher) remove(h *scopedHandler) (empty bool) {
	for i, other := range d.handlers {
		if other == h {
			d.handlers = append(d.handlers[:i], d.handlers[i+1:]...)
			break
		}
	}
	h.stop()
	return len(d.handlers) == 0
}

// resync queues h an update of each visible known object, as a resync does.
func (d *dispatcher) resync(h *scopedHandler) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.eachVisible(func(obj any) { h.push(notification{op: eventUpdate, oldObj: obj, obj: obj}) })
}

// eachVisible calls f on each known object of a visible namespace.
// Called with d.mu held.
func (d *dispatcher) eachVisible(f func(obj any)) {
	for ns, objects := range d.known {
		if !d.scope.HasNamespace(ns) {
			continue
		}
		for _, obj := range objects {
			f(obj)
		}
	}
}
