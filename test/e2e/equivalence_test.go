//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestSameEndStateAsKubeControllerManager runs one workload under upstream
// kube-controller-manager and under a fleet of one, each on a fresh control
// plane, and compares the end states: objects the controllers create and
// their statuses, ignoring generated names and timestamps, and the type
// warnings of a ValidatingAdmissionPolicy (the fleet builds that
// controller's OpenAPI definitions only when it type checks). It also counts
// the watches the apiserver holds open once the workload has converged: a
// fleet of one watches each kind at most twice more than KCM (the owned
// cache and the garbage collector's metadata informer beside the
// singletons' cluster-wide informers), plus its Leases.
func TestSameEndStateAsKubeControllerManager(t *testing.T) {
	namespaces := []string{"eq-a", "eq-b", "eq-c", "eq-d"}
	const kcmSide, fleetOfOne, fleetOfThree = "kube-controller-manager", "fleet-of-one", "fleet-of-three"
	type endState struct {
		facts   map[string]string
		watches map[string]int
		// lapsed: event facts a replica dropped after its authority
		// lapsed (reportsDroppedAfterLapse).
		lapsed map[string]string
	}
	parent := t
	states := sidesAtOnce(t, laneLight, []string{kcmSide, fleetOfOne, fleetOfThree}, func(t *testing.T, side string) endState {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cluster, client := startKCMOrFleet(ctx, t, map[string]int{fleetOfOne: 1, fleetOfThree: 3}[side], 3)
		for _, ns := range namespaces {
			createWorkload(ctx, t, client, ns)
		}
		startEndStateChanges(ctx, t, client, namespaces)
		for _, ns := range namespaces {
			waitWorkload(ctx, t, client, ns)
		}
		finishEndStateChanges(ctx, t, client)
		facts := snapshot(ctx, t, client, namespaces)
		for k, v := range typeCheckPolicy(ctx, t, client) {
			facts[k] = v
		}
		for k, v := range contentFacts(ctx, t, cluster, client, namespaces) {
			facts[k] = v
		}
		watches := openWatches(ctx, t, client)
		lapsed := fleetReportsDroppedAfterLapse(t, cluster)
		keepLogsIfParentFails(parent, t, cluster)
		cluster.Stop()
		return endState{facts, watches, lapsed}
	})
	// A fleet of one may hold, per resource, two watches more than KCM:
	// the owned cache's request (one, with fewer namespaces than a
	// selector holds) and the metadata informer of the garbage collector
	// and resourcequota, which KCM serves from its typed informers (the
	// fleet caches those kinds as metadata for them: docs/design.md),
	// beside a singleton's typed cluster-wide informer (node-lifecycle's
	// DaemonSets, the PV binder's PVCs). Leases: the fleet's own, its
	// members' and KCM's leader Lease.
	const ownedCacheWatches, fleetLeaseWatches = 2, 3
	kcmWatches, fleetWatches := states[kcmSide].watches, states[fleetOfOne].watches
	t.Logf("watches open after the workload (all clients): kube-controller-manager %d, fleet of one %d, fleet of three %d", kcmWatches[""], fleetWatches[""], states[fleetOfThree].watches[""])
	var more []string
	for resource, n := range fleetWatches {
		allowed := kcmWatches[resource] + ownedCacheWatches
		if resource == "leases" {
			allowed = kcmWatches[resource] + fleetLeaseWatches
		}
		if resource != "" && n > allowed {
			more = append(more, fmt.Sprintf("%s %d (KCM %d)", resource, n, kcmWatches[resource]))
		}
	}
	sort.Strings(more)
	if len(more) > 0 {
		t.Errorf("a fleet of one holds %d watches, KCM %d; more than two extra for: %s", fleetWatches[""], kcmWatches[""], strings.Join(more, ", "))
	}
	kcm := states[kcmSide].facts
	for _, side := range []string{fleetOfOne, fleetOfThree} {
		fleet := states[side].facts
		var diffs []string
		for k, v := range kcm {
			if why := states[side].lapsed[k]; fleet[k] == "" && why != "" {
				t.Logf("left out, %s: kube-controller-manager %q, the %s none: %s", k, v, side, why)
				continue
			}
			if fleet[k] != v {
				diffs = append(diffs, fmt.Sprintf("%s: kube-controller-manager %q, %s %q", k, v, side, fleet[k]))
			}
		}
		for k, v := range fleet {
			if _, ok := kcm[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s: only under the %s (%q)", k, side, v))
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 0 {
			t.Errorf("end states of kube-controller-manager and the %s differ in %d of %d facts:\n%s", side, len(diffs), len(kcm), strings.Join(diffs, "\n"))
		}
	}
	if len(kcm) < minEndStateFacts {
		t.Errorf("the end state has %d facts, want at least %d: the comparison looks at less than it should", len(kcm), minEndStateFacts)
	}
	if !t.Failed() {
		t.Logf("compared %d facts of the end state (%s): kube-controller-manager, a fleet of one and a fleet of three identical", len(kcm), factKinds(kcm))
	}
}

// typeCheckPolicy creates a ValidatingAdmissionPolicy with a well-typed and
// an ill-typed expression, waits for the validatingadmissionpolicy-status
// controller to type check it, and returns the warnings it wrote.
func typeCheckPolicy(ctx context.Context, t *testing.T, client kubernetes.Interface) map[string]string {
	t.Helper()
	policies := client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	policy, err := policies.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "eq-typecheck"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.spec.replicas > 1"},
				{Expression: "object.spec.replicas == 'many'"},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a ValidatingAdmissionPolicy: %v", err)
	}
	out := map[string]string{}
	poll(ctx, t, "the ValidatingAdmissionPolicy type checked", 2*time.Minute, func() (bool, string) {
		got, err := policies.Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.ObservedGeneration < got.Generation || got.Status.TypeChecking == nil {
			return false, fmt.Sprintf("observed generation %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		for _, w := range got.Status.TypeChecking.ExpressionWarnings {
			out["cluster/validatingadmissionpolicy/"+got.Name+"/"+w.FieldRef] = w.Warning
		}
		return true, ""
	})
	if len(out) == 0 {
		t.Errorf("the ill-typed expression of ValidatingAdmissionPolicy %s has no warning", policy.Name)
	}
	return out
}

// openWatches counts the watches the apiserver holds open, by resource
// ("" holds the total).
func openWatches(ctx context.Context, t *testing.T, client kubernetes.Interface) map[string]int {
	t.Helper()
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `resource="`)
		resource, _, _ := strings.Cut(rest, `"`)
		n, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		out[resource] += int(n)
		out[""] += int(n)
	}
	return out
}

