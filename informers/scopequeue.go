package informers

import (
	"sync"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/cache/synctrack"
	"k8s.io/klog/v2"
)

// scopeEvent is the kind of one notification.
type scopeEvent int

const (
	eventAdd scopeEvent = iota
	eventUpdate
	eventDelete
	// eventBarrier: no call; told is Done once the notifications queued
	// before it are handled, or dropped.
	eventBarrier
)

// notification is one call a scopedHandler makes of its handler.
type notification struct {
	op          scopeEvent
	oldObj, obj any
	// initial: part of the handler's initial list, which synced waits for.
	initial bool
	told    *sync.WaitGroup
}

// scopedHandler is one handler added to a Scope's view of an informer,
// with its own queue and goroutine, as client-go gives each handler a
// listener: a slow handler delays no other, and each is called serially.
type scopedHandler struct {
	handler cache.ResourceEventHandler
	// ignoreLosses: a hide queues it nothing (IgnoreLosses).
	ignoreLosses bool
	dispatcher   *dispatcher
	logger       klog.Logger

	// synced: the dispatcher has synced and the handler has handled its
	// initial list (as client-go tracks a listener's).
	synced *synctrack.SingleFileTracker

	mu      sync.Mutex
	pending []notification
	// busy: the goroutine is handling a batch taken from pending.
	busy    bool
	stopped bool
	wake    chan struct{}
	done    chan struct{}
}

func newScopedHandler(d *dispatcher, handler cache.ResourceEventHandler, logger klog.Logger) *scopedHandler {
	h := &scopedHandler{handler: handler, dispatcher: d, logger: logger, wake: make(chan struct{}, 1), done: make(chan struct{}),
		synced: synctrack.NewSingleFileTracker("scoped handler on a shared informer")}
	if l, ok := handler.(lossIgnoringHandler); ok {
		h.handler, h.ignoreLosses = l.ResourceEventHandler, true
	}
	return h
}

// push queues n; a stopped handler drops it.
func (h *scopedHandler) push(n notification) {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		n.drop()
		return
	}
	h.pending = append(h.pending, n)
	if n.initial {
		h.synced.Start()
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// run calls the handler for each notification in order until stop, which
// drops the rest, as client-go drops a removed listener's.
func (h *scopedHandler) run() {
	defer utilruntime.HandleCrashWithLogger(h.logger)
	for {
		select {
		case <-h.done:
			return
		case <-h.wake:
		}
		h.mu.Lock()
		batch := h.pending
		h.pending = nil
		h.busy = len(batch) > 0
		h.mu.Unlock()
		for i, n := range batch {
			if h.isStopped() {
				for _, dropped := range batch[i:] {
					dropped.drop()
				}
				return
			}
			h.call(n)
			if n.initial {
				h.synced.Finished()
			}
		}
		h.mu.Lock()
		h.busy = false
		h.mu.Unlock()
	}
}

// drop releases a barrier that will not be reached.
func (n notification) drop() {
	if n.op == eventBarrier {
		n.told.Done()
	}
}

func (h *scopedHandler) call(n notification) {
	switch n.op {
	case eventBarrier:
		n.told.Done()
	case eventAdd:
		h.handler.OnAdd(n.obj, n.initial)
	case eventUpdate:
		h.handler.OnUpdate(n.oldObj, n.obj)
	default:
		h.handler.OnDelete(n.obj)
	}
}

func (h *scopedHandler) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.stopped = true
		for _, n := range h.pending {
			n.drop()
		}
		h.pending = nil
		close(h.done)
	}
}

func (h *scopedHandler) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// awaitSync tells the tracker the dispatcher has synced, once parent
// is done: after the dispatcher queued its initial list, as Start needs.
func (h *scopedHandler) awaitSync(parent cache.DoneChecker) {
	select {
	case <-parent.Done():
		h.synced.UpstreamHasSynced()
	case <-h.done:
	}
}

// HasSynced implements cache.ResourceEventHandlerRegistration (synced).
func (h *scopedHandler) HasSynced() bool { return h.synced.HasSynced() }

func (h *scopedHandler) HasSyncedChecker() cache.DoneChecker { return h.synced }
