//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// partitionMoves is how often the test moves the partition (half of them
// back onto the long-running replica): PARTITION_MOVES, default 6 (three
// round trips, in make test); make test-long runs 50.
func partitionMoves(t *testing.T) int {
	v := os.Getenv("PARTITION_MOVES")
	if v == "" {
		return 6
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("PARTITION_MOVES=%q: want a number of moves, at least 2", v)
	}
	return n
}

// convergenceBound is what the test asserts after each move: far above the
// few seconds a move takes on a loaded 2-core machine, far below the five
// minutes a stale ReplicaSet or Job expectation would hold the workload.
// The measured times are logged.
const convergenceBound = 30 * time.Second

// TestPartitionMovesUnderLoad moves one partition holding a live workload
// (a Deployment being scaled, Jobs, a Service with endpoints) between a
// long-running replica and one that joins and leaves (partitionMoves); the
// workload is changed just before every move, so the releasing replica
// has work in flight (expectations, queued keys) as it loses the
// partition. After every move the workload converges; the audit log shows
// no write into the namespace from a replica outside the times it ran the
// partition; the long-running replica's goroutines and live heap return to
// their starting level.
func TestPartitionMovesUnderLoad(t *testing.T) {
	inLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cluster, client, bin := podCluster(ctx, t)
	httpClient, err := cluster.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	const stay, mover = "fcm-a", "fcm-b"
	ns, p := namespaceMovingTo(mover, []string{stay, mover})
	piece := string(shard.PartitionPiece(p))
	t.Logf("namespace %s is in partition %d: %s runs it alone, %s when both run", ns, p, stay, mover)

	stayProc, stayPort, err := cluster.StartFleetReplica(ctx, bin, stay, "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	waitFleetRunning(ctx, t, client, []string{stay})
	createMovingWorkload(ctx, t, client, ns)
	baseline := runtimeLevels(t, httpClient, stayPort)
	t.Logf("%s after the workload converged: %d goroutines, %d MiB live heap", stay, baseline.goroutines, baseline.heap>>20)

	var moverProc *localcluster.Process
	var took []time.Duration
	moves := partitionMoves(t)
	for move := 1; move <= moves; move++ {
		replicas := int32(1 + move%4)
		scaleMoving(ctx, t, client, ns, replicas)
		var owner string
		if move%2 == 1 {
			owner = mover
			if moverProc, _, err = cluster.StartFleetReplica(ctx, bin, mover, "-v=2"); err != nil {
				t.Fatal(err)
			}
		} else {
			owner = stay
			if err := moverProc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		waitRunsPiece(ctx, t, client, owner, piece)
		moved := time.Now()
		// The new owner serves the changes made while the partition moved
		// and a change made after it.
		replicas++
		scaleMoving(ctx, t, client, ns, replicas)
		createMoveJob(ctx, t, client, ns, move)
		waitMovingWorkload(ctx, t, client, ns, replicas, move+1, convergenceBound)
		took = append(took, time.Since(moved))
		if move%10 == 0 {
			t.Logf("move %d (to %s): converged %v after the move", move, owner, took[len(took)-1].Round(10*time.Millisecond))
		}
		if owner == stay {
			select {
			case <-moverProc.Done():
			case <-time.After(time.Minute):
				t.Fatalf("%s did not exit within a minute of SIGTERM", mover)
			}
		}
	}
	sorted := append([]time.Duration(nil), took...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("%d moves: workload converged after each in median %v, p90 %v, max %v", len(took),
		sorted[len(sorted)/2].Round(10*time.Millisecond), percentile(sorted, 0.9).Round(10*time.Millisecond), sorted[len(sorted)-1].Round(10*time.Millisecond))

	// Levels settle after the last move: wait for them rather than sample
	// a moment.
	var end levels
	poll(ctx, t, stay+"'s goroutines and heap back to their starting level", time.Minute, func() (bool, string) {
		end = runtimeLevels(t, httpClient, stayPort)
		return end.goroutines <= baseline.goroutines*11/10+20 && end.heap <= baseline.heap*13/10+8<<20,
			fmt.Sprintf("%d goroutines, %d MiB live heap (start %d, %d MiB)", end.goroutines, end.heap>>20, baseline.goroutines, baseline.heap>>20)
	})
	t.Logf("%s after %d moves: %d goroutines, %d MiB live heap", stay, moves, end.goroutines, end.heap>>20)

	checkWritesWithinOwnership(t, cluster.AuditLog, ns, piece, map[string]string{stay: stayProc.LogPath, mover: moverProc.LogPath})
}

// namespaceMovingTo finds a namespace whose partition member owns in a
// ring of members.
func namespaceMovingTo(member string, members []string) (string, int) {
	ring := shard.NewRing(shard.DefaultRingConfig, members)
	for i := 0; ; i++ {
		ns := fmt.Sprintf("moving-%d", i)
		p := shard.DefaultRingConfig.NamespacePartition(ns)
		if ring.PartitionOwner(p) == member {
			return ns, p
		}
	}
}

// createMovingWorkload creates namespace ns with a Deployment "web" of 2
// replicas, a Service selecting its pods and Job job-0, and waits until
// they converge.
func createMovingWorkload(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	createNamespace(ctx, t, client, ns)
	createDeployment(ctx, t, client, ns, "web", 2)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createMoveJob(ctx, t, client, ns, 0)
	waitMovingWorkload(ctx, t, client, ns, 2, 1, 2*time.Minute)
}

func scaleMoving(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createMoveJob(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, i int) {
	t.Helper()
	if err := createJob(ctx, client, ns, i); err != nil {
		t.Fatal(err)
	}
}

// createJob creates Job job-<i> in ns: one pod to complete.
func createJob(ctx context.Context, client kubernetes.Interface, ns string, i int) error {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i), Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}},
			}},
		},
	}
	_, err := client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	return err
}

