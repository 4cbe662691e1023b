package informers

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
)

// namespaceSet is the set of namespaces a piece holds now (the piece's
// Namespaces view) and a way to hear when it changes.
type namespaceSet interface {
	HasSynced() bool
	Names() []string
	// Notify calls changed (without blocking) whenever the set may have
	// changed, until remove is called.
	Notify(changed func()) (remove func(), err error)
}

// namespacesListWatch lists and watches one namespaced kind in each of a
// piece's namespaces, one namespace-scoped request each, and hands the
// reflector one stream. Each namespace's stream resumes from the
// resourceVersion of the last event of that namespace the reflector took,
// not from the reflector's single resourceVersion: events of different
// namespaces arrive out of order, so the highest version seen in one says
// nothing of another. A namespace that appears in the piece is listed
// (its objects delivered as additions) and then watched from its list.
type namespacesListWatch struct {
	clients    *RESTClients
	mapper     meta.RESTMapper
	obj        runtime.Object
	namespaces namespaceSet

	mu sync.Mutex
	// target is resolved on first use, so a RESTMapper that is not ready
	// yet is an error the reflector retries, not a piece that fails.
	target *listWatchTarget
	// versions is, per namespace whose stream is open or resumable, the
	// resourceVersion to resume from.
	versions map[string]string
	// generation counts lists: a stream of an older list records nothing.
	generation int
}

type listWatchTarget struct {
	client   rest.Interface
	resource string
	listKind schema.GroupVersionKind
}

func (lw *namespacesListWatch) resolve() (*listWatchTarget, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.target != nil {
		return lw.target, nil
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(lw.obj)
	if err != nil {
		return nil, fmt.Errorf("kind of %T: %w", lw.obj, err)
	}
	gvk := gvks[0]
	mapping, err := lw.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("resource of %s: %w", gvk, err)
	}
	client, err := lw.clients.forGroupVersion(gvk.GroupVersion())
	if err != nil {
		return nil, err
	}
	lw.target = &listWatchTarget{client: client, resource: mapping.Resource.Resource, listKind: gvk.GroupVersion().WithKind(gvk.Kind + "List")}
	return lw.target, nil
}

var _ cache.ListerWatcherWithContext = &namespacesListWatch{}
var _ cache.ListerWatcher = &namespacesListWatch{}

// List is ListWithContext for callers without a context (the reflector
// prefers the context variants).
func (lw *namespacesListWatch) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

// Watch is WatchWithContext for callers without a context.
func (lw *namespacesListWatch) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// IsWatchListSemanticsUnSupported: the reflector must list then watch,
// since each namespace has its own stream (no streaming initial list).
func (lw *namespacesListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (t *listWatchTarget) listNamespace(ctx context.Context, namespace string, options metav1.ListOptions) ([]runtime.Object, string, error) {
	options.Continue = ""
	list, _, err := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return t.client.Get().Namespace(namespace).Resource(t.resource).VersionedParams(&o, scheme.ParameterCodec).Do(ctx).Get()
	}).ListWithAlloc(ctx, options)
	if err != nil {
		return nil, "", fmt.Errorf("listing %s in namespace %s: %w", t.resource, namespace, err)
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, "", fmt.Errorf("listing %s in namespace %s: %w", t.resource, namespace, err)
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, "", fmt.Errorf("listing %s in namespace %s: %w", t.resource, namespace, err)
	}
	return items, listMeta.GetResourceVersion(), nil
}

// ListWithContext lists every namespace of the piece as one list. Its
// resourceVersion is the highest of theirs (the reflector only shows it).
func (lw *namespacesListWatch) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	t, err := lw.resolve()
	if err != nil {
		return nil, err
	}
	if !cache.WaitForCacheSync(ctx.Done(), lw.namespaces.HasSynced) {
		return nil, fmt.Errorf("listing %s: the piece's namespaces did not sync: %w", t.resource, context.Cause(ctx))
	}
	versions := map[string]string{}
	var all []runtime.Object
	highest := "0"
	for _, ns := range lw.namespaces.Names() {
		items, version, err := t.listNamespace(ctx, ns, options)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		versions[ns] = version
		if newerVersion(version, highest) {
			highest = version
		}
	}
	obj, err := scheme.Scheme.New(t.listKind)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.resource, err)
	}
	if err := meta.SetList(obj, all); err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.resource, err)
	}
	listMeta, err := meta.ListAccessor(obj)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.resource, err)
	}
	listMeta.SetResourceVersion(highest)
	lw.mu.Lock()
	lw.versions = versions
	lw.generation++
	lw.mu.Unlock()
	return obj, nil
}

