package informers

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// apiServerModel is an in-memory kube-apiserver of Namespaces and
// ConfigMaps, served over HTTP on loopback with the wire format client-go
// reads: lists at the current resourceVersion, watches from a version
// with the events after it, bookmarks, watches ended early, 410 Gone for
// a version older than the last compaction, and shard selectors of
// namespace ranges honoured in lists and watches, as by a server with
// ShardedListAndWatch (shardselector_test.go).
type apiServerModel struct {
	server *httptest.Server

	mu         sync.Mutex
	rv         int64
	compacted  int64
	namespaces map[string]*corev1.Namespace
	configMaps map[string]*corev1.ConfigMap // namespace/name
	history    []modelEvent
	// watchers: each open watch's end; closing it ends the watch.
	watchers map[chan struct{}]struct{}
	changed  *sync.Cond
	counts   map[string]int
	// listLatency: a list's answer is on its way for up to this long
	// after its snapshot. Set before serving.
	listLatency time.Duration
	// namespaceLatency: a watch's Namespace events are on their way for
	// up to this long, so that the replica hears of a namespace after
	// its first objects, and after other watches have passed them. Set
	// before serving.
	namespaceLatency time.Duration
	// beforeList, if set, is called before the snapshot of every list of
	// ConfigMaps, outside the model's lock: a test holds a list in
	// flight.
	beforeList func()
	// compactAfterList, if set, says after each list's answer whether
	// to compact then, expiring every watch behind it. Set before
	// serving.
	compactAfterList func() bool
	// folded: the versions a client could not stream, per resource and
	// namespace ("" all): from the version its watch was told 410 Gone
	// for through the version of its next list, into which they fold.
	folded []foldedRange
	// stalled: open watches deliver nothing, bookmarks included, while
	// their connections stay up and lists are answered (stall).
	stalled bool
}

type foldedRange struct {
	resource, namespace string
	after, through      int64
}

// wasFolded says whether the event of a namespace's resource at version
// was compacted away before a watch that needed it could stream it.
func (m *apiServerModel) wasFolded(resource, namespace string, version int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.folded {
		if f.resource == resource && (f.namespace == "" || f.namespace == namespace) && version > f.after && (f.through < 0 || version <= f.through) {
			return true
		}
	}
	return false
}

type modelEvent struct {
	rv       int64
	resource string
	typ      watch.EventType
	obj      runtime.Object
}

func newAPIServerModel() *apiServerModel {
	m := &apiServerModel{rv: 1, namespaces: map[string]*corev1.Namespace{}, configMaps: map[string]*corev1.ConfigMap{}, watchers: map[chan struct{}]struct{}{}, counts: map[string]int{}}
	m.changed = sync.NewCond(&m.mu)
	m.server = httptest.NewServer(http.HandlerFunc(m.serve))
	return m
}

func (m *apiServerModel) close() {
	m.closeWatches()
	m.server.Close()
}

// record appends an event at the next version. Called with mu held.
func (m *apiServerModel) record(resource string, typ watch.EventType, obj runtime.Object) {
	m.rv++
	meta, _ := obj.(metav1.Object)
	meta.SetResourceVersion(strconv.FormatInt(m.rv, 10))
	simDebugf(meta.GetNamespace()+map[bool]string{true: meta.GetName()}[resource == "namespaces"], "apiserver: %s %s %s/%s at %d", typ, resource, meta.GetNamespace(), meta.GetName(), m.rv)
	m.history = append(m.history, modelEvent{rv: m.rv, resource: resource, typ: typ, obj: obj.DeepCopyObject()})
	m.counts[resource+" "+string(typ)]++
	m.changed.Broadcast()
}

func (m *apiServerModel) createNamespace(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.namespaces[name] != nil {
		return false
	}
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	m.record("namespaces", watch.Added, ns)
	m.namespaces[name] = ns
	return true
}

// deleteNamespace deletes its ConfigMaps, then it.
func (m *apiServerModel) deleteNamespace(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := m.namespaces[name]
	if ns == nil {
		return
	}
	for key, cm := range m.configMaps {
		if cm.Namespace == name {
			m.record("configmaps", watch.Deleted, cm)
			delete(m.configMaps, key)
		}
	}
	m.record("namespaces", watch.Deleted, ns)
	delete(m.namespaces, name)
}