// waitMovingWorkload: the Deployment has replicas available and up to
// date, jobs Jobs are complete, and the Service's EndpointSlices list
// exactly the Deployment's pods.
func waitMovingWorkload(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, replicas int32, jobs int, timeout time.Duration) {
	t.Helper()
	poll(ctx, t, "the moving partition's workload", timeout, func() (bool, string) {
		missing := movingWorkloadMissing(ctx, client, ns, replicas, jobs)
		return missing == "", missing
	})
}

// movingWorkloadMissing says what of ns's workload is not yet as asked
// ("" when nothing): Deployment "web" available and up to date at
// replicas, jobs Jobs complete, and the Service's EndpointSlices listing
// exactly the Deployment's ready pods.
func movingWorkloadMissing(ctx context.Context, client kubernetes.Interface, ns string, replicas int32, jobs int) string {
	d, err := client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !deploymentDone(d, replicas) {
		return fmt.Sprintf("%s/web: %+v, want %d", ns, d.Status, replicas)
	}
	list, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	succeeded := 0
	for _, j := range list.Items {
		if jobComplete(&j) {
			succeeded++
		}
	}
	if succeeded != jobs {
		return fmt.Sprintf("%s: %d of %d jobs complete", ns, succeeded, jobs)
	}
	slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
	if err != nil {
		return err.Error()
	}
	endpoints := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				endpoints++
			}
		}
	}
	if endpoints != int(replicas) {
		return fmt.Sprintf("%s: %d ready endpoints, want %d", ns, endpoints, replicas)
	}
	return ""
}

// jobComplete reports the Job's Complete condition. Its succeeded count is
// not the test: a create whose reply a network fault lost is retried, as
// KCM's job controller does, and both Pods count (Succeeded 2 of
// completions 1).
func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func deploymentDone(d *appsv1.Deployment, replicas int32) bool {
	s := d.Status
	return s.ObservedGeneration == d.Generation && s.Replicas == replicas && s.UpdatedReplicas == replicas && s.AvailableReplicas == replicas && s.ReadyReplicas == replicas
}

// waitRunsPiece waits until member's Lease says it runs piece.
func waitRunsPiece(ctx context.Context, t *testing.T, client kubernetes.Interface, member, piece string) {
	t.Helper()
	poll(ctx, t, member+" to run "+piece, 2*time.Minute, func() (bool, string) {
		lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, member, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, err := membership.ParseState(lease.Annotations[membership.StateAnnotation])
		if err != nil {
			return false, err.Error()
		}
		for _, r := range st.Running {
			if r == piece {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s runs %d pieces, not %s", member, len(st.Running), piece)
	})
}

type levels struct {
	goroutines int
	heap       uint64
}

var heapAllocLine = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)`)

// runtimeLevels reads a replica's goroutine count and its live heap right
// after a garbage collection (pprof's heap endpoint with gc=1).
func runtimeLevels(t *testing.T, client *http.Client, port int) levels {
	t.Helper()
	get := func(path string) string {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", path, resp.StatusCode)
		}
		return string(body)
	}
	var out levels
	m := heapAllocLine.FindStringSubmatch(get("/debug/pprof/heap?gc=1&debug=1"))
	if m == nil {
		t.Fatal("no HeapAlloc in the heap profile")
	}
	out.heap, _ = strconv.ParseUint(m[1], 10, 64)
	for _, line := range strings.Split(get("/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			out.goroutines, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if out.goroutines == 0 {
		t.Fatal("no go_goroutines in /metrics")
	}
	return out
}

// klogPiece matches the manager's "Starting piece" and "Piece stopped"
// lines: a piece acts only between them.
var klogPiece = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"(Starting piece|Piece stopped)" piece="([^"]+)"`)

