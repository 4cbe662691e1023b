package informers

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/klog/v2"
)

// ErrNotServed: the apiserver answered and does not serve the kind.
var ErrNotServed = errors.New("not served by the apiserver")

// KindScopes tells whether a kind is cluster-scoped. An error other than
// ErrNotServed means the answer is not known (discovery failed), never
// that the kind is namespaced.
type KindScopes interface {
	ClusterScoped(gvk schema.GroupVersionKind) (bool, error)
	ClusterScopedResource(gvr schema.GroupVersionResource) (bool, error)
}

// DiscoveryScopes reads a kind's scope from discovery of its group
// version, not a RESTMapper, which reports a kind not served and one whose
// group failed to load alike ("no matches for kind").
type DiscoveryScopes struct {
	Discovery discovery.CachedDiscoveryInterface
}

func (d DiscoveryScopes) ClusterScoped(gvk schema.GroupVersionKind) (bool, error) {
	return d.find(gvk.GroupVersion(), gvk.String(), func(r metav1.APIResource) bool { return r.Kind == gvk.Kind })
}

func (d DiscoveryScopes) ClusterScopedResource(gvr schema.GroupVersionResource) (bool, error) {
	return d.find(gvr.GroupVersion(), gvr.String(), func(r metav1.APIResource) bool { return r.Name == gvr.Resource })
}

// find reads the scope of the resource of gv that match picks.
func (d DiscoveryScopes) find(gv schema.GroupVersion, what string, match func(metav1.APIResource) bool) (bool, error) {
	list, err := d.Discovery.ServerResourcesForGroupVersion(gv.String())
	if errors.Is(err, memory.ErrCacheNotFound) {
		// A group installed since, or not served: ask once more, afresh.
		d.Discovery.Invalidate()
		list, err = d.Discovery.ServerResourcesForGroupVersion(gv.String())
		if errors.Is(err, memory.ErrCacheNotFound) {
			return false, fmt.Errorf("%s: group version %w", what, ErrNotServed)
		}
	}
	if err != nil {
		d.Discovery.Invalidate()
		return false, fmt.Errorf("discovery of %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if match(r) && !strings.Contains(r.Name, "/") { // not a subresource
			return !r.Namespaced, nil
		}
	}
	return false, fmt.Errorf("%s: %w", what, ErrNotServed)
}

// scopeRetry paces the retries of a failed scope look-up.
var scopeRetry = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 30 * time.Second}

// clusterScopedKind is clusterScopedWhenKnown for gvk.
func clusterScopedKind(logger klog.Logger, scopes KindScopes, gvk schema.GroupVersionKind, stop <-chan struct{}) bool {
	return clusterScopedWhenKnown(logger, func() (bool, error) { return scopes.ClusterScoped(gvk) }, gvk.String(), stop)
}

// clusterScopedResource is clusterScopedWhenKnown for gvr.
func clusterScopedResource(logger klog.Logger, scopes KindScopes, gvr schema.GroupVersionResource, stop <-chan struct{}) bool {
	return clusterScopedWhenKnown(logger, func() (bool, error) { return scopes.ClusterScopedResource(gvr) }, gvr.String(), stop)
}

// clusterScopedWhenKnown asks until it answers, or stop closes (then
// "namespaced": the replica is ending). A kind not served counts as
// namespaced: its informer fails to list wherever placed, as in KCM, and a
// partition view filters it rather than leak other namespaces.
func clusterScopedWhenKnown(logger klog.Logger, ask func() (bool, error), what string, stop <-chan struct{}) bool {
	backoff := scopeRetry
	for {
		clusterScoped, err := ask()
		switch {
		case err == nil:
			return clusterScoped
		case errors.Is(err, ErrNotServed):
			logger.V(2).Info("Kind not served by the apiserver; placed as namespaced", "kind", what, "reason", err)
			return false
		}
		delay := backoff.Step()
		logger.Error(err, "Cannot tell whether a kind is namespaced; asking discovery again", "kind", what, "retryIn", delay.Round(time.Millisecond))
		select {
		case <-stop:
			return false
		case <-time.After(delay):
		}
	}
}
