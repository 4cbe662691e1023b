//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// The shipped Deployment's names (deploy/).
const (
	fleetNamespace = "kube-system"
	fleetName      = "fleet-controller-manager"
	fleetSelector  = "app.kubernetes.io/name=fleet-controller-manager"
	kcmLease       = "kube-controller-manager"
)

// deployedFleet is a cluster with a real node where KCM runs as kubeadm's
// static pod and the fleet as deploy/deployment ships it.
type deployedFleet struct {
	t          *testing.T
	cluster    *localcluster.Cluster
	client     kubernetes.Interface
	kubectl    func(args ...string) string
	kcmOn      string // KCM's manifest in the kubelet's static pod folder
	kcmOff     string // where operations.md moves it
	imageTag   string
	overlayDir string
	kcmPort    int // the static pod KCM's secure port
	// workload is the fleet's Deployment or StatefulSet, as kubectl names
	// it (deployment/fleet-controller-manager).
	workload string
}

// fleetKinds are the shipped overlays: deploy/<dir>, of kind.
var fleetKinds = []struct{ dir, kind string }{{"deployment", "Deployment"}, {"statefulset", "StatefulSet"}}

// forEachFleetKind runs test on a new deployedFleet of each shipped
// overlay, as subtests.
func forEachFleetKind(t *testing.T, test func(context.Context, *testing.T, *deployedFleet)) {
	t.Parallel()
	for _, k := range fleetKinds {
		t.Run(k.dir, func(t *testing.T) {
			inLane(t, laneHeavy)
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()
			test(ctx, t, newDeployedFleet(ctx, t, k.dir, k.kind, true))
		})
	}
}

// newDeployedFleet starts the cluster and, with staticKCM, KCM's static
// pod, imports the image `make image-host` built, and writes the
// operator's overlay of deploy/<dir> (of kind): the image's tag, and (what
// this cluster's network needs, a kube-proxy elsewhere) the apiserver's
// address for the pods and the real node's toleration.
func newDeployedFleet(ctx context.Context, t *testing.T, dir, kind string, staticKCM bool) *deployedFleet {
	t.Helper()
	archive := repoPath(t, "build/image/fleet-controller-manager.oci.tar")
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("the image (make image-host): %v", err)
	}
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 2, RealNode: true})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	d := &deployedFleet{t: t, cluster: cluster, client: client, kubectl: kubectlAsAdmin(ctx, t, cluster), workload: strings.ToLower(kind) + "/" + fleetName,
		kcmOn: filepath.Join(cluster.StaticPodDir(), "kube-controller-manager.yaml"), kcmOff: filepath.Join(cluster.Dir, "kube-controller-manager.yaml.off")}
	if err := cluster.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	d.imageTag = imageTag(t, repoPath(t, "build/image/oci/index.json"))
	if staticKCM {
		d.writeKCMStaticPod()
	}
	d.writeOverlay(dir, kind)
	return d
}

// imageTag is the tag of the image in an OCI layout's index.
func imageTag(t *testing.T, indexFile string) string {
	t.Helper()
	data, err := os.ReadFile(indexFile)
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(data, &index); err != nil || len(index.Manifests) == 0 {
		t.Fatalf("reading %s: %v", indexFile, err)
	}
	return index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
}

