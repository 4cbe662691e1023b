//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestReplicaCachesOwnedNamespaces runs the fleet in its default informer
// mode on an apiserver with the ShardedListAndWatch gate on (auto picks
// sharded-watch) and off (auto picks namespace-watch; sharded-watch asked
// for is refused with an error naming the gate). Each replica's cache
// holds exactly the objects of the namespaces of the partitions it runs,
// compared with full lists: once the fleet of two settled, after a third
// replica joined and partitions moved, and after namespaces were created
// and deleted; a Deployment in a namespace created while the fleet runs
// becomes available. ConfigMaps and Secrets are narrowed to what the
// partition controllers read (kube-root-ca.crt; service-account-token
// Secrets): the caches hold none of the others each namespace has, and a
// token Secret created while the fleet runs gets its token. From the
// audit log: each replica's owned cache holds one watch per kind
// throughout and opens none naming namespaces but, with the gate on, the
// Pods' (once more after a kill, for all it gained); the namespace created
// is listed alone; and after a kill -9 each survivor lists what it gained
// together, one request per kind and three namespaces (a selector names
// at most 3; without selectors, up to 3 namespaces are listed one by one,
// more in one cluster-wide list).
func TestReplicaCachesOwnedNamespaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		gateOff bool
		mode    string
	}{
		{"gate on", false, "sharded-watch"},
		{"gate off", true, "namespace-watch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inLane(t, laneHeavy)
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()
			opts := localcluster.Options{Scheduler: true, KwokNodes: 2, AuditReads: true}
			if tc.gateOff {
				opts.APIServerArgs = []string{"--feature-gates=ShardedListAndWatch=false"}
			}
			cluster := startCluster(ctx, t, opts)
			client, err := cluster.Client()
			if err != nil {
				t.Fatal(err)
			}
			httpClient, err := cluster.AdminHTTPClient()
			if err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(binDir(t), "fleet-controller-manager")
			if tc.gateOff {
				if _, _, err := cluster.StartFleetReplica(ctx, bin, "fcm-explicit", "--informer-mode=sharded-watch"); err == nil {
					t.Fatal("a replica asking for sharded-watch started on an apiserver without it")
				}
				log, _ := os.ReadFile(filepath.Join(cluster.Dir, "fcm-explicit.log"))
				if !strings.Contains(string(log), "ShardedListAndWatch") {
					t.Fatalf("the refusal does not name the feature gate:\n%s", log)
				}
			}
			for i := range 8 {
				ns := fmt.Sprintf("team-%02d", i)
				createNamespace(ctx, t, client, ns)
				createDeployment(ctx, t, client, ns, "web", 1)
				createUncachedObjects(ctx, t, client, ns)
			}
			ports := map[string]int{}
			procs := map[string]*localcluster.Process{}
			start := func(name string) {
				proc, port, err := cluster.StartFleetReplica(ctx, bin, name, "--shard-selector-max-terms=3", "--namespace-watch-max-namespaces=3")
				if err != nil {
					t.Fatal(err)
				}
				ports[name], procs[name] = port, proc
				log, _ := os.ReadFile(proc.LogPath)
				if !strings.Contains(string(log), fmt.Sprintf("informerMode=%q", tc.mode)) {
					t.Fatalf("%s did not choose %s:\n%s", name, tc.mode, proc.LogTail(30))
				}
			}
			start("fcm-0")
			start("fcm-1")
			waitFleetRunning(ctx, t, client, []string{"fcm-0", "fcm-1"})
			waitCachesExact(ctx, t, client, httpClient, ports, "a fleet of two")
			checkOneWatchPerKind(t, cluster.AuditLog, ports, "a fleet of two", !tc.gateOff)

			start("fcm-2")
			waitFleetRunning(ctx, t, client, []string{"fcm-0", "fcm-1", "fcm-2"})
			waitCachesExact(ctx, t, client, httpClient, ports, "after a third replica joined")
			checkOneWatchPerKind(t, cluster.AuditLog, ports, "after a third replica joined", !tc.gateOff)

			created := time.Now()
			createNamespace(ctx, t, client, "late-arrival")
			createDeployment(ctx, t, client, "late-arrival", "web", 2)
			createUncachedObjects(ctx, t, client, "late-arrival")
			waitTokenFilled(ctx, t, client, "late-arrival")
			handled := time.Now() // its token Secret was cached and filled
			if err := client.CoreV1().Namespaces().Delete(ctx, "team-00", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitDeploymentReady(ctx, t, client, "late-arrival", "web", 2, 3*time.Minute)
			poll(ctx, t, "team-00 to be deleted", 3*time.Minute, func() (bool, string) {
				_, err := client.CoreV1().Namespaces().Get(ctx, "team-00", metav1.GetOptions{})
				return apierrors.IsNotFound(err), fmt.Sprint(err)
			})
			waitCachesExact(ctx, t, client, httpClient, ports, "after namespaces were created and deleted")
			checkOneWatchPerKind(t, cluster.AuditLog, ports, "after namespaces were created and deleted", !tc.gateOff)
			// While the namespace created was handled, it was listed
			// alone: nothing else was listed again (a first list of
			// namespaces is not listing them again), but for a kind whose
			// watch could not resume (its version gone from the watch
			// cache: the kind is listed again, as by any informer, once
			// its reflector's backoff has passed) and a kind listed for
			// the first time (a controller asked for it only now).
			for name := range ports {
				requests := ownedCacheRequests(t, cluster.AuditLog, name, created)
				for _, l := range requests.listed {
					if namesOnly(l.uri, "late-arrival") || l.at.After(handled) {
						continue
					}
					if ended, ok := requests.relistAfterWatchEnd(l.resource, l.at); ok {
						t.Logf("%s's owned cache listed %s again %v after its watch ended: %s", name, l.resource, l.at.Sub(ended).Round(time.Millisecond), l.uri)
						continue
					}
					if requests.firstList(l.resource, l.at) {
						t.Logf("%s's owned cache listed %s for the first time: %s", name, l.resource, l.uri)
						continue
					}
					if requests.firstListOfNamespaces(l) {
						// The join's load of a kind the caches check above
						// does not read, answered late (seen on a loaded
						// machine: a replica's two gained namespaces, seven
						// kinds, after the namespace was created).
						t.Logf("%s's owned cache listed %s in namespaces it had not listed before: %s", name, l.resource, l.uri)
						continue
					}
					t.Errorf("%s's owned cache listed more than the namespace created, its watch of %s open (%d watches of it ended before, %d open): %s",
						name, l.resource, len(requests.watchEnded[l.resource]), requests.open[l.resource], l.uri)
				}
			}

			// kill -9 of a replica: each survivor lists what it gains
			// in one request per kind and selector's worth of
			// namespaces (three here), and opens no watch for it.
			before := map[string][]int{}
			for _, name := range []string{"fcm-0", "fcm-1"} {
				if before[name], _, err = runningPieces(ctx, client, name); err != nil {
					t.Fatal(err)
				}
			}
			killed := time.Now()
			if err := procs["fcm-2"].Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			delete(ports, "fcm-2")
			waitCachesExact(ctx, t, client, httpClient, ports, "after a replica of three was killed")
			namespaces, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for name := range ports {
				after, _, err := runningPieces(ctx, client, name)
				if err != nil {
					t.Fatal(err)
				}
				gained := map[int]bool{}
				for _, p := range after {
					if !slices.Contains(before[name], p) {
						gained[p] = true
					}
				}
				n := 0
				for _, ns := range namespaces.Items {
					if gained[shard.DefaultRingConfig.NamespacePartition(ns.Name)] {
						n++
					}
				}
				want := (n + 2) / 3 // shard selectors of three namespaces
				if tc.gateOff && n <= 3 {
					want = n // one by one up to --namespace-watch-max-namespaces
				} else if tc.gateOff {
					want = 1 // past it, one cluster-wide list
				}
				got := ownedCacheRequests(t, cluster.AuditLog, name, killed)
				t.Logf("%s gained %d partitions (%d namespaces): owned cache lists %v, watches %v", name, len(gained), n, got.lists, got.watches)
				for resource, lists := range got.lists {
					if lists > want {
						t.Errorf("%s listed %s %d times for the %d namespaces it gained at once, want at most %d", name, resource, lists, n, want)
					}
				}
				for resource, scoped := range got.scoped {
					// The Pods' watch names the replica's namespaces
					// (sharded-watch): gaining them at once opens it
					// once more.
					if resource == "pods" && !tc.gateOff && scoped <= 1 {
						continue
					}
					t.Errorf("%s's owned cache opened %d watches of %s naming namespaces after the kill", name, scoped, resource)
				}
			}
			checkOneWatchPerKind(t, cluster.AuditLog, ports, "after a replica of three was killed", !tc.gateOff)
		})
	}
}

