//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/controllers"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// minEndStateFacts: the comparison of end states looks at no fewer facts
// than this (the workload yields about 700); fewer means a list came back
// short and the comparison would pass while checking little.
const minEndStateFacts = 500

// The end state beyond the workload's per-namespace objects: what the
// singletons leave, and what garbage collection and namespace deletion
// remove. Each side makes the same changes while its workload converges.
const (
	goneNamespace  = "eq-gone"   // deleted with its objects: the namespace controller
	gcNamespace    = "eq-a"      // where a Deployment is deleted: the garbage collector
	gcDeployment   = "web-4"     // ... this one, in the background
	csrName        = "eq-client" // signed once approved: csrsigning
	tokenSecret    = "eq-token"  // filled in: the service account token controller
	tokenNamespace = "eq-b"      // ... in this namespace
	tokenAccount   = "default"   // ... for this ServiceAccount
	csrSigner      = certificatesv1.KubeAPIServerClientSignerName
)

// startEndStateChanges makes the changes whose results contentFacts
// records: a PodDisruptionBudget per namespace (the disruption
// controller), a namespace to delete once its Deployment runs, a client
// certificate request the test approves.
func startEndStateChanges(ctx context.Context, t *testing.T, client kubernetes.Interface, namespaces []string) {
	t.Helper()
	for _, ns := range namespaces {
		if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(7)),
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web-0"}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a PodDisruptionBudget in %s: %v", ns, err)
		}
	}
	createNamespace(ctx, t, client, goneNamespace)
	createDeployment(ctx, t, client, goneNamespace, "web", 2)
	if _, err := client.CoreV1().ConfigMaps(goneNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "eq-user", Organization: []string{"eq-group"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: csrName},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: csrSigner,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating CSR %s: %v", csrName, err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "EquivalenceTest", Message: "approved by the test",
	})
	if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csrName, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approving CSR %s: %v", csrName, err)
	}
}