// writeKCMStaticPod puts KCM's manifest where the kubelet runs it, as
// kubeadm does: host network, its flags, its files from the host.
func (d *deployedFleet) writeKCMStaticPod() {
	d.t.Helper()
	kubeconfig, err := d.cluster.Kubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		d.t.Fatal(err)
	}
	port, err := localcluster.FreePort()
	if err != nil {
		d.t.Fatal(err)
	}
	d.kcmPort = port
	args := append(d.cluster.ControllerManagerArgs(kubeconfig), "--secure-port="+strconv.Itoa(port), "--leader-elect=true")
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: "kube-system", Labels: map[string]string{"component": "kube-controller-manager", "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name:         "kube-controller-manager",
				Image:        "registry.k8s.io/kube-controller-manager:" + kubeVersion(d.t, d.client),
				Command:      append([]string{"kube-controller-manager"}, args...),
				VolumeMounts: []corev1.VolumeMount{{Name: "cluster", MountPath: d.cluster.Dir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "cluster", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: d.cluster.Dir}}}},
		},
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(d.kcmOn, data, 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func kubeVersion(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v.GitVersion
}

func (d *deployedFleet) writeOverlay(dir, kind string) {
	d.t.Helper()
	host, port := d.cluster.RealNodeAPIServer()
	d.overlayDir = d.t.TempDir()
	// kustomize takes a base by relative path only.
	base, err := filepath.Rel(d.overlayDir, repoPath(d.t, "deploy/"+dir))
	if err != nil {
		d.t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: fleet-controller-manager
  newTag: %q
patches:
- target: {kind: %s, name: fleet-controller-manager}
  patch: |
    apiVersion: apps/v1
    kind: %s
    metadata: {name: fleet-controller-manager}
    spec:
      template:
        spec:
          nodeSelector: {kubernetes.io/hostname: %s}
          tolerations: [{key: %s, operator: Exists, effect: NoSchedule}]
          containers:
          - name: fleet-controller-manager
            env:
            - {name: KUBERNETES_SERVICE_HOST, value: %q}
            - {name: KUBERNETES_SERVICE_PORT, value: %q}
`, base, d.imageTag, kind, kind, localcluster.RealNodeName, localcluster.RealNodeTaint, host, port)
	if err := os.WriteFile(filepath.Join(d.overlayDir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// createPKISecret is operations.md's first command, from this cluster's
// files.
func (d *deployedFleet) createPKISecret() {
	d.kubectl("-n", fleetNamespace, "create", "secret", "generic", "fleet-controller-manager-pki",
		"--from-file=sa.key="+d.cluster.ServiceAccountKeyFile(), "--from-file=ca.crt="+d.cluster.CAFile(), "--from-file=ca.key="+d.cluster.CAKeyFile())
}

// leaseHolder is who holds KCM's leader Lease ("" while released or
// missing).
func (d *deployedFleet) leaseHolder(ctx context.Context) string {
	lease, err := d.client.CoordinationV1().Leases(fleetNamespace).Get(ctx, kcmLease, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// fleetPod is one incarnation of a fleet pod: a StatefulSet's keeps its
// name.
type fleetPod struct {
	name string
	uid  types.UID
}

// fleetPods counts the fleet's pods that are Running, and Ready, and lists
// those not being deleted.
func (d *deployedFleet) fleetPods(ctx context.Context) (running, ready int, pods []fleetPod) {
	list, err := d.client.CoreV1().Pods(fleetNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleetSelector})
	if err != nil {
		return 0, 0, nil
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		pods = append(pods, fleetPod{name: p.Name, uid: p.UID})
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
		if podReady(&p) {
			ready++
		}
	}
	return running, ready, pods
}

// gone is how many of before are not in after.
func gone(before, after []fleetPod) int {
	n := 0
	for _, p := range before {
		if !slices.ContainsFunc(after, func(q fleetPod) bool { return q.uid == p.uid }) {
			n++
		}
	}
	return n
}

// migrate is operations.md's migration: the fleet deployed beside a
// leading KCM (whose ReplicaSet or StatefulSet controller starts its pods)
// waits, safely (checked with checkWaits), and takes over once KCM's
// manifest is moved out; it returns when the fleet held KCM's Lease, and
// when every replica was Ready, after the move.
func (d *deployedFleet) migrate(ctx context.Context, checkWaits bool) (takeover, ready time.Duration) {
	t := d.t
	t.Helper()
	waitTimed(ctx, t, "KCM's static pod to lead", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return holder != "" && !isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	d.createPKISecret()
	d.kubectl("apply", "-k", d.overlayDir)
	waitTimed(ctx, t, "KCM to start the fleet's 3 pods", 2*time.Minute, func() (bool, string) {
		running, _, _ := d.fleetPods(ctx)
		return running == 3, fmt.Sprintf("%d running", running)
	})
	if checkWaits {
		// They wait, safely: a while later none is Ready and KCM still leads.
		time.Sleep(10 * time.Second)
		if _, ready, _ := d.fleetPods(ctx); ready != 0 || isFleetHolder(d.leaseHolder(ctx)) {
			t.Fatalf("beside a leading KCM: %d fleet pods Ready, Lease held by %q; want 0 and KCM", ready, d.leaseHolder(ctx))
		}
	}
	d.moveKCM(false)
	takeover = waitTimed(ctx, t, "the fleet to take KCM's Lease", 2*time.Minute, func() (bool, string) {
		holder := d.leaseHolder(ctx)
		return isFleetHolder(holder), fmt.Sprintf("holder %q", holder)
	})
	return takeover, takeover + d.waitFleetReady(ctx, 3)
}

// waitFleetReady waits until want fleet pods are Ready.
func (d *deployedFleet) waitFleetReady(ctx context.Context, want int) time.Duration {
	d.t.Helper()
	return waitTimed(ctx, d.t, fmt.Sprintf("%d fleet pods Ready", want), 3*time.Minute, func() (bool, string) {
		running, ready, _ := d.fleetPods(ctx)
		return ready == want, fmt.Sprintf("%d running, %d ready", running, ready)
	})
}

// checkGracefulLeave deletes one fleet pod: its replica leaves (its Lease
// deleted), its container exits 0 on the kubelet's SIGTERM within the
// pod's grace period, and the fleet replaces it itself.
func (d *deployedFleet) checkGracefulLeave(ctx context.Context) {
	d.t.Helper()
	_, _, before := d.fleetPods(ctx)
	victim := before[0]
	lease, err := d.client.CoordinationV1().Leases(fleetNamespace).Get(ctx, victim.name, metav1.GetOptions{})
	if err != nil {
		d.t.Fatalf("replica %s's Lease: %v", victim.name, err)
	}
	pod, err := d.client.CoreV1().Pods(fleetNamespace).Get(ctx, victim.name, metav1.GetOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	grace := time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	watcher, err := d.client.CoreV1().Pods(fleetNamespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + victim.name, ResourceVersion: pod.ResourceVersion})
	if err != nil {
		d.t.Fatal(err)
	}
	defer watcher.Stop()
	deleted := time.Now()
	d.deletePods(ctx, victim)
	// A StatefulSet's replacement takes the same name, and a new Lease.
	left := waitTimed(ctx, d.t, "the deleted replica's Lease to go", time.Minute, func() (bool, string) {
		now, err := d.client.CoordinationV1().Leases(fleetNamespace).Get(ctx, victim.name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && now.UID != lease.UID, fmt.Sprintf("lease %s: %v", victim.name, err)
	})
	exit, took := waitPodGone(ctx, d.t, watcher, victim.uid, deleted, grace+10*time.Second)
	switch {
	case took >= grace:
		d.t.Errorf("pod %s took %v to go after its delete, at or past its %v grace period: the kubelet killed it", victim.name, took.Round(100*time.Millisecond), grace)
	case exit == nil:
		d.t.Errorf("pod %s went %v after its delete with no exit of its container seen", victim.name, took.Round(100*time.Millisecond))
	case exit.ExitCode != 0:
		d.t.Errorf("pod %s's container exited %d (%s) after SIGTERM, want 0", victim.name, exit.ExitCode, exit.Reason)
	}
	replaced := d.waitFleetReady(ctx, 3)
	if _, _, now := d.fleetPods(ctx); gone(before, now) != 1 {
		d.t.Errorf("after deleting %s: %d of the 3 pods before are gone, want 1", victim.name, gone(before, now))
	}
	if exit != nil {
		d.t.Logf("graceful leave: pod %s deleted; its Lease gone %v later, its container exited %d, its pod gone %v later (grace %v); 3 of 3 Ready again %v after that",
			victim.name, left.Round(100*time.Millisecond), exit.ExitCode, took.Round(100*time.Millisecond), grace, replaced.Round(100*time.Millisecond))
	}
}

// waitPodGone follows a pod's watch until the incarnation uid is deleted,
// and returns its container's last exit the kubelet reported and how long
// after since it went.
func waitPodGone(ctx context.Context, t *testing.T, watcher watch.Interface, uid types.UID, since time.Time, timeout time.Duration) (*corev1.ContainerStateTerminated, time.Duration) {
	t.Helper()
	var exit *corev1.ContainerStateTerminated
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				t.Fatalf("the pod's watch closed before its incarnation %s went", uid)
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || pod.UID != uid {
				continue
			}
			for _, c := range pod.Status.ContainerStatuses {
				if c.State.Terminated != nil {
					exit = c.State.Terminated
				}
			}
			if ev.Type == watch.Deleted {
				return exit, time.Since(since)
			}
		case <-deadline:
			t.Fatalf("pod incarnation %s still there %v after its delete", uid, timeout)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// moveKCM moves KCM's static pod manifest out of the kubelet's folder
// (on=false) or back (on=true), as operations.md says.
func (d *deployedFleet) moveKCM(on bool) {
	d.t.Helper()
	from, to := d.kcmOn, d.kcmOff
	if on {
		from, to = to, from
	}
	if err := os.Rename(from, to); err != nil {
		d.t.Fatal(err)
	}
}

// waitTimed polls cond every 100 ms and returns how long it took to hold.
func waitTimed(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		last = why
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %s: %v", what, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("waiting for %s: still %s after %v", what, last, timeout)
	return 0
}

func isFleetHolder(holder string) bool { return strings.HasPrefix(holder, "fleet:") }

// deletePods deletes the named pods at once, gracefully.
func (d *deployedFleet) deletePods(ctx context.Context, pods ...fleetPod) {
	d.t.Helper()
	for _, p := range pods {
		if err := d.client.CoreV1().Pods(fleetNamespace).Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			d.t.Fatal(err)
		}
	}
}

// kcmRSS is the static pod KCM's resident memory in MiB, from /proc (the
// container's process is this machine's).
func (d *deployedFleet) kcmRSS() (float64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	port := "--secure-port=" + strconv.Itoa(d.kcmPort)
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "\x00"+port+"\x00") || !strings.HasPrefix(string(cmdline), "kube-controller-manager\x00") {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(status), "\n") {
			if kib, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kib), "kB")), 64)
				return n / 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no kube-controller-manager process with %s", port)
}
