//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientinformers "k8s.io/client-go/informers"
	fakeclient "k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-controller-manager/fleet-controller-manager/controllers"
	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestInformersLikeKubeControllerManager reads, from a fleet of one that
// runs every controller, which informers each controller was given
// (/debug/fleet/informers) and compares them with what
// kube-controller-manager's factory gives: one typed informer per
// resource where client-go has one (its ObjectOrMetadataInformerFactory
// tries typed first), metadata only where it has none, every object of
// the resource, started. Every informer must have synced (an informer
// made after its factory started and never started does not: the quota
// evaluators' ConfigMaps, Secrets and ReplicationControllers), a
// controller must not read one resource through two informers of
// different kinds, and every other difference from KCM must be named in
// docs/controllers.md's table of informer differences with its argument.
func TestInformersLikeKubeControllerManager(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := cluster.StartFleetReplica(ctx, filepath.Join(binDir(t), "fleet-controller-manager"), "fcm-0")
	if err != nil {
		t.Fatal(err)
	}
	waitFleetRunning(ctx, t, client, []string{"fcm-0"})
	// A quota: its evaluators ask for their informers at its first count.
	createNamespace(ctx, t, client, "census")
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "quota"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		"configmaps": resource.MustParse("10"), "secrets": resource.MustParse("10"), "replicationcontrollers": resource.MustParse("10"),
		"pods": resource.MustParse("10"), "services": resource.MustParse("10"), "persistentvolumeclaims": resource.MustParse("10"),
		"count/deployments.apps": resource.MustParse("10")}}}
	if _, err := client.CoreV1().ResourceQuotas("census").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	httpClient, err := cluster.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	var census map[string][]informers.InformerRecord
	read := func() (bool, string) {
		resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, controllers.InformersPath))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			return false, fmt.Sprintf("HTTP %d: %s %v", resp.StatusCode, body, err)
		}
		census = nil
		if err := json.Unmarshal(body, &census); err != nil {
			return false, err.Error()
		}
		var unsynced []string
		for piece, records := range census {
			for _, r := range records {
				if !r.Synced {
					unsynced = append(unsynced, fmt.Sprintf("%s: %s", piece, describe(r)))
				}
			}
		}
		sort.Strings(unsynced)
		_, quota := census["resourcequota-controller"]
		_, partition := census["partition"]
		return quota && partition && len(unsynced) == 0, fmt.Sprintf("%d pieces (partition controllers built: %v); not synced: %s", len(census), partition, strings.Join(unsynced, "; "))
	}
	poll(ctx, t, "every informer a controller was given to sync", time.Minute, read)
	// The quota's evaluators ask at its first count; read once more after it.
	poll(ctx, t, "the quota counted", 30*time.Second, func() (bool, string) {
		got, err := client.CoreV1().ResourceQuotas("census").Get(ctx, "quota", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.Status.Used) == len(q.Spec.Hard), fmt.Sprint(got.Status.Used)
	})
	poll(ctx, t, "every informer a controller was given to sync", time.Minute, read)

	if os.Getenv("FCM_E2E_CENSUS") != "" {
		for piece, records := range census {
			t.Logf("census: %s: %d informers", piece, len(records))
		}
		for _, piece := range []string{"partition", "resourcequota-controller", "garbage-collector-controller"} {
			for _, r := range census[piece] {
				t.Logf("census %s: %s", piece, describe(r))
			}
		}
	}
	allowed := readInformerDifferences(t)
	typedInKCM := func(group, res string) bool {
		for _, version := range []string{"v1", "v1beta1", "v1beta2", "v2", "v1alpha1"} {
			if _, err := clientinformers.NewSharedInformerFactory(fakeclient.NewClientset(), 0).ForResource(schema.GroupVersionResource{Group: group, Version: version, Resource: res}); err == nil {
				return true
			}
		}
		return false
	}
	var problems []string
	// Readers of whole objects: resourcequota's evaluators of Pods,
	// Services, PVCs and ResourceClaims, and its own ResourceQuotas.
	for _, resource := range []string{"/pods", "/services", "/persistentvolumeclaims", "/resourcequotas"} {
		for _, r := range census["resourcequota-controller"] {
			if r.Group+"/"+r.Resource == resource && !r.Typed {
				problems = append(problems, fmt.Sprintf("resourcequota-controller: %s is metadata; its evaluator reads whole objects", describe(r)))
			}
		}
	}
	seen, documentedUsed := 0, map[string]bool{}
	pieces := make([]string, 0, len(census))
	for piece := range census {
		pieces = append(pieces, piece)
	}
	sort.Strings(pieces)
	for _, piece := range pieces {
		kinds := map[string]map[bool]bool{} // controller/resource -> typed seen
		for _, r := range census[piece] {
			seen++
			controller := r.Controller
			if controller == "" {
				controller = "partition controllers, at run time"
			}
			key := controller + " " + r.Group + "/" + r.Resource
			if kinds[key] == nil {
				kinds[key] = map[bool]bool{}
			}
			kinds[key][r.Typed] = true
			for _, diff := range differencesFromKCM(r, typedInKCM) {
				row := findDifference(allowed, piece, controller, r, diff)
				if row == "" {
					problems = append(problems, fmt.Sprintf("%s: %s: %s, not in docs/controllers.md", piece, describe(r), diff))
					continue
				}
				documentedUsed[row] = true
			}
		}
		for key, typed := range kinds {
			if typed[true] && typed[false] {
				problems = append(problems, fmt.Sprintf("%s: %s read through a typed and a metadata informer (KCM gives one)", piece, key))
			}
		}
	}
	if seen == 0 {
		t.Fatal("the census lists no informer")
	}
	// One replica runs every piece: a kind the partition controllers read
	// whole is one watch, whoever else reads it. ConfigMaps and Secrets
	// are narrowed for the partition controllers, and the garbage
	// collector and resourcequota read every one's metadata: a selection
	// of their own.
	for _, twice := range watchedTwice(census) {
		if !strings.HasPrefix(twice, "/configmaps: ") && !strings.HasPrefix(twice, "/secrets: ") {
			problems = append(problems, "watched twice on one replica: "+twice)
		}
	}
	// The other way round: every resource KCM's informers list is read by
	// an informer of the fleet's, or a controller lost one.
	kcmListed := kcmInformerResources(ctx, t, q)
	for _, res := range missingFromCensus(kcmListed, census) {
		problems = append(problems, fmt.Sprintf("KCM's informers list %s; no informer of the fleet's reads it", res))
	}
	for row := range allowed {
		if !documentedUsed[row] {
			problems = append(problems, fmt.Sprintf("docs/controllers.md names a difference the census no longer shows: %s", row))
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Errorf("informers that differ from KCM's:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("%d informers of %d pieces compared with KCM's factory; %d documented differences apply; the %d resources KCM's informers list all read by the fleet's", seen, len(census), len(documentedUsed), len(kcmListed))
}

// kcmInformerResources runs kube-controller-manager on a control plane of
// its own, with quota counted in a namespace as in the fleet's, and returns
// the resources ("group/resource") its informer factories listed or
// watched (the audit log's requests by its shared-informers and
// metadata-informers clients).
func kcmInformerResources(ctx context.Context, t *testing.T, quota *corev1.ResourceQuota) map[string]bool {
	t.Helper()
	cluster := startClusterIn(ctx, t, "kcm", localcluster.Options{KubeControllerManager: true, AuditReads: true})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, client, "census")
	q := quota.DeepCopy()
	q.ResourceVersion, q.UID, q.Namespace = "", "", "census"
	if _, err := client.CoreV1().ResourceQuotas("census").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "KCM to count the quota", time.Minute, func() (bool, string) {
		got, err := client.CoreV1().ResourceQuotas("census").Get(ctx, "quota", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.Status.Used) == len(q.Spec.Hard), fmt.Sprint(got.Status.Used)
	})
	listed := map[string]bool{}
	readAudit(t, cluster.AuditLog, func(e auditEvent) {
		// An informer's first list is a watch streaming the initial
		// events (WatchListClient), or a list where that is refused.
		if e.ObjectRef == nil || (e.Verb != "list" && e.Verb != "watch") || !strings.HasPrefix(e.UserAgent, "kube-controller-manager/") {
			return
		}
		if strings.HasSuffix(e.UserAgent, "/shared-informers") || strings.HasSuffix(e.UserAgent, "/metadata-informers") {
			listed[e.ObjectRef.APIGroup+"/"+e.ObjectRef.Resource] = true
		}
	})
	if len(listed) == 0 {
		t.Fatal("no list or watch by KCM's informers in its audit log")
	}
	return listed
}