// ownership reads from a replica's log when it ran piece (each
// incarnation in turn; one still running ends at +inf).
func ownership(t *testing.T, logPath, piece string) [][2]time.Time {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	year := time.Now().Year()
	var out [][2]time.Time
	var open *time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		m := klogPiece.FindStringSubmatch(sc.Text())
		if m == nil || m[3] != piece {
			continue
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[1]), time.Local)
		if err != nil {
			t.Fatal(err)
		}
		if m[2] == "Starting piece" {
			open = &at
		} else if open != nil {
			out = append(out, [2]time.Time{*open, at})
			open = nil
		}
	}
	if open != nil {
		out = append(out, [2]time.Time{*open, time.Unix(0, math.MaxInt64)})
	}
	return out
}

// checkWritesWithinOwnership: every write by a replica into ns falls in a
// time that replica ran piece.
func checkWritesWithinOwnership(t *testing.T, auditLog, ns, piece string, logs map[string]string) {
	t.Helper()
	owned := map[string][][2]time.Time{}
	for member, path := range logs {
		owned[member] = ownership(t, path, piece)
	}
	writes, outside := 0, 0
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || e.ObjectRef.Namespace != ns || !isWriteVerb(e.Verb) {
			return
		}
		a, ok := parseFleetAgent(e.UserAgent)
		if !ok || a.piece != membership.PartitionControllers {
			return
		}
		replica, clientName := a.replica, a.client
		writes++
		for _, iv := range owned[replica] {
			if !e.StageTimestamp.Before(iv[0]) && !e.StageTimestamp.After(iv[1]) {
				return
			}
		}
		outside++
		if outside <= 10 {
			t.Errorf("%s by %s (%s) on %s/%s at %s, outside its runs of %s", e.Verb, replica, clientName, e.ObjectRef.Resource, e.ObjectRef.Name, e.StageTimestamp.Local().Format("15:04:05.000000"), piece)
		}
	})
	if writes == 0 {
		t.Fatal("no fleet writes into the moving namespace in the audit log")
	}
	if outside > 0 {
		t.Fatalf("%d of %d writes into %s outside the writer's ownership of %s", outside, writes, ns, piece)
	}
	t.Logf("audit: %d writes into %s, each within its replica's runs of %s (%d runs on %s, %d on %s)", writes, ns, piece,
		len(owned["fcm-a"]), "fcm-a", len(owned["fcm-b"]), "fcm-b")
}

func isWriteVerb(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// podCluster starts a control plane whose pods are scheduled and become
// ready (kube-scheduler, two kwok nodes), and returns its admin client and
// the fleet binary.
func podCluster(ctx context.Context, t *testing.T) (*localcluster.Cluster, kubernetes.Interface, string) {
	t.Helper()
	cluster := startCluster(ctx, t, localcluster.Options{Scheduler: true, KwokNodes: 2, KwokPodParallelism: 32})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cluster, client, filepath.Join(binDir(t), "fleet-controller-manager")
}

func TestJobComplete(t *testing.T) {
	cases := []struct {
		name   string
		status batchv1.JobStatus
		want   bool
	}{
		{name: "complete", status: batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}, want: true},
		{name: "complete with a retried create's Pod counted", status: batchv1.JobStatus{Succeeded: 2, Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}, {Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}, want: true},
		{name: "succeeded, not yet complete", status: batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}}, want: false},
		{name: "failed", status: batchv1.JobStatus{Failed: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}, want: false},
		{name: "running", status: batchv1.JobStatus{Active: 1}, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobComplete(&batchv1.Job{Status: tc.status}); got != tc.want {
				t.Errorf("jobComplete = %v, want %v", got, tc.want)
			}
		})
	}
}