// writeConfigMap creates (or with update, updates) namespace/name; false if
// the namespace is gone or the object's existence is not what it should be.
func (m *apiServerModel) writeConfigMap(namespace, name string, update bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + name
	old := m.configMaps[key]
	if m.namespaces[namespace] == nil || (old != nil) != update {
		return false
	}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	typ := watch.Added
	if update {
		cm = old.DeepCopy()
		cm.Data = map[string]string{"v": strconv.FormatInt(m.rv, 10)}
		typ = watch.Modified
	}
	m.record("configmaps", typ, cm)
	m.configMaps[key] = cm
	return true
}

// deleteConfigMap deletes namespace/name and returns the deletion's
// version (0: there was none).
func (m *apiServerModel) deleteConfigMap(namespace, name string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + name
	cm := m.configMaps[key]
	if cm == nil {
		return 0
	}
	m.record("configmaps", watch.Deleted, cm)
	delete(m.configMaps, key)
	return m.rv
}

// compact forgets history up to now: every watch ends, and one resuming
// from an older version is told 410 Gone.
func (m *apiServerModel) compact() {
	m.mu.Lock()
	m.compacted = m.rv
	m.history = nil
	m.counts["compactions"]++
	m.mu.Unlock()
	m.closeWatches()
}

// stall freezes (or thaws) every watch's stream: a stalled watch keeps its
// connection and delivers nothing until thawed.
func (m *apiServerModel) stall(stalled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stalled = stalled
	m.changed.Broadcast()
}

// closeWatches ends every open watch early, as kube-apiserver ends one
// that falls behind.
func (m *apiServerModel) closeWatches() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for end := range m.watchers {
		close(end)
		delete(m.watchers, end)
	}
	m.changed.Broadcast()
}

// objects lists the live ConfigMaps' keys with their versions.
func (m *apiServerModel) configMapVersions() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for key, cm := range m.configMaps {
		out[key] = cm.ResourceVersion
	}
	return out
}

func (m *apiServerModel) countsNow() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{"version": int(m.rv), "compacted": int(m.compacted), "open watches": len(m.watchers)}
	for k, v := range m.counts {
		out[k] = v
	}
	return out
}

func (m *apiServerModel) namespaceNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name := range m.namespaces {
		out = append(out, name)
	}
	return out
}

func (m *apiServerModel) hasNamespace(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.namespaces[name] != nil
}

func (m *apiServerModel) serve(w http.ResponseWriter, r *http.Request) {
	// /api/v1/namespaces, /api/v1/configmaps, /api/v1/namespaces/NS/configmaps
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 3 || parts[0] != "api" || parts[1] != "v1" {
		http.NotFound(w, r)
		return
	}
	resource, namespace := parts[2], ""
	if len(parts) == 5 && parts[2] == "namespaces" {
		resource, namespace = parts[4], parts[3]
	}
	if resource != "namespaces" && resource != "configmaps" || len(parts) != 3 && len(parts) != 5 {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	selects, err := parseNamespaceShards(q.Get("shardSelector"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		m.watch(w, r, resource, namespace, selects)
		return
	}
	m.mu.Lock()
	beforeList := m.beforeList
	m.mu.Unlock()
	if resource == "configmaps" && beforeList != nil {
		beforeList()
	}
	m.list(w, resource, namespace, selects)
}

func (m *apiServerModel) list(w http.ResponseWriter, resource, namespace string, selects func(namespace string) bool) {
	m.mu.Lock()
	var items []json.RawMessage
	add := func(obj runtime.Object) {
		data, _ := json.Marshal(obj)
		items = append(items, data)
	}
	if resource == "namespaces" {
		for _, ns := range m.namespaces {
			add(ns)
		}
	} else {
		for _, cm := range m.configMaps {
			if (namespace == "" || cm.Namespace == namespace) && selects(cm.Namespace) {
				add(cm)
			}
		}
	}
	kind := map[string]string{"namespaces": "NamespaceList", "configmaps": "ConfigMapList"}[resource]
	version := strconv.FormatInt(m.rv, 10)
	m.counts["list "+resource]++
	for i, f := range m.folded {
		if f.through < 0 && f.resource == resource && (namespace == "" || f.namespace == namespace) {
			m.folded[i].through = m.rv
		}
	}
	m.mu.Unlock()
	if items == nil {
		items = []json.RawMessage{}
	}
	// The answer takes a while on its way: what changes meanwhile reaches
	// the client's watch before its list, newer than it.
	if m.listLatency > 0 {
		time.Sleep(time.Duration(rand.Int63n(int64(m.listLatency))))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]string{"resourceVersion": version}, "items": items})
	if m.compactAfterList != nil && m.compactAfterList() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		m.compact()
	}
}