// missingFromCensus lists, sorted, the resources of kcm that no informer
// of the census reads.
func missingFromCensus(kcm map[string]bool, census map[string][]informers.InformerRecord) []string {
	read := map[string]bool{}
	for _, records := range census {
		for _, r := range records {
			read[r.Group+"/"+r.Resource] = true
		}
	}
	var out []string
	for res := range kcm {
		if !read[res] {
			out = append(out, res)
		}
	}
	sort.Strings(out)
	return out
}

// watchedTwice lists, sorted, the resources the census's replica reads
// through more than one informer, each with the informers ("group/resource:
// a; b"): the owned cache's of a kind (its owned partitions or, held for a
// singleton, every namespace: one informer either way, per field
// selector), the pool's typed one (cluster-wide or through a scoped view)
// and the pool's metadata one are each a watch of their own.
func watchedTwice(census map[string][]informers.InformerRecord) []string {
	informersOf := map[string]map[string]bool{}
	for _, records := range census {
		for _, r := range records {
			var informer string
			switch {
			case r.Source == informers.SourceOwnedPartitions || r.Source == informers.SourceHeldEverywhere:
				informer = "owned cache"
			case r.Typed:
				informer = "pool, typed"
			default:
				informer = "pool, metadata"
			}
			if r.FieldSelector != "" {
				informer += " " + r.FieldSelector
			}
			res := r.Group + "/" + r.Resource
			if informersOf[res] == nil {
				informersOf[res] = map[string]bool{}
			}
			informersOf[res][informer] = true
		}
	}
	var out []string
	for res, informers := range informersOf {
		if len(informers) > 1 {
			out = append(out, res+": "+strings.Join(slices.Sorted(maps.Keys(informers)), "; "))
		}
	}
	sort.Strings(out)
	return out
}

