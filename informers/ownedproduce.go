package informers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// reopenInterval spaces the watches one source opens, so namespaces
// joining it within it share one new watch.
const reopenInterval = 500 * time.Millisecond

// closedEarlySlack: a watch ending this close to its timeout ended by it.
const closedEarlySlack = 5 * time.Second

// newClosedBackoff paces a source's watches after kube-apiserver closed
// one before its timeout: 1-2 s, doubling to 8-16 s, started over once one
// ends by its timeout, is superseded or lasted closedBackoffReset.
func newClosedBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 1, Steps: 4, Cap: 8 * time.Second}
}

// closedBackoffReset: a watch open this long before kube-apiserver closed
// it was closed not for falling behind its replay (those closes come
// within seconds) but by something such as an apiserver or etcd restart.
// Without the reset each restart would double the next wait, until the
// caches stayed the backoff's cap behind.
const closedBackoffReset = 10 * time.Second

// closedWait is how long a source waits before resuming after a watch,
// open for lasted, was closed early; it steps b.
func closedWait(b *wait.Backoff, lasted time.Duration) time.Duration {
	if lasted >= closedBackoffReset {
		*b = newClosedBackoff()
	}
	return b.Step()
}

// producer is the state of one source's production across its watches.
type producer struct {
	*ownedStream
	src    *source
	logger klog.Logger
	// backoff paces retries after failures, closedBackoff early closes.
	backoff, closedBackoff wait.Backoff
	opened                 time.Time // when the last watch was opened
}

// roundEnd says what comes after a step of a round.
type roundEnd int

const (
	roundGoOn  roundEnd = iota // the round goes on
	roundAgain                 // a new round begins
	roundDone                  // the source is done (fed its trunk, or the stream stopped)
)

// produce lists src when it has no version, then watches it until ctx
// ends, resuming after every close.
func (s *ownedStream) produce(ctx context.Context, src *source) {
	p := &producer{
		ownedStream: s, src: src,
		logger:        klog.FromContext(s.ctx).WithValues("resource", s.target.resource, "namespaces", len(src.namespaces)),
		backoff:       wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 7, Cap: 30 * time.Second},
		closedBackoff: newClosedBackoff(),
	}
	for ctx.Err() == nil {
		if p.round(ctx) == roundDone {
			return
		}
	}
}

// round is one list, when src has no version, and one watch.
func (p *producer) round(ctx context.Context) roundEnd {
	if end := p.listIfUnversioned(ctx); end != roundGoOn {
		return end
	}
	if wait := reopenInterval - time.Since(p.opened); wait > 0 {
		if !p.sleep(ctx, wait, nil) {
			return roundDone
		}
	}
	p.opened = time.Now()
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	options, gen, ok := p.nextWatch(cancel)
	if !ok {
		return roundAgain
	}
	w, err := p.openWatch(watchCtx, options)
	if err != nil {
		return p.watchFailed(ctx, err)
	}
	expired := p.follow(watchCtx, p.src, &gen, w)
	superseded := watchCtx.Err() != nil
	cancel()
	return p.watchEnded(ctx, expired, superseded)
}

// listIfUnversioned lists src when it has no version: a feeder hands its
// list to its trunk and is done; any other source emits it.
func (p *producer) listIfUnversioned(ctx context.Context) roundEnd {
	lw := p.lw
	lw.mu.Lock()
	version := p.src.version
	lw.mu.Unlock()
	if version != "" {
		return roundGoOn
	}
	items, versions, err := lw.listSource(ctx, p.target, p.src, false)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Error(err, "Listing a source of the owned cache; retrying")
			p.sleep(ctx, p.backoff.Step(), nil)
		}
		return roundAgain
	}
	if p.src.feeds != nil {
		p.feed(ctx, p.src, items, versions)
		return roundDone
	}
	events := make([]watch.Event, 0, len(items))
	for _, item := range items {
		events = append(events, watch.Event{Type: watch.Added, Object: item})
	}
	if !p.emit(ctx, p.src, nil, events, versions[""], versions) {
		return roundDone
	}
	return roundGoOn
}

// nextWatch records src's next watch (cancel supersedes it) and returns
// its options and the generation of src's namespaces it covers; false
// when src must list again first.
func (p *producer) nextWatch(cancel context.CancelFunc) (metav1.ListOptions, uint64, bool) {
	lw, src := p.lw, p.src
	lw.mu.Lock()
	defer lw.mu.Unlock()
	version, gen := src.version, src.watchGen
	selector := lw.watchSelector(p.target, src)
	src.cancelWatch = cancel
	src.watchCovers = nil
	if selector != "" {
		src.watchCovers = make(map[string]bool, len(src.namespaces))
		for _, ns := range src.namespaces {
			src.watchCovers[ns] = true
		}
	}
	options := metav1.ListOptions{ResourceVersion: version, Watch: true, AllowWatchBookmarks: true, TimeoutSeconds: p.timeout, FieldSelector: p.target.fieldSelector, ShardSelector: selector}
	return options, gen, version != ""
}