// finishEndStateChanges deletes the namespace and the Deployment once the
// workload converged, creates a legacy service account token Secret (once
// its ServiceAccount exists: the token controller deletes a token Secret
// of an account it does not find), and waits for everything the changes
// started to end.
func finishEndStateChanges(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	waitDeploymentReady(ctx, t, client, goneNamespace, "web", 2, 3*time.Minute)
	if err := client.CoreV1().Namespaces().Delete(ctx, goneNamespace, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.AppsV1().Deployments(gcNamespace).Delete(ctx, gcDeployment, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "namespace "+goneNamespace+" to be gone", 3*time.Minute, func() (bool, string) {
		_, err := client.CoreV1().Namespaces().Get(ctx, goneNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	poll(ctx, t, "the garbage collector to delete "+gcDeployment+"'s ReplicaSets and pods", 3*time.Minute, func() (bool, string) {
		rs, pods := gcLeft(ctx, t, client)
		return rs+pods == 0, fmt.Sprintf("%d ReplicaSets, %d pods left", rs, pods)
	})
	poll(ctx, t, "CSR "+csrName+" to be signed", 2*time.Minute, func() (bool, string) {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csrName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(csr.Status.Certificate) > 0, fmt.Sprint(csr.Status.Conditions)
	})
	if _, err := client.CoreV1().Secrets(tokenNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tokenSecret, Annotations: map[string]string{corev1.ServiceAccountNameKey: tokenAccount}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating token Secret: %v", err)
	}
	poll(ctx, t, "the token Secret to be filled in", 2*time.Minute, func() (bool, string) {
		s, err := client.CoreV1().Secrets(tokenNamespace).Get(ctx, tokenSecret, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Data[corev1.ServiceAccountTokenKey]) > 0, fmt.Sprintf("keys %v", sortedKeys(s.Data))
	})
}

// gcLeft counts what is left of the deleted Deployment: its ReplicaSets
// and their pods (the pod-template-hash names both after the Deployment).
func gcLeft(ctx context.Context, t *testing.T, client kubernetes.Interface) (replicaSets, pods int) {
	t.Helper()
	rss, err := client.AppsV1().ReplicaSets(gcNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing ReplicaSets: %v", err)
	}
	for _, rs := range rss.Items {
		if strings.HasPrefix(rs.Name, gcDeployment+"-") {
			replicaSets++
		}
	}
	ps, err := client.CoreV1().Pods(gcNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + gcDeployment})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	return replicaSets, len(ps.Items)
}

// contentFacts records the objects the controllers wrote, normalised by the
// rules in normaliseName and below, as "scope/kind/name[/detail]" ->
// value. Scope is a namespace or "cluster".
func contentFacts(ctx context.Context, t *testing.T, cluster *localcluster.Cluster, client kubernetes.Interface, namespaces []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("end state: listing %s: %v", what, err)
		}
	}
	// Certificates and the CA differ per cluster: each side's are
	// compared with its own CA, and the fact is whether they match.
	ca, err := os.ReadFile(cluster.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	rs, pods := gcLeft(ctx, t, client)
	out[gcNamespace+"/garbage-collected/"+gcDeployment] = fmt.Sprintf("replicasets=%d pods=%d", rs, pods)

	for _, ns := range namespaces {
		podList, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" pods")
		// Pods: generated names differ, so a controller's pods are
		// compared as the sorted list of their normalised descriptions.
		byOwner := map[string][]string{}
		for _, p := range podList.Items {
			owner := "none"
			if ref := metav1.GetControllerOf(&p); ref != nil {
				owner = ref.Kind + "/" + ref.Name
			}
			byOwner[owner] = append(byOwner[owner], podFact(&p))
		}
		for owner, descs := range byOwner {
			sort.Strings(descs)
			for i, d := range descs {
				out[fmt.Sprintf("%s/pod/%s/%d", ns, owner, i)] = d
			}
		}
		rsList, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" replicasets")
		for _, r := range rsList.Items {
			// The name carries the pod-template-hash: a hash of the
			// template, the same on every cluster.
			s := r.Status
			out[ns+"/replicaset/"+r.Name] = fmt.Sprintf("spec=%d replicas=%d ready=%d available=%d labeled=%d observed=%d/%d owner=%s annotations=%s",
				ptr.Deref(r.Spec.Replicas, -1), s.Replicas, s.ReadyReplicas, s.AvailableReplicas, s.FullyLabeledReplicas, s.ObservedGeneration, r.Generation,
				ownerFact(r.OwnerReferences), mapFact(r.Annotations))
		}
		deps, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" deployments")
		for _, d := range deps.Items {
			var conds []string
			for _, c := range d.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
			}
			sort.Strings(conds)
			out[ns+"/deployment-status/"+d.Name] = fmt.Sprintf("observed=%d/%d unavailable=%d collisions=%d conditions=%v annotations=%s",
				d.Status.ObservedGeneration, d.Generation, d.Status.UnavailableReplicas, ptr.Deref(d.Status.CollisionCount, 0), conds, mapFact(d.Annotations))
		}
		jobs, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" jobs")
		for _, j := range jobs.Items {
			var conds []string
			for _, c := range j.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
			}
			sort.Strings(conds)
			out[ns+"/job-status/"+j.Name] = fmt.Sprintf("active=%d ready=%d terminating=%d succeeded=%d failed=%d uncounted=%v conditions=%v",
				j.Status.Active, ptr.Deref(j.Status.Ready, -1), ptr.Deref(j.Status.Terminating, -1), j.Status.Succeeded, j.Status.Failed,
				j.Status.UncountedTerminatedPods != nil && len(j.Status.UncountedTerminatedPods.Succeeded)+len(j.Status.UncountedTerminatedPods.Failed) > 0, conds)
		}
		stss, err := client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" statefulsets")
		for _, s := range stss.Items {
			st := s.Status
			out[ns+"/statefulset-status/"+s.Name] = fmt.Sprintf("current=%d updated=%d available=%d revisions=%s,%s observed=%d/%d",
				st.CurrentReplicas, st.UpdatedReplicas, st.AvailableReplicas, st.CurrentRevision, st.UpdateRevision, st.ObservedGeneration, s.Generation)
		}
		dss, err := client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" daemonsets")
		for _, d := range dss.Items {
			st := d.Status
			out[ns+"/daemonset-status/"+d.Name] = fmt.Sprintf("current=%d misscheduled=%d updated=%d available=%d unavailable=%d observed=%d/%d",
				st.CurrentNumberScheduled, st.NumberMisscheduled, st.UpdatedNumberScheduled, st.NumberAvailable, st.NumberUnavailable, st.ObservedGeneration, d.Generation)
		}
		slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" endpointslices")
		for _, s := range slices.Items {
			// Addresses are pod IPs kwok hands out; what the controller
			// decides is how many, their conditions, targets and ports.
			conds := map[string]int{}
			for _, e := range s.Endpoints {
				conds[fmt.Sprintf("ready=%v,serving=%v,terminating=%v,target=%s,hostname=%v", ptr.Deref(e.Conditions.Ready, false), ptr.Deref(e.Conditions.Serving, false),
					ptr.Deref(e.Conditions.Terminating, false), targetKind(e.TargetRef), e.Hostname != nil)]++
			}
			var ports []string
			for _, p := range s.Ports {
				ports = append(ports, fmt.Sprintf("%s/%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, "")))
			}
			sort.Strings(ports)
			out[ns+"/endpointslice/"+s.Labels["kubernetes.io/service-name"]+"/"+string(s.AddressType)] = fmt.Sprintf("endpoints=%v ports=%v labels=%s owner=%s",
				conds, ports, mapFact(withoutKeys(s.Labels, "kubernetes.io/service-name")), ownerFact(s.OwnerReferences))
		}
		eps, err := client.CoreV1().Endpoints(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" endpoints")
		for _, e := range eps.Items {
			var subsets []string
			for _, s := range e.Subsets {
				var ports []string
				for _, p := range s.Ports {
					ports = append(ports, fmt.Sprintf("%s/%d/%s", p.Name, p.Port, p.Protocol))
				}
				subsets = append(subsets, fmt.Sprintf("ready=%d notready=%d ports=%v", len(s.Addresses), len(s.NotReadyAddresses), ports))
			}
			out[ns+"/endpoints/"+e.Name] = fmt.Sprint(subsets)
		}
		for k, v := range settledEventFacts(ctx, t, client, ns) {
			out[k] = v
		}
		revisions, err := client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" controllerrevisions")
		for _, r := range revisions.Items {
			// Named by a hash of the template, like a ReplicaSet.
			out[ns+"/controllerrevision/"+r.Name] = fmt.Sprintf("revision=%d owner=%s", r.Revision, ownerFact(r.OwnerReferences))
		}
		pdbs, err := client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
		must(err, ns+" poddisruptionbudgets")
		for _, p := range pdbs.Items {
			var conds []string
			for _, c := range p.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
			}
			out[ns+"/poddisruptionbudget-status/"+p.Name] = fmt.Sprintf("expected=%d healthy=%d/%d allowed=%d observed=%d/%d conditions=%v",
				p.Status.ExpectedPods, p.Status.CurrentHealthy, p.Status.DesiredHealthy, p.Status.DisruptionsAllowed, p.Status.ObservedGeneration, p.Generation, conds)
		}
		secret, err := client.CoreV1().Secrets(ns).Get(ctx, tokenSecret, metav1.GetOptions{})
		if err == nil {
			out[ns+"/token-secret/"+secret.Name] = fmt.Sprintf("keys=%v namespace=%s ca=%s jwt=%v", sortedKeys(secret.Data), secret.Data["namespace"],
				map[bool]string{true: "cluster CA", false: "other"}[bytes.Equal(secret.Data["ca.crt"], ca)], strings.Count(string(secret.Data["token"]), ".") == 2)
		} else if !apierrors.IsNotFound(err) {
			must(err, ns+" token secret")
		}
	}

	nsList, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	must(err, "namespaces")
	out["cluster/namespace/"+goneNamespace] = "gone"
	for _, n := range nsList.Items {
		out["cluster/namespace/"+n.Name] = fmt.Sprintf("phase=%s finalizers=%v", n.Status.Phase, n.Spec.Finalizers)
		cm, err := client.CoreV1().ConfigMaps(n.Name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			out["cluster/root-ca/"+n.Name] = "missing: " + err.Error()
			continue
		}
		out["cluster/root-ca/"+n.Name] = map[bool]string{true: "cluster CA", false: "other"}[cm.Data["ca.crt"] == string(ca)]
	}
	sas, err := client.CoreV1().ServiceAccounts(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	must(err, "kube-system serviceaccounts")
	for _, sa := range sas.Items {
		// One per controller under --use-service-account-credentials.
		out["kube-system/serviceaccount/"+sa.Name] = "present"
	}
	roles, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	must(err, "clusterroles")
	for _, r := range roles.Items {
		if r.AggregationRule == nil {
			continue
		}
		// The clusterrole-aggregation controller's result, a rule each.
		out["cluster/aggregated-clusterrole/"+r.Name] = fmt.Sprintf("%d rules", len(r.Rules))
		for _, rule := range r.Rules {
			out["cluster/aggregated-clusterrole/"+r.Name+"/"+ruleFact(rule)] = "present"
		}
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(err, "nodes")
	for _, n := range nodes.Items {
		var taints []string
		for _, tn := range n.Spec.Taints {
			taints = append(taints, tn.Key+"="+tn.Value+":"+string(tn.Effect))
		}
		sort.Strings(taints)
		// The ttl controller's annotation, node-lifecycle's taints.
		out["cluster/node/"+n.Name] = fmt.Sprintf("ttl=%s taints=%v unschedulable=%v", n.Annotations["node.alpha.kubernetes.io/ttl"], taints, n.Spec.Unschedulable)
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csrName, metav1.GetOptions{})
	must(err, "CSR "+csrName)
	var conds []string
	for _, c := range csr.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	out["cluster/csr/"+csrName] = fmt.Sprintf("conditions=%v certificate=%s", conds, certFact(csr.Status.Certificate, ca))
	return out
}

// settledEventFacts records which reasons the controllers reported, per
// kind of object, in namespace ns, once they stop changing: a controller's
// broadcaster sends an Event asynchronously, after the change it reports,
// and in a clean-clone CI run KCM's SuccessfulCreate of two ReplicaSets
// (of 19) was not there when the workload had converged, while both
// fleets' were. Which object reported what, and how often, is history
// that depends on that timing; which kinds of report each kind of object
// got is not.
func settledEventFacts(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	read := func() map[string]string {
		events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("end state: listing %s events: %v", ns, err)
		}
		out := map[string]string{}
		resets := connectionResetReports(events.Items)
		for _, e := range events.Items {
			// Retried failures (FailedCreate while the default
			// ServiceAccount does not exist yet, FailedScheduling) are
			// history that depends on timing; the end state shows what
			// the retries reached. The apiserver's own repair loops
			// (ClusterIPNotAllocated) report on their own timer: not the
			// controller manager's. The disruption controller's Normal
			// NoPods says that a sync found no pod matching its PDB, and
			// the PDBs are created while their Deployments' first pods
			// are: which comes first is the race of two clients (in one
			// make test run only KCM's eq-c PDB had none, every PDB
			// status fact identical on all three sides); the PDBs'
			// statuses are the end state.
			reporter := e.Source.Component
			if reporter == "" {
				reporter = e.ReportingController
			}
			if strings.HasPrefix(e.Reason, "Failed") || apiserverReporters[reporter] {
				continue
			}
			if e.Reason == "NoPods" && e.Type == corev1.EventTypeNormal {
				continue
			}
			if resets[e.UID] {
				t.Logf("warning event of a write whose connection was reset, left out: %s %s/%s %s: %s (%d times)", ns, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
				continue
			}
			if e.Type == corev1.EventTypeWarning {
				t.Logf("warning event: %s %s/%s %s: %s (%d times)", ns, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
			}
			out[fmt.Sprintf("%s/event/%s/%s", ns, e.InvolvedObject.Kind, e.Reason)] = e.Type + " from " + reporter
		}
		return out
	}
	last := read()
	poll(ctx, t, "the Events of "+ns+" to settle", time.Minute, func() (bool, string) {
		time.Sleep(2 * time.Second)
		now := read()
		settled := fmt.Sprint(now) == fmt.Sprint(last)
		last = now
		return settled, fmt.Sprintf("%d kinds of report", len(now))
	})
	return last
}

// apiserverReporters are the kube-apiserver's controllers that report
// Events.
var apiserverReporters = map[string]bool{"ipallocator-repair-controller": true, "portallocator-repair-controller": true, "": true}

// podFact is what the controllers decided about a pod: its owner's
// reference, labels (an owner's UID is the same rule as a name: replaced),
// phase and readiness; the node only where a controller chose it (a
// DaemonSet's pod), not where the scheduler did.
func podFact(p *corev1.Pod) string {
	labels := map[string]string{}
	for k, v := range p.Labels {
		if k == "batch.kubernetes.io/controller-uid" || k == "controller-uid" {
			v = "<owner uid>"
		}
		labels[k] = v
	}
	node := ""
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				node = strings.Join(f.Values, ",")
			}
		}
	}
	name := normaliseName("Pod", p.Name)
	return fmt.Sprintf("name=%s phase=%s ready=%v owner=%s labels=%s tolerations=%d node=%s",
		name, p.Status.Phase, podReady(p), ownerFact(p.OwnerReferences), mapFact(labels), len(p.Spec.Tolerations), node)
}