// startKCMOrFleetOfOne starts a fresh control plane with kube-scheduler and
// kwokNodes fake nodes, run by upstream kube-controller-manager or by a
// fleet of one, and returns once the controllers run.
func startKCMOrFleetOfOne(ctx context.Context, t *testing.T, fleet bool, kwokNodes int) (*localcluster.Cluster, kubernetes.Interface) {
	t.Helper()
	return startKCMOrFleet(ctx, t, map[bool]int{true: 1}[fleet], kwokNodes)
}

// startKCMOrFleet is startKCMOrFleetOfOne for a fleet of replicas, or
// kube-controller-manager if replicas is 0.
func startKCMOrFleet(ctx context.Context, t *testing.T, replicas, kwokNodes int) (*localcluster.Cluster, kubernetes.Interface) {
	t.Helper()
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: kwokNodes, KubeControllerManager: replicas == 0})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range replicas {
		name := fmt.Sprintf("fcm-%d", i)
		if _, _, err := cluster.StartFleetReplica(ctx, filepath.Join(binDir(t), "fleet-controller-manager"), name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if replicas > 0 {
		waitFleetRunning(ctx, t, client, names)
	}
	return cluster, client
}

// snapshot records, per namespace, what the controllers made of the
// workload, in a form free of generated names and timestamps.
func snapshot(ctx context.Context, t *testing.T, client kubernetes.Interface, namespaces []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range namespaces {
		deps, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		for _, d := range deps.Items {
			s := d.Status
			out[ns+"/deployment/"+d.Name] = fmt.Sprintf("replicas=%d updated=%d ready=%d available=%d", s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas)
		}
		rss, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		perOwner := map[string]int{}
		for _, rs := range rss.Items {
			for _, o := range rs.OwnerReferences {
				perOwner[o.Name]++
			}
		}
		for owner, n := range perOwner {
			out[ns+"/replicasets-of/"+owner] = fmt.Sprint(n)
		}
		jobs, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		for _, j := range jobs.Items {
			out[ns+"/job/"+j.Name] = fmt.Sprintf("succeeded=%d failed=%d", j.Status.Succeeded, j.Status.Failed)
		}
		sts, err := client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		for _, s := range sts.Items {
			out[ns+"/statefulset/"+s.Name] = fmt.Sprintf("replicas=%d ready=%d", s.Status.Replicas, s.Status.ReadyReplicas)
		}
		dss, err := client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		for _, d := range dss.Items {
			out[ns+"/daemonset/"+d.Name] = fmt.Sprintf("desired=%d ready=%d", d.Status.DesiredNumberScheduled, d.Status.NumberReady)
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		phases := map[string]int{}
		for _, p := range pods.Items {
			owner := "none"
			if len(p.OwnerReferences) > 0 {
				owner = p.OwnerReferences[0].Kind
			}
			phases[owner+"/"+string(p.Status.Phase)]++
		}
		for k, n := range phases {
			out[ns+"/pods/"+k] = fmt.Sprint(n)
		}
		slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		endpoints := map[string]int{}
		for _, s := range slices.Items {
			endpoints[s.Labels["kubernetes.io/service-name"]] += len(s.Endpoints)
		}
		for svc, n := range endpoints {
			out[ns+"/endpoints-of/"+svc] = fmt.Sprint(n)
		}
		sas, err := client.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		for _, sa := range sas.Items {
			out[ns+"/serviceaccount/"+sa.Name] = "present"
		}
		cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", ns, err)
		}
		for _, cm := range cms.Items {
			out[ns+"/configmap/"+cm.Name] = fmt.Sprint(len(cm.Data))
		}
	}
	return out
}
