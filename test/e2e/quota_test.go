//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// quotaSide is one control plane of TestResourceQuotaLikeKubeControllerManager.
type quotaSide struct {
	name   string
	client kubernetes.Interface
}

// TestResourceQuotaLikeKubeControllerManager runs two control planes at
// once, one with upstream kube-controller-manager and one with a fleet of
// three, and does the same on both:
//
//   - a quota on every resource KCM counts, by object-count name and by
//     legacy name, then one object of each kind: every create is admitted
//     and status.used is the same on both sides, and what the objects
//     make it (ConfigMaps, Secrets and ReplicationControllers were never
//     counted under the fleet: their creates were Forbidden);
//   - 20 rounds of a namespace, its objects and a quota at exactly their
//     count applied in one go: the quota counts them (under the fleet it
//     counted a new namespace's PVCs as none), and one more object of
//     each kind is refused.
func TestResourceQuotaLikeKubeControllerManager(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	kcmCluster := startClusterIn(ctx, t, "kcm", localcluster.Options{KubeControllerManager: true})
	fleetCluster := startClusterIn(ctx, t, "fleet", localcluster.Options{})
	replicas := []string{"fcm-0", "fcm-1", "fcm-2"}
	for _, r := range replicas {
		if _, _, err := fleetCluster.StartFleetReplica(ctx, filepath.Join(binDir(t), "fleet-controller-manager"), r); err != nil {
			t.Fatal(err)
		}
	}
	var sides []quotaSide
	for _, c := range []struct {
		name    string
		cluster *localcluster.Cluster
	}{{"kube-controller-manager", kcmCluster}, {"fleet of three", fleetCluster}} {
		client, err := c.cluster.Client()
		if err != nil {
			t.Fatal(err)
		}
		sides = append(sides, quotaSide{c.name, client})
	}
	waitFleetRunning(ctx, t, sides[1].client, replicas)

	// Every resource KCM counts for these kinds.
	hard := corev1.ResourceList{}
	for _, name := range []string{"pods", "services", "configmaps", "secrets", "replicationcontrollers", "resourcequotas", "persistentvolumeclaims",
		"services.loadbalancers", "services.nodeports",
		"count/pods", "count/services", "count/configmaps", "count/secrets", "count/replicationcontrollers", "count/resourcequotas",
		"count/persistentvolumeclaims", "count/serviceaccounts", "count/deployments.apps", "count/replicasets.apps", "count/statefulsets.apps",
		"count/daemonsets.apps", "count/jobs.batch", "count/cronjobs.batch"} {
		hard[corev1.ResourceName(name)] = resource.MustParse("20")
	}
	for _, name := range []string{"requests.cpu", "limits.cpu", "requests.memory", "limits.memory", "requests.storage"} {
		hard[corev1.ResourceName(name)] = resource.MustParse("100Gi")
	}
	// What one object of each kind makes status.used: ConfigMaps and
	// ServiceAccounts count the namespace's kube-root-ca.crt and default,
	// and the Deployment's ReplicaSet counts too.
	want := map[string]string{
		"pods": "1", "count/pods": "1", "requests.cpu": "100m", "limits.cpu": "100m", "requests.memory": "64Mi", "limits.memory": "64Mi",
		"services": "1", "count/services": "1", "services.loadbalancers": "0", "services.nodeports": "0",
		"configmaps": "2", "count/configmaps": "2", "secrets": "1", "count/secrets": "1",
		"replicationcontrollers": "1", "count/replicationcontrollers": "1", "resourcequotas": "1", "count/resourcequotas": "1",
		"persistentvolumeclaims": "1", "count/persistentvolumeclaims": "1", "requests.storage": "1Gi",
		"count/serviceaccounts": "1", "count/deployments.apps": "1", "count/replicasets.apps": "1", "count/statefulsets.apps": "1",
		"count/daemonsets.apps": "1", "count/jobs.batch": "1", "count/cronjobs.batch": "1",
	}
	used := map[string]map[string]string{}
	for _, side := range sides {
		const ns = "quota-all"
		createNamespace(ctx, t, side.client, ns)
		createQuota(ctx, t, side, ns, hard)
		// A quota's first count lists every resource it names: until
		// then creates it covers are refused, as under KCM, which counts
		// within a second or two. (Under the fleet, ConfigMaps, Secrets
		// and ReplicationControllers were counted only once a rediscovery
		// restarted the quota's informers, by chance, tens of seconds on.)
		waitUsedFor(ctx, t, side, ns, "every resource counted", 15*time.Second, func(used map[string]string) string {
			for name := range hard {
				if _, ok := used[string(name)]; !ok {
					return "no usage of " + string(name)
				}
			}
			return ""
		})
		// A Pod is admitted once its namespace's default ServiceAccount
		// exists, under KCM too.
		poll(ctx, t, side.name+": the default ServiceAccount of "+ns, time.Minute, func() (bool, string) {
			_, err := side.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
		for _, err := range createOneOfEach(ctx, side.client, ns, "one") {
			t.Errorf("%s: %v", side.name, err)
		}
		// Admission adds each create to status.used, and the controller's
		// first count after it may write back a count from a cache that
		// has not seen the object yet (upstream's controller, the same
		// under KCM: seen once in this test's first run, configmaps 1 of
		// 2 for the 5 minutes to the full resync). A change of the hard
		// limits makes the controller count again from its cache.
		var recounted time.Time
		used[side.name] = waitUsed(ctx, t, side, ns, "one object of each kind counted", func(used map[string]string) string {
			diff := usageDiff(used, want)
			if diff != "" && time.Since(recounted) > 2*time.Second {
				recount(ctx, side, ns)
				recounted = time.Now()
			}
			return diff
		})
	}
	if a, b := fmt.Sprint(used[sides[0].name]), fmt.Sprint(used[sides[1].name]); a != b {
		t.Errorf("status.used differs:\n%s: %s\n%s: %s", sides[0].name, a, sides[1].name, b)
	}

	// A namespace, its objects and a quota at exactly their count, in one
	// go; then one more of each.
	// No Pod: one is refused until the namespace's default ServiceAccount
	// exists, which the rounds do not wait for (Pods are counted above).
	roundHard := corev1.ResourceList{"persistentvolumeclaims": resource.MustParse("2"), "count/configmaps": resource.MustParse("3"),
		"secrets": resource.MustParse("1")}
	roundWant := map[string]string{"persistentvolumeclaims": "2", "count/configmaps": "3", "secrets": "1"}
	const rounds = 20
	admitted := map[string]int{}
	for i := range rounds {
		for _, side := range sides {
			ns := fmt.Sprintf("quota-round-%02d", i)
			createNamespace(ctx, t, side.client, ns)
			// The count includes kube-root-ca.crt, which the root-CA
			// publisher creates after the namespace. Created after the
			// quota's first count, it is missing from that count, and
			// upstream's controller (its monitors have no add handler)
			// counts it only at the full resync, under KCM as under the
			// fleet: seen under the fleet in CI on a loaded machine (the
			// first count 2 ConfigMaps of 3, then one over the limit
			// admitted). How soon it appears is TestNamespaceFirstMoments'
			// question; this test's is the count, so it starts once the
			// ConfigMap is there.
			poll(ctx, t, side.name+": kube-root-ca.crt in "+ns, time.Minute, func() (bool, string) {
				_, err := side.client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
				return err == nil, fmt.Sprint(err)
			})
			for _, err := range []error{
				createPVC(ctx, side.client, ns, "claim-a"), createPVC(ctx, side.client, ns, "claim-b"),
				createConfigMap(ctx, side.client, ns, "config-a"), createConfigMap(ctx, side.client, ns, "config-b"),
				createSecret(ctx, side.client, ns, "secret-a"),
			} {
				if err != nil {
					t.Fatalf("%s: %v", side.name, err)
				}
			}
			// The quota comes 50 ms after its objects. Upstream's
			// controller counts a new quota at once from caches with no
			// freshness check, and its monitors have no add handler: an
			// object whose event reaches its informer after the quota's
			// first count stays uncounted until the full resync, under
			// KCM too (seen under the fleet in one round of 140, a Secret
			// created 1.7 ms before the quota, counted 3 ms after it). A
			// new namespace's objects reached a held informer 200 ms and
			// a list late, which this pause does not hide.
			time.Sleep(50 * time.Millisecond)
			createQuota(ctx, t, side, ns, roundHard)
			// As a user would: once the quota has its first count, more
			// objects; a count short of the objects admits them.
			first := waitUsed(ctx, t, side, ns, "the round's quota counted", func(used map[string]string) string {
				for name := range roundHard {
					if _, ok := used[string(name)]; !ok {
						return "no usage of " + string(name)
					}
				}
				return ""
			})
			if diff := usageDiff(first, roundWant); diff != "" {
				t.Errorf("%s: round %d: the quota's first count of %s: %s", side.name, i, ns, diff)
			}
			// Quota admission reads the quotas from the apiserver's own
			// informer, which the count reaches a moment after it is
			// written: a create 1 ms after it was admitted over the
			// limit under KCM (the admission saw the quota without that
			// count).
			time.Sleep(200 * time.Millisecond)
			for what, err := range map[string]error{
				"PersistentVolumeClaim": createPVC(ctx, side.client, ns, "claim-over"), "ConfigMap": createConfigMap(ctx, side.client, ns, "config-over"),
				"Secret": createSecret(ctx, side.client, ns, "secret-over"),
			} {
				switch {
				case err == nil:
					admitted[side.name]++
					t.Errorf("%s: round %d: a %s over the quota's hard limit was admitted in %s (the quota's first count: %v)", side.name, i, what, ns, first)
				case !apierrors.IsForbidden(err):
					t.Fatalf("%s: %v", side.name, err)
				}
			}
			present := countObjectsForQuota(ctx, t, side.client, ns)
			waitUsed(ctx, t, side, ns, "the round's objects counted", func(used map[string]string) string {
				return usageDiff(used, present)
			})
		}
	}
	for _, side := range sides {
		if admitted[side.name] > 0 {
			t.Errorf("%s: %d objects admitted over a quota's hard limit in %d rounds", side.name, admitted[side.name], rounds)
		}
	}
	t.Logf("%d resources counted alike; %d rounds of a namespace, its objects and its quota in one go: objects over a hard limit admitted: %s %d, %s %d",
		len(want), rounds, sides[0].name, admitted[sides[0].name], sides[1].name, admitted[sides[1].name])
}

// countObjectsForQuota lists what the round's quota counts.
func countObjectsForQuota(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"persistentvolumeclaims": fmt.Sprint(len(pvcs.Items)), "count/configmaps": fmt.Sprint(len(cms.Items)),
		"secrets": fmt.Sprint(len(secrets.Items))}
}

// recount changes the quota's hard limits (one more pod), which makes the
// controller count its usage again.
func recount(ctx context.Context, side quotaSide, ns string) {
	q, err := side.client.CoreV1().ResourceQuotas(ns).Get(ctx, "quota", metav1.GetOptions{})
	if err != nil {
		return
	}
	pods := q.Spec.Hard[corev1.ResourcePods]
	pods.Add(resource.MustParse("1"))
	q.Spec.Hard[corev1.ResourcePods] = pods
	_, _ = side.client.CoreV1().ResourceQuotas(ns).Update(ctx, q, metav1.UpdateOptions{}) // a conflict: the next poll tries again
}

func createQuota(ctx context.Context, t *testing.T, side quotaSide, ns string, hard corev1.ResourceList) {
	t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if _, err := side.client.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s: creating the quota of %s: %v", side.name, ns, err)
	}
}