// newerVersion compares resourceVersions as the numbers etcd makes them;
// only used for the list's displayed version.
func newerVersion(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

// WatchWithContext watches every namespace of the piece (and any that
// joins it while the watch is open) as one stream. options.ResourceVersion
// is ignored in favour of each namespace's own.
func (lw *namespacesListWatch) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	t, err := lw.resolve()
	if err != nil {
		return nil, err
	}
	lw.mu.Lock()
	resume := make(map[string]string, len(lw.versions))
	for ns, v := range lw.versions {
		resume[ns] = v
	}
	generation := lw.generation
	lw.mu.Unlock()
	current := lw.namespaces.Names()
	inSet := map[string]bool{}
	for _, ns := range current {
		inSet[ns] = true
	}
	// A namespace that left the piece is watched for one more round so
	// the deletions that emptied it reach the store; then it is dropped.
	var leaving []string
	for ns := range resume {
		if !inSet[ns] {
			leaving = append(leaving, ns)
		}
	}
	sort.Strings(leaving)

	ctx, cancel := context.WithCancel(ctx)
	m := &mergedWatch{lw: lw, target: t, generation: generation, ctx: ctx, cancel: cancel, out: make(chan watch.Event), options: options, watched: map[string]bool{}}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		<-ctx.Done()
		lw.mu.Lock()
		if lw.generation == generation {
			for _, ns := range leaving {
				delete(lw.versions, ns)
			}
		}
		lw.mu.Unlock()
	}()
	for _, ns := range append(current, leaving...) {
		m.start(ns, resume[ns])
	}
	changed := make(chan struct{}, 1)
	remove, err := lw.namespaces.Notify(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching %s: following the piece's namespaces: %w", t.resource, err)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer remove()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				for _, ns := range lw.namespaces.Names() {
					m.start(ns, "")
				}
			}
		}
	}()
	go func() {
		m.wg.Wait()
		close(m.out)
	}()
	return m, nil
}

// mergedWatch is the one stream of a namespacesListWatch: a producer per
// namespace. It ends (and the reflector opens a new one) as soon as any
// namespace's stream ends or fails.
type mergedWatch struct {
	lw         *namespacesListWatch
	target     *listWatchTarget
	generation int
	ctx        context.Context
	cancel     context.CancelFunc
	out        chan watch.Event
	options    metav1.ListOptions
	wg         sync.WaitGroup

	mu      sync.Mutex
	watched map[string]bool
}

func (m *mergedWatch) Stop()                          { m.cancel() }
func (m *mergedWatch) ResultChan() <-chan watch.Event { return m.out }

// start runs the producer of a namespace unless it has one. Without a
// version to resume from, the namespace is listed first.
func (m *mergedWatch) start(ns, version string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watched[ns] || m.ctx.Err() != nil {
		return
	}
	m.watched[ns] = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.cancel()
		if err := m.produce(ns, version); err != nil {
			m.send(watch.Event{Type: watch.Error, Object: &metav1.Status{
				Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonUnknown,
			}})
		}
	}()
}

func (m *mergedWatch) send(e watch.Event) bool {
	select {
	case m.out <- e:
		return true
	case <-m.ctx.Done():
		return false
	}
}

// delivered records that the reflector has taken the namespace's stream up
// to version: only then may a later stream resume after it.
func (m *mergedWatch) delivered(ns, version string) {
	m.lw.mu.Lock()
	defer m.lw.mu.Unlock()
	if m.lw.generation != m.generation {
		return
	}
	if m.lw.versions == nil {
		m.lw.versions = map[string]string{}
	}
	m.lw.versions[ns] = version
}

func (m *mergedWatch) produce(ns, version string) error {
	if version == "" {
		items, listVersion, err := m.target.listNamespace(m.ctx, ns, metav1.ListOptions{})
		if err != nil {
			if m.ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, item := range items {
			if !m.send(watch.Event{Type: watch.Added, Object: item}) {
				return nil
			}
		}
		m.delivered(ns, listVersion)
		version = listVersion
	}
	options := m.options
	options.ResourceVersion = version
	options.ResourceVersionMatch = ""
	options.Watch = true
	options.AllowWatchBookmarks = true
	options.SendInitialEvents = nil
	w, err := m.target.client.Get().Namespace(ns).Resource(m.target.resource).VersionedParams(&options, scheme.ParameterCodec).Watch(m.ctx)
	if err != nil {
		if m.ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watching %s in namespace %s: %w", m.target.resource, ns, err)
	}
	defer w.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return nil
		case e, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if e.Type == watch.Error {
				m.send(e)
				return nil
			}
			accessor, err := meta.Accessor(e.Object)
			if err != nil {
				return fmt.Errorf("watching %s in namespace %s: %w", m.target.resource, ns, err)
			}
			if e.Type != watch.Bookmark && !m.send(e) {
				return nil
			}
			m.delivered(ns, accessor.GetResourceVersion())
		}
	}
}

// RESTClients are the replica's REST clients per group version, built
// like the typed clientset's, sharing the informer client's rate limiter.
type RESTClients struct {
	config *rest.Config
	mu     sync.Mutex
	byGV   map[schema.GroupVersion]rest.Interface
}

// NewRESTClients prepares REST clients for namespace-watch pieces.
func NewRESTClients(config *rest.Config) *RESTClients {
	return &RESTClients{config: config, byGV: map[schema.GroupVersion]rest.Interface{}}
}

func (c *RESTClients) forGroupVersion(gv schema.GroupVersion) (rest.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if client, ok := c.byGV[gv]; ok {
		return client, nil
	}
	config := rest.CopyConfig(c.config)
	config.GroupVersion = &gv
	config.APIPath = "/apis"
	if gv.Group == "" {
		config.APIPath = "/api"
	}
	config.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion()
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("REST client for %s: %w", gv, err)
	}
	c.byGV[gv] = client
	return client, nil
}