// openWatch opens a watch with options; without a selector it watches
// every namespace and the client keeps the loaded ones (emit).
func (p *producer) openWatch(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	if options.ShardSelector != "" {
		selectedWatchOpens.WithLabelValues(p.target.resource).Inc()
	}
	client := p.target.trunkClient
	if client == nil {
		client = p.target.client
	}
	return client.Get().Resource(p.target.resource).VersionedParams(&options, scheme.ParameterCodec).Watch(ctx)
}

// watchFailed starts a new round after a watch did not open, opening it
// again at most every reopenInterval (a version expired by then is told
// by the watch that opens: watchEnded).
func (p *producer) watchFailed(ctx context.Context, err error) roundEnd {
	if ctx.Err() != nil {
		return roundDone
	}
	p.logger.V(4).Info("Opening a watch of a source of the owned cache failed; opening it again", "err", err)
	// kube-apiserver away or not ready: the close before this was its
	// going, not this source's falling behind.
	p.closedBackoff = newClosedBackoff()
	return roundAgain
}

// watchEnded decides what follows a watch that ended.
func (p *producer) watchEnded(ctx context.Context, expired, superseded bool) roundEnd {
	switch {
	case expired && !plantedNoRelistOnExpiry:
		p.lw.mu.Lock()
		p.src.version = ""
		p.lw.mu.Unlock()
		sourceRelists.WithLabelValues(p.target.resource).Inc()
	case ctx.Err() != nil:
	case !superseded && p.closedEarly(p.opened):
		// Resuming at once would replay into the burst that closed
		// the watch, and be closed again before the replay ends.
		watchesClosedEarly.WithLabelValues(p.target.resource).Inc()
		lasted := time.Since(p.opened)
		pause := closedWait(&p.closedBackoff, lasted)
		lw := p.lw
		lw.mu.Lock()
		if lw.closedWaitForTest > 0 {
			pause = lw.closedWaitForTest
		}
		// A gain's catch-up cuts the wait short (wakeCarrier).
		woken := p.src.wakeChan()
		lw.mu.Unlock()
		p.logger.V(2).Info("A watch of the owned cache was closed early; resuming after a wait", "lasted", lasted.Round(time.Millisecond), "wait", pause.Round(time.Millisecond))
		if !p.sleep(ctx, pause, woken) {
			return roundDone
		}
	default:
		p.closedBackoff = newClosedBackoff()
	}
	return roundAgain
}

// sleep waits d, or until woken (nil: never); false if ctx ended first.
func (p *producer) sleep(ctx context.Context, d time.Duration, woken <-chan struct{}) bool {
	select {
	case <-time.After(d):
		return true
	case <-woken:
		return true
	case <-ctx.Done():
		return false
	}
}

// closedEarly says whether a watch opened at opened ended before the
// timeout it asked for: kube-apiserver closed it, most often for falling
// behind (its buffers full when its dispatcher's time budget ran out).
func (s *ownedStream) closedEarly(opened time.Time) bool {
	if s.timeout == nil || *s.timeout <= 0 {
		return false
	}
	return time.Since(opened) < time.Duration(*s.timeout)*time.Second-closedEarlySlack
}

// follow passes w's events on until w ends; true if the server said src's
// version has expired.
func (s *ownedStream) follow(ctx context.Context, src *source, watched *uint64, w watch.Interface) (expired bool) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case e, ok := <-w.ResultChan():
			if !ok {
				return false
			}
			switch e.Type {
			case watch.Error:
				err := apierrors.FromObject(e.Object)
				return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
			case watch.Bookmark:
				if m, err := meta.Accessor(e.Object); err == nil {
					s.emit(ctx, src, watched, nil, m.GetResourceVersion(), nil)
				}
			default:
				if skipped, ok := e.Object.(*skippedObject); ok {
					// Not decoded: only its version moves src on.
					eventsSkipped.WithLabelValues(s.target.resource).Inc()
					if !s.emit(ctx, src, watched, nil, skipped.resourceVersion, nil) {
						return false
					}
					continue
				}
				m, err := meta.Accessor(e.Object)
				if err != nil {
					continue
				}
				if !s.emit(ctx, src, watched, []watch.Event{e}, m.GetResourceVersion(), nil) {
					return false
				}
			}
		}
	}
}
