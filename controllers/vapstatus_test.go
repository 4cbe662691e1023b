package controllers

import (
	"errors"
	"reflect"
	"testing"
	"time"

	apiextensionsscheme "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/scheme"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kubernetes/pkg/generated/openapi"
)

// manualClock runs what is scheduled on it when the test moves it on,
// in order, outside any lock.
type manualClock struct {
	now     time.Time
	pending []scheduled
}

type scheduled struct {
	at time.Time
	f  func()
}

func (c *manualClock) Now() time.Time { return c.now }

func (c *manualClock) AfterFunc(d time.Duration, f func()) {
	c.pending = append(c.pending, scheduled{c.now.Add(d), f})
}

// step moves the clock on by d, running every function due on the way at
// its time.
func (c *manualClock) step(d time.Duration) {
	end := c.now.Add(d)
	for {
		next := -1
		for i, s := range c.pending {
			if !s.at.After(end) && (next < 0 || s.at.Before(c.pending[next].at)) {
				next = i
			}
		}
		if next < 0 {
			c.now = end
			return
		}
		due := c.pending[next]
		c.pending = append(c.pending[:next], c.pending[next+1:]...)
		c.now = due.at
		due.f()
	}
}

// countingResolver counts the resolvers built and resolves every GVK to
// the number of the build that made it.
type countingResolver struct{ build int }

func (c countingResolver) ResolveSchema(schema.GroupVersionKind) (*spec.Schema, error) {
	return &spec.Schema{SchemaProps: spec.SchemaProps{ID: string(rune('0' + c.build))}}, nil
}

func TestIdleDroppedResolver(t *testing.T) {
	const idle = 2 * time.Minute
	type step struct {
		wait        time.Duration // fake time passed before the step
		resolve     bool          // resolve a schema at the step
		wantBuilds  int           // resolvers built so far
		wantLoaded  bool          // a resolver held after the step
		wantBuildID int           // which build answered (with resolve)
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing built before the first type check", []step{
			{wait: time.Hour, wantBuilds: 0, wantLoaded: false},
		}},
		{"built at first use and kept while used", []step{
			{resolve: true, wantBuilds: 1, wantLoaded: true, wantBuildID: 1},
			{wait: idle / 2, resolve: true, wantBuilds: 1, wantLoaded: true, wantBuildID: 1},
			{wait: idle / 2, wantBuilds: 1, wantLoaded: true},
			{wait: idle/2 - time.Second, wantBuilds: 1, wantLoaded: true},
		}},
		{"dropped after idle, built again at the next use", []step{
			{resolve: true, wantBuilds: 1, wantLoaded: true, wantBuildID: 1},
			{wait: idle, wantBuilds: 1, wantLoaded: false},
			{wait: time.Hour, wantBuilds: 1, wantLoaded: false},
			{resolve: true, wantBuilds: 2, wantLoaded: true, wantBuildID: 2},
			{wait: idle, wantBuilds: 2, wantLoaded: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: time.Unix(0, 0)}
			builds := 0
			r := newIdleDroppedResolver(func() resolver.SchemaResolver {
				builds++
				return countingResolver{build: builds}
			}, idle, clk, klog.Background())
			defer r.stop()
			for i, s := range tt.steps {
				clk.step(s.wait)
				if s.resolve {
					got, err := r.ResolveSchema(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if want := string(rune('0' + s.wantBuildID)); got.ID != want {
						t.Errorf("step %d: answered by build %s, want %s", i, got.ID, want)
					}
				}
				if builds != s.wantBuilds {
					t.Errorf("step %d: %d builds, want %d", i, builds, s.wantBuilds)
				}
				if r.loaded() != s.wantLoaded {
					t.Errorf("step %d: loaded %v, want %v", i, r.loaded(), s.wantLoaded)
				}
			}
		})
	}
}

// notFound is a discovery resolver that knows nothing, so any answer comes
// from the definitions.
type notFound struct{}

func (notFound) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	return nil, errors.New("not in discovery")
}

// TestIdleDroppedResolverSameSchemas: the controller type checks against
// the schemas KCM's eager resolver gives, also after a drop and rebuild.
func TestIdleDroppedResolverSameSchemas(t *testing.T) {
	build := func() resolver.SchemaResolver {
		return resolver.NewDefinitionsSchemaResolver(openapi.GetOpenAPIDefinitions, k8sscheme.Scheme, apiextensionsscheme.Scheme).Combine(notFound{})
	}
	eager := build()
	clk := &manualClock{now: time.Unix(0, 0)}
	lazy := newIdleDroppedResolver(build, time.Minute, clk, klog.Background())
	defer lazy.stop()
	gvks := []schema.GroupVersionKind{
		{Group: "apps", Version: "v1", Kind: "Deployment"},
		{Version: "v1", Kind: "ConfigMap"},
		{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		{Group: "example.com", Version: "v1", Kind: "Unknown"},
	}
	for round := 0; round < 2; round++ {
		for _, gvk := range gvks {
			want, wantErr := eager.ResolveSchema(gvk)
			got, err := lazy.ResolveSchema(gvk)
			if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("round %d, %s: got (%v, %v), KCM's resolver gives (%v, %v)", round, gvk, got != nil, err, want != nil, wantErr)
			}
		}
		clk.step(time.Minute)
		if lazy.loaded() {
			t.Fatalf("round %d: still loaded after a minute unused", round)
		}
	}
}