// checkOneWatchPerKind fails unless every replica's owned cache holds at
// most one watch per kind, and has opened none naming namespaces but, in
// sharded-watch (selectedPods), the Pods' watch: that one names them on
// some replica (not on one holding Pods everywhere), and the other kinds'
// partitions and namespaces come and go by lists alone.
func checkOneWatchPerKind(t *testing.T, auditLog string, ports map[string]int, when string, selectedPods bool) {
	t.Helper()
	podsSelected := 0
	for name := range ports {
		r := ownedCacheRequests(t, auditLog, name, time.Time{})
		for resource, open := range r.open {
			if open > 1 {
				t.Errorf("%s: %s's owned cache holds %d watches of %s, want at most one", when, name, open, resource)
			}
		}
		for resource, scoped := range r.scoped {
			if resource == "pods" && selectedPods {
				podsSelected++
				t.Logf("%s: %s's owned cache opened %d watches of pods naming namespaces", when, name, scoped)
				continue
			}
			t.Errorf("%s: %s's owned cache opened %d watches of %s naming namespaces", when, name, scoped, resource)
		}
		if r.open["pods"] != 1 {
			t.Errorf("%s: %s's owned cache holds %d watches of pods, want one", when, name, r.open["pods"])
		}
	}
	if selectedPods && podsSelected == 0 {
		t.Errorf("%s: no replica's owned cache watches Pods naming its namespaces", when)
	}
}

