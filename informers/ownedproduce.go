package informers

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
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

// listSource lists the objects of src's namespaces, as they are now, and
// says which namespaces it covered, each with the version it was read at:
// a feeder as listNamespaces does; the trunk with one selector naming its
// namespaces when they fit, else cluster-wide, or, with none, only the
// current version. Around the trunk's list the namespaces are read
// (takeUncarried): not before the informer's first list (first), when
// none was taken at an event yet, and not around a relist of a kind
// keeping by partition (listByPartition).
func (lw *ownedListWatch) listSource(ctx context.Context, t *listWatchTarget, src *source, first bool) (items []runtime.Object, versions map[string]string, err error) {
	lw.mu.Lock()
	// Only where it would list cluster-wide anyway: a shard selector can
	// name only namespaces known before the list.
	byPartition := src.feeds == nil && !first && lw.keepsByPartition() && len(lw.partitions) > 0 &&
		!(lw.sharded && len(src.namespaces) <= lw.maxTerms) && !plantedRelistReadsNamespaces
	lw.mu.Unlock()
	if src.feeds == nil && !first && !byPartition && !lw.takeUncarried(ctx, src, false) {
		return nil, nil, fmt.Errorf("reading the namespaces before listing %s", t.resource)
	}
	lw.mu.Lock()
	namespaces := slices.Clone(src.namespaces)
	lw.mu.Unlock()
	if src.feeds != nil {
		return lw.listNamespaces(ctx, t, namespaces)
	}
	kind := wideList
	switch {
	case byPartition:
	case len(namespaces) == 0:
		kind = versionOnly
	case lw.sharded && len(namespaces) <= lw.maxTerms:
		kind = selectorList
	}
	var version string
	if byPartition {
		items, version, err = lw.listByPartition(ctx, t, src, namespaces)
	} else {
		items, version, err = lw.listRequest(ctx, t, namespaces, kind)
	}
	if err != nil {
		return nil, nil, err
	}
	if !byPartition && !lw.takeUncarried(ctx, src, true) {
		return nil, nil, fmt.Errorf("reading the namespaces after listing %s", t.resource)
	}
	versions = map[string]string{"": version}
	setVersions(versions, namespaces, version)
	return items, versions, nil
}

// listByPartition lists the trunk src again cluster-wide, at once, as a
// plain informer does, with no read of the namespaces first (doc.go,
// relist-reads-namespaces). It keeps the objects of src's namespaces and
// takes those of kept partitions no source carries: their events up to
// the list's version are in it, later ones reach src's watch, which
// resumes from it. A namespace a feeder loads meanwhile is left to its
// own list.
func (lw *ownedListWatch) listByPartition(ctx context.Context, t *listWatchTarget, src *source, namespaces []string) ([]runtime.Object, string, error) {
	carried := sets.New(namespaces...)
	// Decided page by page, as the page arrives, so that no more than a
	// page of other namespaces' objects is held.
	keep := func(pageNamespaces []string) func(ns string) bool {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		var uncarried []string
		for _, ns := range pageNamespaces {
			if !carried.Has(ns) {
				uncarried = append(uncarried, ns)
			}
		}
		// Leaving partitions' too: letGoEverywhere leaves one taken.
		for _, ns := range uncarried {
			if lw.take(src, ns) {
				carried.Insert(ns)
			}
		}
		return carried.Has
	}
	return lw.pagedList(ctx, t, metav1.ListOptions{Limit: 500, FieldSelector: t.fieldSelector}, wideList, keep)
}

// listNamespaces lists the objects of namespaces as a feeder does, with
// the version each was read at: with shard selectors one request per
// maxTerms namespaces, else one per namespace, or past wideAbove
// namespaces one cluster-wide request.
func (lw *ownedListWatch) listNamespaces(ctx context.Context, t *listWatchTarget, namespaces []string) ([]runtime.Object, map[string]string, error) {
	versions := map[string]string{}
	var out []runtime.Object
	lw.mu.Lock()
	// Held everywhere, the kind loads nearly every namespace: one wide list,
	// as its unselected watch reads them, beats one per selector's worth.
	wide := lw.everywhere && len(namespaces) > lw.maxTerms
	lw.mu.Unlock()
	switch {
	case lw.sharded && !wide:
		for group := range slices.Chunk(namespaces, lw.maxTerms) {
			items, version, err := lw.listRequest(ctx, t, group, selectorList)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			setVersions(versions, group, version)
		}
	case !wide && (lw.wideAbove == 0 || len(namespaces) <= lw.wideAbove):
		for _, ns := range namespaces {
			items, version, err := t.listNamespace(ctx, ns, metav1.ListOptions{})
			if err != nil {
				return nil, nil, err
			}
			out = append(out, items...)
			versions[ns] = version
		}
	default:
		items, version, err := lw.listRequest(ctx, t, namespaces, wideList)
		if err != nil {
			return nil, nil, err
		}
		out = items
		setVersions(versions, namespaces, version)
		versions[""] = version
	}
	return out, versions, nil
}

// setVersions records version as the one each of namespaces was read at.
func setVersions(versions map[string]string, namespaces []string, version string) {
	for _, ns := range namespaces {
		versions[ns] = version
	}
}

// listKind is how listRequest asks.
type listKind int

const (
	wideList     listKind = iota // every namespace, keeping only namespaces'
	selectorList                 // a shard selector naming namespaces
	versionOnly                  // only the current version
)

// listRequest makes one paged list of t, as kind asks, and returns the
// objects in namespaces and the list's version.
func (lw *ownedListWatch) listRequest(ctx context.Context, t *listWatchTarget, namespaces []string, kind listKind) ([]runtime.Object, string, error) {
	want := sets.New(namespaces...)
	options := metav1.ListOptions{Limit: 500, FieldSelector: t.fieldSelector}
	switch kind {
	case selectorList:
		options.ShardSelector = namespaceSelector(namespaces)
	case versionOnly:
		options.Limit = 1
	}
	keep := func([]string) func(string) bool { return want.Has }
	return lw.pagedList(ctx, t, options, kind, keep)
}

// pagedList lists t with options, page after page; it keeps the objects
// whose namespaces keep (given each page's) says yes to.
func (lw *ownedListWatch) pagedList(ctx context.Context, t *listWatchTarget, options metav1.ListOptions, kind listKind, keep func(pageNamespaces []string) func(ns string) bool) ([]runtime.Object, string, error) {
	var out []runtime.Object
	for {
		list, err := t.client.Get().Resource(t.resource).VersionedParams(&options, scheme.ParameterCodec).Do(ctx).Get()
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		listMeta, err := meta.ListAccessor(list)
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		if sharded, ok := listMeta.(metav1.ShardedListInterface); kind == selectorList && (!ok || sharded.GetShardInfo() == nil) {
			selectorIgnored.WithLabelValues(t.resource).Inc()
		}
		items, err := meta.ExtractListWithAlloc(list)
		if err != nil {
			return nil, "", fmt.Errorf("listing %s: %w", t.resource, err)
		}
		namespaces := make([]string, 0, len(items))
		accessors := make([]metav1.Object, len(items))
		for i, item := range items {
			if m, err := meta.Accessor(item); err == nil {
				accessors[i] = m
				namespaces = append(namespaces, m.GetNamespace())
			}
		}
		kept := keep(namespaces)
		for i, item := range items {
			if accessors[i] != nil && kept(accessors[i].GetNamespace()) {
				out = append(out, item)
			}
		}
		if listMeta.GetContinue() == "" || kind == versionOnly {
			return out, listMeta.GetResourceVersion(), nil
		}
		options.Continue = listMeta.GetContinue()
	}
}