func (m *apiServerModel) watch(w http.ResponseWriter, r *http.Request, resource, namespace string, selects func(namespace string) bool) {
	q := r.URL.Query()
	initialEvents := q.Get("sendInitialEvents") == "true"
	from, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	if err != nil && !initialEvents {
		http.Error(w, "the model watches from a version only", http.StatusBadRequest)
		return
	}
	timeout := 5 * time.Second
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 {
		timeout = min(timeout, time.Duration(s)*time.Second)
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	end := make(chan struct{})
	m.mu.Lock()
	m.watchers[end] = struct{}{}
	m.counts["watch "+resource]++
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	encoder := json.NewEncoder(w)
	send := func(typ watch.EventType, obj runtime.Object) bool {
		data, _ := json.Marshal(obj)
		if err := encoder.Encode(map[string]any{"type": typ, "object": json.RawMessage(data)}); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		// Wake the loop below when the watch ends for any reason.
		select {
		case <-end:
		case <-r.Context().Done():
		case <-time.After(timeout):
		case <-done:
		}
		m.mu.Lock()
		if _, open := m.watchers[end]; open {
			delete(m.watchers, end)
			close(end)
		}
		m.changed.Broadcast()
		m.mu.Unlock()
	}()
	m.mu.Lock()
	if initialEvents {
		// A streaming list (client-go's WatchList): every object as an
		// addition, then a bookmark that ends them, then the events.
		var initial []runtime.Object
		if resource == "namespaces" {
			for _, ns := range m.namespaces {
				initial = append(initial, ns.DeepCopy())
			}
		} else {
			for _, cm := range m.configMaps {
				if (namespace == "" || cm.Namespace == namespace) && selects(cm.Namespace) {
					initial = append(initial, cm.DeepCopy())
				}
			}
		}
		from = m.rv
		m.mu.Unlock()
		for _, obj := range initial {
			if !send(watch.Added, obj) {
				return
			}
		}
		end := m.bookmarkObject(resource, from)
		end.(metav1.Object).SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		if !send(watch.Bookmark, end) {
			return
		}
		m.mu.Lock()
	}
	if from < m.compacted {
		m.folded = append(m.folded, foldedRange{resource: resource, namespace: namespace, after: from, through: -1})
		m.mu.Unlock()
		status := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, m.compacted)).Status()
		status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
		send(watch.Error, &status)
		return
	}
	lastBookmark := time.Now()
	for {
		var batch []modelEvent
		stalled := m.stalled
		for _, e := range m.history {
			if ns := e.obj.(metav1.Object).GetNamespace(); !stalled && e.rv > from && e.resource == resource && (namespace == "" || ns == namespace) && (resource == "namespaces" || selects(ns)) {
				batch = append(batch, e)
			}
		}
		if !stalled && len(m.history) > 0 && m.history[len(m.history)-1].rv > from {
			from = m.history[len(m.history)-1].rv
		}
		now := m.rv
		_, open := m.watchers[end]
		m.mu.Unlock()
		if !open {
			return
		}
		if resource == "namespaces" && len(batch) > 0 && m.namespaceLatency > 0 {
			time.Sleep(time.Duration(rand.Int63n(int64(m.namespaceLatency))))
		}
		for _, e := range batch {
			if !send(e.typ, e.obj) {
				return
			}
		}
		if bookmarks && !stalled && time.Since(lastBookmark) > 100*time.Millisecond {
			lastBookmark = time.Now()
			if !send(watch.Bookmark, m.bookmarkObject(resource, now)) {
				return
			}
		}
		m.mu.Lock()
		if _, open := m.watchers[end]; open && (m.stalled || len(m.history) == 0 || m.history[len(m.history)-1].rv <= from) {
			waitFor(m.changed, 100*time.Millisecond)
		}
	}
}