// generatedSuffix: the five characters the apiserver appends to a
// generateName (pods of ReplicaSets, Jobs and DaemonSets, EndpointSlices).
var generatedSuffix = regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{5}$`)

// normaliseName replaces a generated name's random suffix; a StatefulSet's
// pods (db-0) and the pod-template-hash in a ReplicaSet's name are the
// same on every cluster and stay.
func normaliseName(kind, name string) string {
	if kind == "Pod" || kind == "EndpointSlice" {
		return generatedSuffix.ReplaceAllString(name, "-<generated>")
	}
	return name
}

func ownerFact(refs []metav1.OwnerReference) string {
	var out []string
	for _, r := range refs {
		out = append(out, fmt.Sprintf("%s/%s/%s controller=%v block=%v", r.APIVersion, r.Kind, r.Name, ptr.Deref(r.Controller, false), ptr.Deref(r.BlockOwnerDeletion, false)))
	}
	sort.Strings(out)
	return strings.Join(out, ";")
}

func mapFact(m map[string]string) string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return "{" + strings.Join(out, ",") + "}"
}

func withoutKeys(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func targetKind(ref *corev1.ObjectReference) string {
	if ref == nil {
		return ""
	}
	return ref.Kind
}

func ruleFact(r rbacv1.PolicyRule) string {
	return fmt.Sprintf("groups=%v resources=%v names=%v urls=%v verbs=%v", r.APIGroups, r.Resources, r.ResourceNames, r.NonResourceURLs, r.Verbs)
}

// certFact is what csrsigning made: a certificate for the requested
// subject, issued by the cluster's signing CA, with the requested usages.
func certFact(certPEM, caPEM []byte) string {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return "none"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "unparsable: " + err.Error()
	}
	caBlock, _ := pem.Decode(caPEM)
	issuer := "other"
	if caBlock != nil {
		if caCert, err := x509.ParseCertificate(caBlock.Bytes); err == nil && cert.CheckSignatureFrom(caCert) == nil {
			issuer = "cluster CA"
		}
	}
	return fmt.Sprintf("subject=%s issuer=%s extKeyUsage=%v", cert.Subject.String(), issuer, cert.ExtKeyUsage)
}

// factKinds names the kinds of facts and how many of each.
func factKinds(facts map[string]string) string {
	kinds := map[string]int{}
	for k := range facts {
		parts := strings.SplitN(k, "/", 3)
		if len(parts) > 1 {
			kinds[parts[1]]++
		}
	}
	var out []string
	for _, k := range sortedKeys(kinds) {
		out = append(out, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	return strings.Join(out, ", ")
}

// connectionResetReports are the Warning Events reporting a write whose
// connection was reset under it ("use of closed network connection"),
// left out of the comparison with a log line. A replica resets a write's
// connection when its authority runs out (its Lease renewal late, as when
// CI's parallel lanes starve it of CPU) and says so in the error
// (controllers.ErrWriteAbandoned), and it writes no Event reporting its
// own refusals or abandoned writes (controllers/refusalevents.go), so an
// Event carrying those messages still counts as a difference: KCM, which
// exits when it misses its renew deadline, writes none. Only a reset the
// transport reports in its own words is left out.
func connectionResetReports(events []corev1.Event) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, e := range events {
		if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "use of closed network connection") {
			out[e.UID] = true
		}
	}
	return out
}

func TestConnectionResetReports(t *testing.T) {
	create := "Failed to create new replica set \"web-0-1\": Post \"https://127.0.0.1:1/apis/apps/v1/namespaces/a/replicasets\": "
	event := func(uid, typ, message string) corev1.Event {
		return corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Type: typ, Reason: "ReplicaSetCreateError", Message: message}
	}
	for _, tc := range []struct {
		name   string
		events []corev1.Event
		want   []types.UID
	}{
		{name: "a reset", events: []corev1.Event{event("e1", corev1.EventTypeWarning, create+"read tcp 127.0.0.1:2->127.0.0.1:1: use of closed network connection")}, want: []types.UID{"e1"}},
		{name: "a refusal of a lapsed replica", events: []corev1.Event{event("e1", corev1.EventTypeWarning, create+controllers.ErrNoAuthority.Error())}},
		{name: "a write abandoned by a lapsed replica", events: []corev1.Event{event("e1", corev1.EventTypeWarning, create+controllers.ErrWriteAbandoned.Error())}},
		{name: "a partition's refusal", events: []corev1.Event{event("e1", corev1.EventTypeWarning, create+controllers.ErrPartitionMoved.Error())}},
		{name: "another failure", events: []corev1.Event{event("e1", corev1.EventTypeWarning, "Failed to create new replica set: namespaces \"a\" not found")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var uids []types.UID
			for uid := range connectionResetReports(tc.events) {
				uids = append(uids, uid)
			}
			sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
			if fmt.Sprint(uids) != fmt.Sprint(tc.want) {
				t.Errorf("left out %v, want %v", uids, tc.want)
			}
		})
	}
}
