package informers

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"
)

// listWatchTarget is where one kind is listed and watched.
type listWatchTarget struct {
	client rest.Interface
	// trunkClient watches, decoding loaded namespaces only (trunkClientFor).
	trunkClient rest.Interface
	resource    string
	listKind    schema.GroupVersionKind
	// fieldSelector: set on every list and watch (OwnedCacheConfig.FieldSelectors).
	fieldSelector string
	// selectWatch: a selected kind (OwnedCacheConfig.SelectedWatches).
	selectWatch bool
}

func (t *listWatchTarget) listNamespace(ctx context.Context, namespace string, options metav1.ListOptions) ([]runtime.Object, string, error) {
	options.Continue = ""
	options.FieldSelector = t.fieldSelector
	list, _, err := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return t.client.Get().Namespace(namespace).Resource(t.resource).VersionedParams(&o, scheme.ParameterCodec).Do(ctx).Get()
	}).ListWithAlloc(ctx, options)
	var items []runtime.Object
	if err == nil {
		items, err = meta.ExtractListWithAlloc(list)
	}
	var listMeta meta.List
	if err == nil {
		listMeta, err = meta.ListAccessor(list)
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing %s in namespace %s: %w", t.resource, namespace, err)
	}
	return items, listMeta.GetResourceVersion(), nil
}

// newList makes the kind's list of items at version.
func (t *listWatchTarget) newList(items []runtime.Object, version string) (runtime.Object, error) {
	obj, err := scheme.Scheme.New(t.listKind)
	if err == nil {
		err = meta.SetList(obj, items)
	}
	var listMeta meta.List
	if err == nil {
		listMeta, err = meta.ListAccessor(obj)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.resource, err)
	}
	listMeta.SetResourceVersion(version)
	return obj, nil
}

// newerVersion compares resourceVersions as the numbers etcd makes them.
func newerVersion(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
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
	client, err := rest.RESTClientFor(c.configFor(gv))
	if err != nil {
		return nil, fmt.Errorf("REST client for %s: %w", gv, err)
	}
	c.byGV[gv] = client
	return client, nil
}

// trunkClientFor is the client of a trunk's watch of kind in gv, decoding
// only the namespaces keep accepts (namespaceSkippingDecoder).
func (c *RESTClients) trunkClientFor(gv schema.GroupVersion, kind string, keep func(namespace string) bool) (rest.Interface, error) {
	config := c.configFor(gv)
	config.NegotiatedSerializer = namespaceSkippingSerializer{NegotiatedSerializer: config.NegotiatedSerializer, kind: kind, keep: keep}
	client, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("REST client for watching %s in %s: %w", kind, gv, err)
	}
	return client, nil
}

// configFor configures a client of gv as the typed clientset does.
func (c *RESTClients) configFor(gv schema.GroupVersion) *rest.Config {
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
	return config
}