// bookmarkObject is an object of resource's kind carrying only version.
func (m *apiServerModel) bookmarkObject(resource string, version int64) runtime.Object {
	obj := map[string]runtime.Object{"namespaces": &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}}, "configmaps": &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}}[resource]
	obj.(metav1.Object).SetResourceVersion(strconv.FormatInt(version, 10))
	return obj
}

// waitFor waits on c (its lock held) at most d.
func waitFor(c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	c.Wait()
	t.Stop()
}

// startModelPool starts a pool with the Namespaces informer the owned
// cache follows, and a RESTMapper of the model's two kinds.
func startModelPool(ctx context.Context, t *testing.T, client kubernetes.Interface) (*Pool, cache.SharedIndexInformer, meta.RESTMapper) {
	t.Helper()
	pool := NewPool(ctx, PoolConfig{Client: client})
	namespaces, _ := pool.Namespaces(t)
	pool.Start(t)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	return pool, namespaces, mapper
}

// rowPartition places namespace ns-i in partition i+1 and every other
// namespace in partition 0: the layout of the tests that gain or hold one
// row's partition at a time.
func rowPartition(ns string) int {
	var i int
	if _, err := fmt.Sscanf(ns, "ns-%d", &i); err != nil {
		return 0
	}
	return (i + 1) % rowPartitions
}

// rowPartitions is how many partitions rowPartition places in.
const rowPartitions = 64

// startRowCache starts an owned cache of the model's ConfigMaps, placed
// by rowPartition, with partition 0 loaded, and returns it and its
// ConfigMap informer once synced. Create the rows' namespaces first.
func startRowCache(ctx context.Context, t *testing.T, model *apiServerModel, sharded bool) (*OwnedCache, cache.SharedIndexInformer) {
	t.Helper()
	return startModelCache(ctx, t, model, OwnedCacheConfig{Sharded: sharded, MaxTerms: 2, PartitionOf: rowPartition, Partitions: rowPartitions}, false)
}

// startModelCache starts an owned cache of the model's ConfigMaps made
// from cfg, its clients, mapper and Namespaces informer (with its
// creations, if asked) filled in, with partition 0 loaded, and returns it
// and its ConfigMap informer once synced.
func startModelCache(ctx context.Context, t *testing.T, model *apiServerModel, cfg OwnedCacheConfig, creations bool) (*OwnedCache, cache.SharedIndexInformer) {
	t.Helper()
	config := &rest.Config{Host: model.server.URL, QPS: -1}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	pool, namespaces, mapper := startModelPool(ctx, t, client)
	cfg.RESTClients, cfg.Mapper, cfg.Namespaces = NewRESTClients(config), mapper, namespaces
	if creations {
		cfg.Creations = pool.creations
	}
	owned, err := NewOwnedCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	informer := owned.InformerFor(&corev1.ConfigMap{})
	if err := owned.Include(ctx, 0); err != nil {
		t.Fatal(err)
	}
	owned.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the owned cache never synced")
	}
	return owned, informer
}

// heldIn is what informer holds in namespace ns: name -> resourceVersion.
func heldIn(informer cache.SharedIndexInformer, ns string) map[string]string {
	out := map[string]string{}
	objs, _ := informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	for _, obj := range objs {
		m, _ := meta.Accessor(obj)
		out[m.GetName()] = m.GetResourceVersion()
	}
	return out
}

// configMapsIn is what the model holds in namespace ns: name ->
// resourceVersion.
func (m *apiServerModel) configMapsIn(ns string) map[string]string {
	out := map[string]string{}
	for key, version := range m.configMapVersions() {
		if name, ok := strings.CutPrefix(key, ns+"/"); ok {
			out[name] = version
		}
	}
	return out
}

// inBothListModes runs test with the owned cache listing by shard
// selectors and without.
func inBothListModes(t *testing.T, test func(t *testing.T, sharded bool)) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) { test(t, sharded) })
	}
}
