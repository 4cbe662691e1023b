package controllers

import (
	"context"
	"k8s.io/klog/v2"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	clientinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	fakemetadata "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/controller-manager/pkg/informerfactory"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	"k8s.io/kubernetes/pkg/features"
)

// TestRaisedClientBudgets builds each controller KCM gives a raised client
// budget through its upstream descriptor, with the client builder of
// singleton pieces (all three are singletons), and checks the limiters its
// clients got: as many as KCM's constructor makes, each with the limits it
// asks for (client-go makes one limiter per client built from a config
// without one).
func TestRaisedClientBudgets(t *testing.T) {
	const qps, burst = 20, 30
	cases := []struct {
		controller string
		client     string
		gates      []featuregate.Feature
		// want: limiters of the client name after the build, by limits.
		want map[budgetKey]int
	}{
		{
			controller: names.NamespaceController,
			client:     "namespace-controller",
			// core.go newNamespaceController: QPS *= 20, Burst *= 100,
			// then a clientset and a metadata client from that config.
			want: map[budgetKey]int{{"namespace-controller", qps * 20, burst * 100}: 2},
		},
		{
			controller: names.GarbageCollectorController,
			client:     "generic-garbage-collector",
			// core.go newGarbageCollectorController: the typed client as
			// given, discovery at 20/200, the metadata client QPS *= 2.
			want: map[budgetKey]int{{"generic-garbage-collector", qps, burst}: 1, {"generic-garbage-collector", 20, 200}: 1, {"generic-garbage-collector", qps * 2, burst}: 1},
		},
		{
			controller: names.StorageVersionMigratorController,
			client:     names.StorageVersionMigratorController,
			gates:      []featuregate.Feature{features.StorageVersionMigrator},
			// storageversionmigrator.go: the typed client as given; the
			// CRD, dynamic, discovery and metadata clients QPS *= 20,
			// Burst *= 100.
			want: map[budgetKey]int{{names.StorageVersionMigratorController, qps, burst}: 1, {names.StorageVersionMigratorController, qps * 20, burst * 100}: 4},
		},
	}
	for _, tc := range cases {
		t.Run(tc.controller, func(t *testing.T) {
			for _, g := range tc.gates {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, g, true)
			}
			builder := newSharedLimiterBuilder(klog.Background(), clientbuilder.SimpleControllerClientBuilder{
				ClientConfig: &restclient.Config{Host: discoveryServer(t), QPS: qps, Burst: burst},
			}, "test", nil).forSingletons()
			c, err := Descriptors()[tc.controller].BuildController(t.Context(), testControllerContext(t, builder))
			if err != nil || c == nil {
				t.Fatalf("building %s: %v, %v", tc.controller, c, err)
			}
			got := map[budgetKey]int{}
			for k, n := range builder.ownLimiters {
				if k.name == tc.client {
					got[k] = n
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("limiters of %s clients: %v, want %v", tc.client, got, tc.want)
			}
			for _, k := range builder.budgets() {
				if k.name == tc.client {
					t.Errorf("a singleton's client shares a replica budget %+v", k)
				}
			}
		})
	}
}

// discoveryServer serves the discovery documents the namespace
// controller reads when it is built (it exits the process without any).
func discoveryServer(t *testing.T) string {
	docs := map[string]string{
		"/api":    `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis":   `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`,
		"/api/v1": `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","namespaced":true,"kind":"ConfigMap","verbs":["list","delete","deletecollection"]}]}`,
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(doc))
	}))
	t.Cleanup(server.Close)
	return server.URL
}