// namesOnly says whether a list's request URI asks for namespace ns alone:
// its path, or a shard selector with one term, ns's hash.
func namesOnly(uri, ns string) bool {
	if strings.Contains(uri, "/namespaces/"+ns+"/") {
		return true
	}
	unescaped, err := url.QueryUnescape(uri)
	if err != nil {
		return false
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(ns))
	return strings.Count(unescaped, "shardRange(") == 1 && strings.Contains(unescaped, fmt.Sprintf("'0x%016x'", h.Sum64()))
}

// waitCachesExact waits until every replica's cache holds exactly the
// ConfigMaps, Deployments, ReplicaSets and Pods of the namespaces of the
// partitions it runs, by a full list of each, and the replicas' loaded
// partitions are those they run: all partitions, each once. The replica
// running the colocated singletons (podgc among them) holds every Pod,
// once, and it alone.
func waitCachesExact(ctx context.Context, t *testing.T, client kubernetes.Interface, httpClient *http.Client, ports map[string]int, when string) {
	t.Helper()
	ring := shard.DefaultRingConfig
	start := time.Now()
	var sizes []string
	poll(ctx, t, "caches to hold exactly the owned namespaces "+when, 2*time.Minute, func() (bool, string) {
		all, err := fullLists(ctx, client)
		if err != nil {
			return false, err.Error()
		}
		seen := map[int]string{}
		sizes = nil
		for name, port := range ports {
			running, colocated, err := runningPieces(ctx, client, name)
			if err != nil {
				return false, err.Error()
			}
			status, err := cacheStatus(httpClient, port)
			if err != nil {
				return false, err.Error()
			}
			if fmt.Sprint(status.Partitions) != fmt.Sprint(running) {
				return false, fmt.Sprintf("%s runs partitions %v, has loaded %v", name, running, status.Partitions)
			}
			if fmt.Sprint(status.Served) != fmt.Sprint(running) {
				return false, fmt.Sprintf("%s runs partitions %v, serves %v", name, running, status.Served)
			}
			owned := map[int]bool{}
			for _, p := range status.Partitions {
				if other, ok := seen[p]; ok {
					return false, fmt.Sprintf("partition %d loaded by %s and %s", p, other, name)
				}
				seen[p] = name
				owned[p] = true
			}
			everywhere := map[string]bool{}
			for _, resource := range status.Everywhere {
				everywhere[resource] = true
			}
			for resource, selector := range narrowedResources {
				if got := status.FieldSelectors[resource]; got != selector {
					return false, fmt.Sprintf("%s narrows %s by %q, want %q", name, resource, got, selector)
				}
			}
			if everywhere["pods"] != colocated {
				return false, fmt.Sprintf("%s runs the colocated singletons: %v, holds every Pod: %v", name, colocated, everywhere["pods"])
			}
			held := 0
			for resource, keys := range all {
				var want []string
				for _, key := range keys {
					ns, _, _ := strings.Cut(key, "/")
					if owned[ring.NamespacePartition(ns)] || everywhere[resource] {
						want = append(want, key)
					}
				}
				got := status.Keys[resource]
				if strings.Join(got, ",") != strings.Join(want, ",") {
					return false, fmt.Sprintf("%s caches %s %v, the namespaces it owns hold %v", name, resource, got, want)
				}
				held += len(got)
			}
			entry := fmt.Sprintf("%s: %d partitions, %d objects", name, len(status.Partitions), held)
			if everywhere["pods"] {
				entry += ", every Pod"
			}
			sizes = append(sizes, entry)
		}
		return len(seen) == ring.Partitions, fmt.Sprintf("%d partitions loaded", len(seen))
	})
	sort.Strings(sizes)
	t.Logf("%s: caches exact after %v (%s)", when, time.Since(start).Round(time.Millisecond), strings.Join(sizes, "; "))
}