// TestWatchedTwice: a resource read from two informers is reported with
// both, whichever pieces read them; the owned cache's informer, whether
// it serves the owned partitions or every namespace, is one.
func TestWatchedTwice(t *testing.T) {
	owned := informers.InformerRecord{Group: "apps", Resource: "replicasets", Typed: true, Source: informers.SourceOwnedPartitions}
	held := informers.InformerRecord{Group: "apps", Resource: "replicasets", Typed: true, Source: informers.SourceHeldEverywhere}
	metadata := informers.InformerRecord{Group: "apps", Resource: "replicasets", Source: informers.SourceClusterWide}
	narrowed := informers.InformerRecord{Resource: "configmaps", Typed: true, Source: informers.SourceOwnedPartitions, FieldSelector: "metadata.name=kube-root-ca.crt"}
	cmMetadata := informers.InformerRecord{Resource: "configmaps", Source: informers.SourceClusterWide}
	for _, tc := range []struct {
		name   string
		census map[string][]informers.InformerRecord
		want   []string
	}{
		{"owned and held are one", map[string][]informers.InformerRecord{"partition": {owned}, "garbage-collector-controller": {held}}, nil},
		{"owned and metadata", map[string][]informers.InformerRecord{"partition": {owned}, "garbage-collector-controller": {metadata}},
			[]string{"apps/replicasets: owned cache; pool, metadata"}},
		{"narrowed and metadata", map[string][]informers.InformerRecord{"partition": {narrowed}, "resourcequota-controller": {cmMetadata}},
			[]string{"/configmaps: owned cache metadata.name=kube-root-ca.crt; pool, metadata"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := watchedTwice(tc.census); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMissingFromCensus: a resource KCM's informers list that no piece's
// informer reads is reported, whichever piece reads the others.
func TestMissingFromCensus(t *testing.T) {
	census := map[string][]informers.InformerRecord{
		"partition":                {{Resource: "pods"}, {Group: "apps", Resource: "replicasets"}},
		"resourcequota-controller": {{Resource: "resourcequotas"}},
	}
	for _, tc := range []struct {
		name string
		kcm  []string
		want []string
	}{
		{"all read", []string{"/pods", "apps/replicasets", "/resourcequotas"}, nil},
		{"one lost", []string{"/pods", "apps/replicasets", "apps/deployments"}, []string{"apps/deployments"}},
		{"same resource, other group", []string{"/replicasets"}, []string{"/replicasets"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kcm := map[string]bool{}
			for _, r := range tc.kcm {
				kcm[r] = true
			}
			if got := missingFromCensus(kcm, census); !slices.Equal(got, tc.want) {
				t.Errorf("missing %v, want %v", got, tc.want)
			}
		})
	}
}

func describe(r informers.InformerRecord) string {
	kind := "metadata"
	if r.Typed {
		kind = "typed"
	}
	out := fmt.Sprintf("%s %s/%s (%s, %s", r.Controller, r.Group, r.Resource, kind, r.Source)
	if r.FieldSelector != "" {
		out += ", " + r.FieldSelector
	}
	return out + ")"
}

// differencesFromKCM names how r differs from what KCM's factory gives.
func differencesFromKCM(r informers.InformerRecord, typedInKCM func(group, resource string) bool) []string {
	var out []string
	if !r.Typed && typedInKCM(r.Group, r.Resource) {
		out = append(out, "metadata")
	}
	switch r.Source {
	case informers.SourceOwnedPartitions:
		out = append(out, "owned partitions")
	case informers.SourceScopedView:
		out = append(out, "scoped view")
	}
	if r.FieldSelector != "" {
		out = append(out, "narrowed to "+r.FieldSelector)
	}
	return out
}

// readInformerDifferences reads docs/controllers.md's table of the
// informers that differ from KCM's (between its informers markers):
// rows "| controllers | resources | difference | why |", keyed by the row.
func readInformerDifferences(t *testing.T) map[string][3][]string {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, "docs/controllers.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- informers:begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- informers:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/controllers.md has no informers table between <!-- informers:begin --> and <!-- informers:end -->")
	}
	out := map[string][3][]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "controllers" {
			continue
		}
		var row [3][]string
		for i := range 3 {
			for _, v := range strings.Split(cells[i], ",") {
				row[i] = append(row[i], strings.Trim(strings.TrimSpace(v), "`"))
			}
		}
		if strings.TrimSpace(cells[3]) == "" {
			t.Errorf("docs/controllers.md: the informer difference %q gives no argument", line)
		}
		out[strings.TrimSpace(line)] = row
	}
	return out
}

// findDifference finds the documented row that allows diff for r; "" if
// none. A row names controllers ("every partition controller" and
// "every singleton" name those of a kind), resources ("every resource"
// any), and the difference.
func findDifference(allowed map[string][3][]string, piece, controller string, r informers.InformerRecord, diff string) string {
	resource := r.Resource
	if r.Group != "" {
		resource += "." + r.Group
	}
	matches := func(list []string, value string, every string) bool {
		for _, v := range list {
			if v == value || v == every {
				return true
			}
		}
		return false
	}
	every := "every singleton"
	if piece == "partition" {
		every = "every partition controller"
	}
	for row, cells := range allowed {
		if matches(cells[0], controller, every) && matches(cells[1], resource, "every resource") && matches(cells[2], diff, "") {
			return row
		}
	}
	return ""
}
