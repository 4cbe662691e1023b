package informers

import (
	"errors"
	"k8s.io/klog/v2"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
)

// flakyDiscovery serves v1 (Nodes, Pods) and apps/v1 (Deployments); the
// first failures calls for v1's resources fail, as a discovery request
// does while the apiserver restarts.
type flakyDiscovery struct {
	discovery.DiscoveryInterface
	mu       sync.Mutex
	failures int
	calls    int
}

func (f *flakyDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	return &metav1.APIGroupList{Groups: []metav1.APIGroup{
		{Name: "", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}}},
		{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "apps/v1", Version: "v1"}}},
	}}, nil
}

func (f *flakyDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch gv {
	case "v1":
		f.calls++
		if f.calls <= f.failures {
			return nil, errors.New("the server is currently unable to handle the request")
		}
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{
			{Name: "nodes", Kind: "Node", Namespaced: false},
			{Name: "nodes/status", Kind: "Node", Namespaced: false},
			{Name: "pods", Kind: "Pod", Namespaced: true},
		}}, nil
	case "apps/v1":
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true},
		}}, nil
	}
	return nil, errors.New("unexpected group version " + gv)
}

// TestScopeIsNeverDecidedByAFailedDiscovery: a kind's scope comes from
// the apiserver's answer; while discovery fails the question is asked
// again (a failed group once made Nodes namespaced for a piece's life),
// and only a kind or group the apiserver does not serve counts as
// namespaced without an answer.
func TestScopeIsNeverDecidedByAFailedDiscovery(t *testing.T) {
	saved := scopeRetry
	scopeRetry = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 5, Cap: 50 * time.Millisecond}
	defer func() { scopeRetry = saved }()
	for _, tc := range []struct {
		name     string
		failures int
		gvk      schema.GroupVersionKind
		gvr      schema.GroupVersionResource
		want     bool
	}{
		{"Node, discovery answers", 0, schema.GroupVersionKind{Version: "v1", Kind: "Node"}, schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, true},
		{"Node, discovery fails three times", 3, schema.GroupVersionKind{Version: "v1", Kind: "Node"}, schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, true},
		{"Pod, discovery fails three times", 3, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, false},
		{"Deployment", 0, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, false},
		{"a kind not served", 0, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Widget"}, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "widgets"}, false},
		{"a group not served", 0, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := make(chan struct{})
			defer close(stop)
			byKind := DiscoveryScopes{Discovery: memory.NewMemCacheClient(&flakyDiscovery{failures: tc.failures})}
			if got := clusterScopedKind(klog.Background(), byKind, tc.gvk, stop); got != tc.want {
				t.Errorf("kind %s: cluster-scoped %v, want %v", tc.gvk, got, tc.want)
			}
			byResource := DiscoveryScopes{Discovery: memory.NewMemCacheClient(&flakyDiscovery{failures: tc.failures})}
			if got := clusterScopedResource(klog.Background(), byResource, tc.gvr, stop); got != tc.want {
				t.Errorf("resource %s: cluster-scoped %v, want %v", tc.gvr, got, tc.want)
			}
		})
	}
}

// TestScopeLookupEndsWithTheReplica: a discovery that never answers holds
// the question only until the replica ends.
func TestScopeLookupEndsWithTheReplica(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan bool)
	go func() {
		done <- clusterScopedKind(klog.Background(), DiscoveryScopes{Discovery: memory.NewMemCacheClient(&flakyDiscovery{failures: 1 << 30})}, schema.GroupVersionKind{Version: "v1", Kind: "Node"}, stop)
	}()
	select {
	case <-done:
		t.Fatal("answered while discovery failed")
	case <-time.After(300 * time.Millisecond):
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still asking after the replica ended")
	}
}
