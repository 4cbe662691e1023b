package informers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	fakemetadata "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
)

// eventually polls cond for up to 5 seconds.
func eventually(cond func() bool) bool {
	for range 250 {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// TestPoolStopsWhatNoOneUses: an informer of the pool runs while any user
// holds it and stops when the last one releases it; asking again makes a
// new one, which holds the cluster's objects.
func TestPoolStopsWhatNoOneUses(t *testing.T) {
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	podKind := corev1.SchemeGroupVersion.WithKind("Pod")
	cases := []struct {
		name string
		// get gives user the informer under test.
		get func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer
	}{
		{"typed, by resource", func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			i, err := p.ForResource(user, pods, podKind)
			if err != nil {
				t.Fatal(err)
			}
			return i
		}},
		{"typed, by kind", func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			return p.InformerFor(user, &corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
				return coreinformers.NewPodInformer(c, metav1.NamespaceAll, resync, cache.Indexers{})
			})
		}},
		{"metadata", func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			return p.MetadataFor(user, pods)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replica, stop := context.WithCancel(context.Background())
			defer stop()
			p := poolOf(t, replica, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}, "Pod")

			first := tc.get(t, p, "a")
			if again := tc.get(t, p, "b"); again != first {
				t.Fatal("a second user got another informer of the same kind")
			}
			p.Start("a")
			synced := p.WaitForCacheSync("b", replica.Done())
			if len(synced) != 1 || slices.Contains(mapValues(synced), false) {
				t.Fatalf("b's informers: %v", synced)
			}
			if got := first.GetStore().ListKeys(); len(got) != 1 || got[0] != "ns/p" {
				t.Fatalf("the informer holds %v, want ns/p", got)
			}
			p.Release("a")
			time.Sleep(100 * time.Millisecond)
			if first.IsStopped() {
				t.Fatal("releasing one of two users stopped the informer")
			}
			p.Release("b")
			if !eventually(first.IsStopped) {
				t.Fatal("the informer runs on with no user")
			}
			if got := p.Running(); len(got) != 0 {
				t.Fatalf("the pool still lists %v", got)
			}
			next := tc.get(t, p, "c")
			if next == first {
				t.Fatal("a stopped informer was handed out again")
			}
			p.Start("c")
			if !cache.WaitForCacheSync(replica.Done(), next.HasSynced) || len(next.GetStore().ListKeys()) != 1 {
				t.Fatalf("the new informer holds %v, want ns/p", next.GetStore().ListKeys())
			}
			stop()
			if !eventually(next.IsStopped) {
				t.Fatal("the replica ended and an informer runs on")
			}
		})
	}
}

// TestPoolStartsWhatIsAskedForAfterStart: an informer a started user asks
// for later runs at once (resourcequota's evaluators ask for theirs at a
// usage calculation, after the piece's informers started; left stopped,
// their listers never synced and every create counted by them was
// Forbidden), whichever way it is asked for, and whether the informer is
// new or another user's that was not started.
func TestPoolStartsWhatIsAskedForAfterStart(t *testing.T) {
	configMaps := corev1.SchemeGroupVersion.WithResource("configmaps")
	cases := []struct {
		name string
		// before: another user, not started, made the informer first.
		before bool
		get    func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer
	}{
		{"typed by resource, new", false, func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			i, err := p.ForResource(user, configMaps, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if err != nil {
				t.Fatal(err)
			}
			return i
		}},
		{"typed by kind, new", false, func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			return p.InformerFor(user, &corev1.ConfigMap{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
				return coreinformers.NewConfigMapInformer(c, metav1.NamespaceAll, resync, cache.Indexers{})
			})
		}},
		{"metadata, new", false, func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			return p.MetadataFor(user, configMaps)
		}},
		{"typed by resource, made by a user not started", true, func(t *testing.T, p *Pool, user any) cache.SharedIndexInformer {
			i, err := p.ForResource(user, configMaps, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if err != nil {
				t.Fatal(err)
			}
			return i
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replica, stop := context.WithCancel(context.Background())
			defer stop()
			p := poolOf(t, replica, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}, "ConfigMap")
			if tc.before {
				tc.get(t, p, "idle")
			}
			p.Start("a")
			informer := tc.get(t, p, "a")
			ctx, cancel := context.WithTimeout(replica, 5*time.Second)
			defer cancel()
			if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
				t.Fatal("an informer asked for after its user started was never started")
			}
			if got := informer.GetStore().ListKeys(); len(got) != 1 || got[0] != "ns/c" {
				t.Fatalf("the informer holds %v, want ns/c", got)
			}
			p.Release("a")
			p.Release("idle")
			after := tc.get(t, p, "a")
			time.Sleep(100 * time.Millisecond)
			if after.HasSynced() {
				t.Fatal("a user that released everything still has its informers started at once")
			}
		})
	}
}

// poolOf is a pool over fake clients that hold obj, a core v1 object of
// kind, typed and as metadata.
func poolOf(t *testing.T, replica context.Context, obj metav1.Object, kind string) *Pool {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metadata := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}}
	return NewPool(replica, PoolConfig{Client: fake.NewSimpleClientset(obj.(runtime.Object)), Metadata: fakemetadata.NewSimpleMetadataClient(scheme, metadata)})
}

func mapValues[K comparable](m map[K]bool) []bool {
	out := make([]bool, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Running lists the informers running or made, by name.
func (p *Pool) Running() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.entries))
	for key := range p.entries {
		out = append(out, key.String())
	}
	return out
}