// narrowedResources are the field selectors the replicas' owned caches
// list ConfigMaps and Secrets with: only what their partition controllers
// read (controllers.ownedSelections).
var narrowedResources = map[string]string{
	"configmaps": "metadata.name=kube-root-ca.crt",
	"secrets":    "type=kubernetes.io/service-account-token",
}

// createUncachedObjects creates in ns a ConfigMap and a Secret no
// partition controller reads, which the owned caches must not hold.
func createUncachedObjects(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "credentials"}, StringData: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitTokenFilled creates a token Secret for ns's default ServiceAccount
// and waits for the token controller, reading the narrowed Secrets, to
// write its token.
func waitTokenFilled(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	poll(ctx, t, "the default ServiceAccount of "+ns, time.Minute, func() (bool, string) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "default-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the token controller to fill "+ns+"/default-token", time.Minute, func() (bool, string) {
		got, err := client.CoreV1().Secrets(ns).Get(ctx, "default-token", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.Data[corev1.ServiceAccountTokenKey]) > 0, fmt.Sprintf("keys %v", len(got.Data))
	})
}

func fullLists(ctx context.Context, client kubernetes.Interface) (map[string][]string, error) {
	out := map[string][]string{}
	add := func(resource, ns, name string) { out[resource] = append(out[resource], ns+"/"+name) }
	cms, err := client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{FieldSelector: narrowedResources["configmaps"]})
	if err != nil {
		return nil, err
	}
	for _, o := range cms.Items {
		add("configmaps", o.Namespace, o.Name)
	}
	secrets, err := client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: narrowedResources["secrets"]})
	if err != nil {
		return nil, err
	}
	out["secrets"] = []string{}
	for _, o := range secrets.Items {
		add("secrets", o.Namespace, o.Name)
	}
	deployments, err := client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range deployments.Items {
		add("deployments", o.Namespace, o.Name)
	}
	replicaSets, err := client.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range replicaSets.Items {
		add("replicasets", o.Namespace, o.Name)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range pods.Items {
		add("pods", o.Namespace, o.Name)
	}
	for _, keys := range out {
		sort.Strings(keys)
	}
	return out, nil
}

// runningPieces reads member's Lease: the partitions it runs, and whether
// it runs the colocated singletons (podgc is one).
func runningPieces(ctx context.Context, client kubernetes.Interface, member string) (partitions []int, colocated bool, err error) {
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, member, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	st, err := membership.ParseState(lease.Annotations[membership.StateAnnotation])
	if err != nil {
		return nil, false, err
	}
	partitions = []int{}
	for _, piece := range st.Running {
		var p int
		if _, err := fmt.Sscanf(piece, "partition/%d", &p); err == nil {
			partitions = append(partitions, p)
		}
		if piece == "singleton/pod-garbage-collector-controller" {
			colocated = true
		}
	}
	sort.Ints(partitions)
	return partitions, colocated, nil
}

// cacheStatus reads a replica's /debug/fleet/cache (controllers.CachePath;
// this package does not import controllers, which links all of KCM).
func cacheStatus(client *http.Client, port int) (ownedCacheStatus, error) {
	const cachePath = "/debug/fleet/cache"
	var status ownedCacheStatus
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, cachePath))
	if err != nil {
		return status, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return status, fmt.Errorf("GET %s: HTTP %d", cachePath, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		return status, fmt.Errorf("GET %s: %w", cachePath, err)
	}
	if status.Partitions == nil {
		status.Partitions = []int{}
	}
	if status.Served == nil {
		status.Served = []int{}
	}
	return status, nil
}

// ownedCacheStatus is controllers.OwnedCacheStatus.
type ownedCacheStatus struct {
	Mode           string              `json:"mode"`
	Served         []int               `json:"served"`
	Partitions     []int               `json:"partitions"`
	Everywhere     []string            `json:"everywhere"`
	FieldSelectors map[string]string   `json:"fieldSelectors"`
	Keys           map[string][]string `json:"keys"`
	Loading        []shard.LocalLoad   `json:"loading"`
}