// waitUsed polls the quota of ns until check finds nothing wrong with its
// status.used (within 30 s: the quota's own sync, not its 5-minute full
// resync) and returns it.
func waitUsed(ctx context.Context, t *testing.T, side quotaSide, ns, what string, check func(map[string]string) string) map[string]string {
	t.Helper()
	return waitUsedFor(ctx, t, side, ns, what, 30*time.Second, check)
}

func waitUsedFor(ctx context.Context, t *testing.T, side quotaSide, ns, what string, timeout time.Duration, check func(map[string]string) string) map[string]string {
	t.Helper()
	var last string
	var used map[string]string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		q, err := side.client.CoreV1().ResourceQuotas(ns).Get(ctx, "quota", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		used = map[string]string{}
		for name, v := range q.Status.Used {
			used[string(name)] = v.String()
		}
		last = check(used)
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("%s: %s in %s: %s (used %v)", side.name, what, ns, last, used)
	}
	return used
}

// usageDiff says where used differs from want ("" nowhere).
func usageDiff(used, want map[string]string) string {
	var diffs []string
	for name, w := range want {
		got, ok := used[name]
		if !ok {
			diffs = append(diffs, name+" not counted")
			continue
		}
		if g, w := resource.MustParse(got), resource.MustParse(w); g.Cmp(w) != 0 {
			diffs = append(diffs, fmt.Sprintf("%s %s, want %s", name, got, w.String()))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// createOneOfEach creates one object of every kind the quota counts.
func createOneOfEach(ctx context.Context, client kubernetes.Interface, ns, name string) []error {
	labels := map[string]string{"app": name}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: quotaPodSpec()}
	suspended := template.DeepCopy()
	suspended.Spec.RestartPolicy = corev1.RestartPolicyNever
	var errs []error
	for _, err := range []error{
		createConfigMap(ctx, client, ns, name), createSecret(ctx, client, ns, name), createPVC(ctx, client, ns, name), createPod(ctx, client, ns, name),
		func() error {
			_, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := client.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To[int32](0), Selector: labels, Template: &template}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := client.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: *suspended}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := client.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: *suspended}}}}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func quotaPodSpec() corev1.PodSpec {
	amount := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1",
		Resources: corev1.ResourceRequirements{Requests: amount, Limits: amount}}}}
}

func createConfigMap(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func createSecret(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	_, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func createPVC(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	_, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
	return err
}

func createPod(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: quotaPodSpec()}, metav1.CreateOptions{})
	return err
}