// testControllerContext is enough of a ControllerContext to build
// controllers (nothing is started).
func testControllerContext(t *testing.T, builder *sharedLimiterBuilder) kcmapp.ControllerContext {
	t.Helper()
	config, err := options.NewDefaultComponentConfig()
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeclient.NewClientset()
	typed := clientinformers.NewSharedInformerFactory(fake, 0)
	metadataClient := fakemetadata.NewSimpleMetadataClient(runtime.NewScheme())
	metadataFactory := metadatainformer.NewSharedInformerFactory(metadataClient, 0)
	objectOrMetadata := informerfactory.NewInformerFactory(typed, metadataFactory)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(fake.Discovery()))
	started := make(chan struct{})
	return kcmapp.ControllerContext{
		ClientBuilder:                   builder,
		ComponentConfig:                 config,
		InformerFactory:                 typed,
		ObjectOrMetadataInformerFactory: objectOrMetadata,
		RESTMapper:                      mapper,
		InformersStarted:                started,
		ResyncPeriod:                    func() time.Duration { return 0 },
		GraphBuilder:                    garbagecollector.NewDependencyGraphBuilder(t.Context(), metadataClient, mapper, nil, objectOrMetadata, started),
	}
}

// TestClientBudgetIsShared sends requests through clients of one name
// built from two configs (two pieces) and through one whose limits were
// raised: the first two share one token bucket, the raised one has its own.
func TestClientBudgetIsShared(t *testing.T) {
	var requests atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"}}`))
	}))
	defer server.Close()
	// A burst of 2 and a QPS too small to refill during the test: exactly
	// two requests pass at once per bucket.
	builder := newSharedLimiterBuilder(klog.Background(), clientbuilder.SimpleControllerClientBuilder{
		ClientConfig: &restclient.Config{Host: server.URL, QPS: 0.001, Burst: 2},
	}, "test", nil)
	build := func(raise bool) kubernetes.Interface {
		cfg, err := builder.Config("some-controller")
		if err != nil {
			t.Fatal(err)
		}
		if raise {
			cfg.Burst *= 2
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pieceA, pieceB, raised := build(false), build(false), build(true)
	passed := func(c kubernetes.Interface, n int) int {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		ok := 0
		for range n {
			if _, err := c.CoreV1().Namespaces().Get(ctx, "x", metav1.GetOptions{}); err == nil {
				ok++
			}
		}
		return ok
	}
	tests := []struct {
		name   string
		client kubernetes.Interface
		tries  int
		want   int
	}{
		{"first piece takes the shared burst", pieceA, 3, 2},
		{"second piece finds it spent", pieceB, 1, 0},
		{"raised limits have their own bucket", raised, 5, 4},
	}
	for _, tc := range tests {
		if got := passed(tc.client, tc.tries); got != tc.want {
			t.Errorf("%s: %d of %d requests passed, want %d", tc.name, got, tc.tries, tc.want)
		}
	}
	if got := requests.Load(); got != 6 {
		t.Errorf("server saw %d requests, want 6", got)
	}
}

// TestClientUserAgents: each client's user agent names the replica, the
// piece it acts for (the partition controllers' one client serves every
// partition) and its client name, so the audit log tells apart the
// writes of controllers KCM gives one client name (node-ipam,
// node-lifecycle and taint-eviction all build "node-controller").
func TestClientUserAgents(t *testing.T) {
	root := newSharedLimiterBuilder(klog.Background(), clientbuilder.SimpleControllerClientBuilder{
		ClientConfig: &restclient.Config{Host: "https://127.0.0.1:1"},
	}, "fcm-a", nil)
	for _, tc := range []struct {
		name    string
		builder *sharedLimiterBuilder
		client  string
		want    string
	}{
		{"a partition controller", root.forPartitions(nil), "node-controller", "fleet-controller-manager/fcm-a/partition/node-controller"},
		{"a singleton's run", root.forSingletons().forSingletonRun(nil, "singleton/node-lifecycle-controller"), "node-controller",
			"fleet-controller-manager/fcm-a/singleton/node-lifecycle-controller/node-controller"},
		{"another singleton with the same client name", root.forSingletons().forSingletonRun(nil, "singleton/node-ipam-controller"), "node-controller",
			"fleet-controller-manager/fcm-a/singleton/node-ipam-controller/node-controller"},
		{"no piece", root, "shared-informers", "fleet-controller-manager/fcm-a/shared-informers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.builder.Config(tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.UserAgent != tc.want {
				t.Errorf("user agent %q, want %q", cfg.UserAgent, tc.want)
			}
		})
	}
}
