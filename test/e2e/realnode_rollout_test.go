//go:build e2e && node

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestRealNodeRollingUpdateAndDrain runs the fleet as shipped on the real
// node and does to it what an operator does:
//   - a new image rolled out with kubectl set image: readiness gates each
//     replacement (a Deployment keeps 3 Ready throughout), and from the pods' own logs (read through the kubelet)
//     no piece is unowned longer than the docs' figure and none runs on two
//     replicas at once;
//   - the node drained: the PodDisruptionBudget lets one replica go at a
//     time, so the drain evicts one and waits, and the fleet never has
//     fewer than two Ready; uncordoned, the third returns.
func TestRealNodeRollingUpdateAndDrain(t *testing.T) {
	forEachFleetKind(t, testRollingUpdateAndDrain)
}

func testRollingUpdateAndDrain(ctx context.Context, t *testing.T, d *deployedFleet) {
	d.migrate(ctx, true)
	logs := d.streamLogs(ctx)

	next := d.imageTag + "-next"
	if err := d.cluster.TagImage(ctx, "docker.io/library/fleet-controller-manager:"+d.imageTag, "docker.io/library/fleet-controller-manager:"+next); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the pieces settle after the takeover
	from := time.Now()
	fewestReady := d.watchFewestReady(ctx)
	d.kubectl("-n", fleetNamespace, "set", "image", d.workload, "fleet-controller-manager=fleet-controller-manager:"+next)
	d.kubectl("-n", fleetNamespace, "rollout", "status", d.workload, "--timeout=5m")
	took, low := time.Since(from), fewestReady()
	// Readiness gates the rollout: a Deployment (maxSurge 1,
	// maxUnavailable 0) replaces a replica only once its successor is
	// Ready; a StatefulSet replaces one at a time.
	if want := map[string]int{"deployment": 3, "statefulset": 2}[strings.Split(d.workload, "/")[0]]; low < want {
		t.Errorf("rolling update of %s: %d replicas Ready at the fewest, want at least %d", d.workload, low, want)
	}
	time.Sleep(3 * time.Second) // the last handovers after the rollout's last Ready
	to := time.Now()
	runs := readPieceRuns(t, logs.files())
	if len(runs) == 0 {
		t.Fatalf("no piece runs in the pods' logs %v", logs.files())
	}
	gap := longestUnowned(runs, from, to)
	t.Logf("rolling update of the image: %v for 3 replicas, %d Ready at the fewest; %d pieces; longest unowned: %s for %v", took.Round(100*time.Millisecond), low, len(runs), gap.piece, gap.length.Round(time.Millisecond))
	if gap.length > time.Second {
		t.Errorf("piece %s was unowned for %v during the rolling update; the docs say well under a second", gap.piece, gap.length)
	}
	for _, overlap := range overlappingRuns(runs) {
		t.Errorf("two owners: %s", overlap)
	}

	d.checkDrain(ctx)
}

// watchFewestReady samples the fleet's Ready pods every 100 ms until the
// function it returns is called, which returns the fewest seen.
func (d *deployedFleet) watchFewestReady(ctx context.Context) func() int {
	fewest := make(chan int, 1)
	watchCtx, stop := context.WithCancel(ctx)
	go func() {
		low := 3
		for watchCtx.Err() == nil {
			if _, ready, _ := d.fleetPods(watchCtx); watchCtx.Err() == nil && ready < low {
				low = ready
			}
			time.Sleep(100 * time.Millisecond)
		}
		fewest <- low
	}()
	return func() int {
		stop()
		return <-fewest
	}
}

// podLogStreams follows the log of every fleet pod that runs, through the
// apiserver and the kubelet, into a file per pod: a deleted pod's log
// goes with it.
type podLogStreams struct {
	dir string
	mu  sync.Mutex
	// byPod is each followed pod incarnation's file (name-uid).
	byPod map[string]string
}

func (d *deployedFleet) streamLogs(ctx context.Context) *podLogStreams {
	s := &podLogStreams{dir: d.t.TempDir(), byPod: map[string]string{}}
	go func() {
		for ctx.Err() == nil {
			pods, err := d.client.CoreV1().Pods(fleetNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleetSelector})
			if err == nil {
				for _, p := range pods.Items {
					if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
						continue
					}
					// A StatefulSet's replacement keeps the name: one
					// log per incarnation.
					incarnation := p.Name + "-" + string(p.UID)
					path := filepath.Join(s.dir, incarnation+".log")
					s.mu.Lock()
					_, following := s.byPod[incarnation]
					s.byPod[incarnation] = path
					s.mu.Unlock()
					if !following {
						go d.followLog(ctx, p.Name, path)
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return s
}

func (d *deployedFleet) followLog(ctx context.Context, pod, path string) {
	out, err := os.Create(path)
	if err != nil {
		return
	}
	defer out.Close()
	stream, err := d.client.CoreV1().Pods(fleetNamespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		fmt.Fprintf(out, "following the log failed: %v\n", err)
		return
	}
	defer stream.Close()
	_, _ = io.Copy(out, stream)
}

// files is each followed pod's log file.
func (s *podLogStreams) files() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	files := map[string]string{}
	for pod, path := range s.byPod {
		files[pod] = path
	}
	return files
}

// overlappingRuns are the runs of a piece that began on one replica before
// another replica's run of it ended.
func overlappingRuns(runs map[string][]pieceRun) []string {
	var overlaps []string
	for piece, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		for i := 1; i < len(rs); i++ {
			for _, earlier := range rs[:i] {
				if earlier.replica != rs[i].replica && rs[i].start.Before(earlier.end) {
					overlaps = append(overlaps, fmt.Sprintf("%s: %s from %s, while %s ran it until %s (%s)", piece, rs[i].replica,
						rs[i].start.Format("15:04:05.000000"), earlier.replica, earlier.end.Format("15:04:05.000000"), earlier.ended))
				}
			}
		}
	}
	return overlaps
}

// checkDrain drains the real node, where every replica runs: the
// PodDisruptionBudget (maxUnavailable 1) lets the drain evict one replica
// and refuses the rest while its replacement cannot schedule, and the
// fleet keeps two Ready throughout; uncordoned, it is whole again.
func (d *deployedFleet) checkDrain(ctx context.Context) {
	t := d.t
	t.Helper()
	_, _, before := d.fleetPods(ctx)
	fewestReady := d.watchFewestReady(ctx)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "kubectl"), "--kubeconfig="+d.cluster.AdminKubeconfig,
		"drain", localcluster.RealNodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=40s")
	out, err := cmd.CombinedOutput()
	low := fewestReady()
	if err == nil {
		t.Fatalf("the drain of the node holding every replica finished, want it held by the PodDisruptionBudget:\n%s", out)
	}
	_, _, after := d.fleetPods(ctx)
	evicted := gone(before, after)
	t.Logf("drain: %d of 3 replicas evicted in 40 s; fewest Ready %d; kubectl said: %s", evicted, low,
		firstLineWith(string(out), "disruption budget"))
	if evicted != 1 || low < 2 {
		t.Errorf("drain: %d replicas evicted and %d Ready at the fewest; want 1 and 2 (the PodDisruptionBudget)", evicted, low)
	}
	if !strings.Contains(string(out), "disruption budget") {
		t.Errorf("kubectl drain did not name the disruption budget:\n%s", out)
	}
	d.kubectl("uncordon", localcluster.RealNodeName)
	d.waitFleetReady(ctx, 3)
}
