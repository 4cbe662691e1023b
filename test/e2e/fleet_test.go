//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/recordingpieces"
)

type pieceRecord = recordingpieces.PieceRecord

var dummySingletons = []string{"garbagecollector", "namespace", "nodelifecycle", "podgc"}

// recordingReplica is the test binary that runs recording pieces in place
// of controllers (test/recordingpieces/cmd/fleet-recording-replica).
const recordingReplica = "fleet-recording-replica"

// fleet is a set of recording replicas (recordingReplica) on one local
// control plane.
type fleet struct {
	t          *testing.T
	cluster    *localcluster.Cluster
	kubeconfig string
	dir        string
	args       []string

	mu      sync.Mutex
	members map[string]*localcluster.Process
	// killed maps an incarnation-less member name to the times it was
	// killed: its pieces cannot act after them.
	killed map[string][]int64
	// paused: the members stopped by SIGSTOP now, which run nothing
	// until SIGCONT (owners); what they do after it is in their records.
	paused map[string]bool
	// kubeconfigs overrides kubeconfig for a member (one that reaches the
	// apiserver through a fault proxy).
	kubeconfigs map[string]string
	// partitions, when set, is the fleet's partition count (else a new
	// fleet's default).
	partitions int
}

func newFleet(t *testing.T, extraArgs ...string) *fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Cleanup(cluster.Stop)
	kubeconfig, err := cluster.Kubeconfig("fleet", "fleet-controller-manager", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{t: t, cluster: cluster, kubeconfig: kubeconfig, dir: t.TempDir(), args: extraArgs,
		members: map[string]*localcluster.Process{}, killed: map[string][]int64{}, paused: map[string]bool{}, kubeconfigs: map[string]string{}}
}

func (f *fleet) start(name string, extraArgs ...string) {
	f.t.Helper()
	kubeconfig := f.kubeconfig
	if k, ok := f.kubeconfigs[name]; ok {
		kubeconfig = k
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--identity=" + name,
		"--fleet-namespace=kube-system",
		"--secure-port=0",
		"--record-file=" + filepath.Join(f.dir, name+".jsonl"),
		"--singletons=" + strings.Join(dummySingletons, ","),
		"-v=2",
	}, append(slices.Clone(f.args), extraArgs...)...)
	p, err := f.cluster.StartProcess(name, filepath.Join(binDir(f.t), recordingReplica), args, nil)
	if err != nil {
		f.t.Fatalf("starting %s: %v", name, err)
	}
	f.mu.Lock()
	f.members[name] = p
	f.mu.Unlock()
}

// stop ends a member gracefully (SIGTERM) and waits for it to exit.
func (f *fleet) stop(name string) {
	f.t.Helper()
	p := f.members[name]
	if err := p.Signal(syscall.SIGTERM); err != nil {
		f.t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		f.t.Fatalf("%s did not exit within a minute of SIGTERM:\n%s", name, p.LogTail(30))
	}
	if exited, err := p.Exited(); !exited || err != nil {
		f.t.Fatalf("%s exited with %v:\n%s", name, err, p.LogTail(30))
	}
	delete(f.members, name)
}

// signal sends sig to a member, noting when a SIGKILL ended its pieces. A
// SIGSTOP ends nothing: a paused member's pieces record what they do when
// it resumes (a piece that found its fence valid after SIGCONT, while
// another member had taken it, is the breach TestHandoverPause looks for).
func (f *fleet) signal(name string, sig syscall.Signal) int64 {
	f.t.Helper()
	now := time.Now().UnixNano()
	f.mu.Lock()
	switch sig {
	case syscall.SIGKILL:
		f.killed[name] = append(f.killed[name], now)
	case syscall.SIGSTOP:
		f.paused[name] = true
	case syscall.SIGCONT:
		delete(f.paused, name)
	}
	f.mu.Unlock()
	if err := f.members[name].Signal(sig); err != nil {
		f.t.Fatal(err)
	}
	if sig == syscall.SIGKILL {
		<-f.members[name].Done()
		delete(f.members, name)
	}
	return now
}

// records reads every member's record file.
func (f *fleet) records() []pieceRecord {
	f.t.Helper()
	out, err := recordingpieces.Read(filepath.Join(f.dir, "*.jsonl"))
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

type interval struct {
	piece, owner string // owner: member/incarnation
	member       string
	start, end   int64 // end MaxInt64 while running
	stopped      bool
}

// intervals turns records into run intervals: a piece acts from its start
// until the last time it found its fence valid, and never after its
// process was killed.
func (f *fleet) intervals() []interval {
	open := map[string]*interval{}
	var out []interval
	for _, r := range f.records() {
		key := r.Piece + "@" + r.Member + "/" + r.Incarnation
		switch r.Event {
		case "start":
			open[key] = &interval{piece: r.Piece, owner: r.Member + "/" + r.Incarnation, member: r.Member, start: r.Time, end: math.MaxInt64}
		case "stop":
			if iv := open[key]; iv != nil {
				iv.end, iv.stopped = r.ActedUntil, true
				out = append(out, *iv)
				delete(open, key)
			}
		}
	}
	for _, iv := range open {
		out = append(out, *iv)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range out {
		for _, k := range f.killed[out[i].member] {
			if k > out[i].start && k < out[i].end {
				out[i].end = k
			}
		}
	}
	return out
}

// checkNoOverlap asserts that no piece ever ran on two processes at once,
// and that at least minHandovers times a piece went from one process to
// another (a check over runs that never changed hands proves nothing).
func (f *fleet) checkNoOverlap(minHandovers int) {
	f.t.Helper()
	byPiece := map[string][]interval{}
	for _, iv := range f.intervals() {
		byPiece[iv.piece] = append(byPiece[iv.piece], iv)
	}
	handovers := 0
	for piece, ivs := range byPiece {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
		for i := 1; i < len(ivs); i++ {
			for j := 0; j < i; j++ {
				if ivs[j].owner != ivs[i].owner && ivs[i].start < ivs[j].end {
					f.t.Errorf("piece %s ran on %s from %s while %s ran it until %s", piece, ivs[i].owner, ts(ivs[i].start), ivs[j].owner, ts(ivs[j].end))
				}
			}
			if ivs[i-1].owner != ivs[i].owner {
				handovers++
			}
		}
	}
	if handovers < minHandovers {
		f.t.Errorf("no-overlap check: %d handovers between processes, want at least %d", handovers, minHandovers)
	}
	f.t.Logf("no-overlap check: %d pieces, %d handovers between processes checked", len(byPiece), handovers)
}

func ts(ns int64) string {
	if ns == math.MaxInt64 {
		return "now"
	}
	return time.Unix(0, ns).Format("15:04:05.000")
}

// owners is the member running each piece now (from the records); a
// paused member runs nothing.
func (f *fleet) owners() map[string][]string {
	out := map[string][]string{}
	intervals := f.intervals()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, iv := range intervals {
		if iv.end == math.MaxInt64 && !f.paused[iv.member] {
			out[iv.piece] = append(out[iv.piece], iv.member)
		}
	}
	return out
}

// waitSettled waits until every piece runs on exactly the member the ring
// of members gives it.
func (f *fleet) waitSettled(members []string, timeout time.Duration) time.Duration {
	f.t.Helper()
	config := shard.DefaultRingConfig
	if f.partitions > 0 {
		config.Partitions = f.partitions
	}
	ring := shard.NewRing(config, members)
	pieces := shard.AllPieces(config.Partitions, dummySingletons)
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		owners := f.owners()
		for _, p := range pieces {
			want := ring.Owner(p)
			if got := owners[string(p)]; len(got) != 1 || got[0] != want {
				last = fmt.Sprintf("%s runs on %v, want %s", p, got, want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var logs strings.Builder
		for name, p := range f.members {
			fmt.Fprintf(&logs, "\n--- %s ---\n%s", name, p.LogTail(15))
		}
		f.t.Fatalf("fleet %v did not settle within %v: %s%s", members, timeout, last, logs.String())
	}
	return time.Since(start)
}

// gaps measures, for every piece that changed hands after since, the time
// between the end of its previous run and the start of the next one.
func (f *fleet) gaps(since int64) []time.Duration {
	byPiece := map[string][]interval{}
	for _, iv := range f.intervals() {
		byPiece[iv.piece] = append(byPiece[iv.piece], iv)
	}
	var out []time.Duration
	for _, ivs := range byPiece {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
		for i := 1; i < len(ivs); i++ {
			if ivs[i].start > since && ivs[i-1].end != math.MaxInt64 {
				out = append(out, time.Duration(ivs[i].start-ivs[i-1].end))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[int(math.Ceil(p*float64(len(d))))-1]
}

func (f *fleet) alive() {
	f.t.Helper()
	for name, p := range f.members {
		if exited, err := p.Exited(); exited {
			f.t.Errorf("%s exited unexpectedly (%v):\n%s", name, err, p.LogTail(30))
		}
	}
}

// settledFleet starts n members and waits until they own every piece.
func settledFleet(t *testing.T, n int) (*fleet, []string) {
	t.Helper()
	f := newFleet(t)
	all := names(n)
	for _, name := range all {
		f.start(name)
	}
	f.waitSettled(all, 2*time.Minute)
	return f, all
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("member-%d", i+1)
	}
	return out
}

// TestHandoverScaleUpAndDown scales a fleet 1 -> 5 -> 2 gracefully.
func TestHandoverScaleUpAndDown(t *testing.T) {
	inLane(t, laneHeavy)
	f := newFleet(t)
	all := names(5)
	f.start(all[0])
	d := f.waitSettled(all[:1], 2*time.Minute)
	t.Logf("one member owns every piece %v after start", d.Round(time.Millisecond))

	mark := time.Now().UnixNano()
	for _, n := range all[1:] {
		f.start(n)
	}
	d = f.waitSettled(all, 2*time.Minute)
	up := f.gaps(mark)
	t.Logf("scale 1->5 settled in %v; %d pieces moved; gap p50 %v p99 %v", d.Round(time.Millisecond), len(up), percentile(up, 0.5).Round(time.Millisecond), percentile(up, 0.99).Round(time.Millisecond))

	// Steady state: Lease writes per member per minute, from the audit log.
	steadyFrom := time.Now()
	time.Sleep(30 * time.Second)
	writes := leaseWrites(t, f.cluster.AuditLog, steadyFrom, time.Now())
	for _, n := range all {
		t.Logf("steady state: %s wrote its Lease %.1f times per minute", n, float64(writes[n])*2)
		if writes[n] == 0 {
			t.Errorf("%s did not renew its Lease in 30 s", n)
		}
	}

	mark = time.Now().UnixNano()
	for _, n := range all[2:] {
		f.stop(n)
	}
	d = f.waitSettled(all[:2], 2*time.Minute)
	down := f.gaps(mark)
	t.Logf("scale 5->2 (graceful) settled in %v; %d pieces moved; gap p50 %v p99 %v", d.Round(time.Millisecond), len(down), percentile(down, 0.5).Round(time.Millisecond), percentile(down, 0.99).Round(time.Millisecond))
	// A graceful leave hands over without waiting for the Lease to expire;
	// a gap as long as the lease duration means a leave went unseen.
	if worst := percentile(down, 1); worst >= 15*time.Second {
		t.Errorf("a piece waited %v after a graceful leave: the leave was treated as a crash", worst)
	}
	f.alive()
	f.checkNoOverlap(1)
}

// TestHandoverRollingRestart restarts every member of three in turn as a
// StatefulSet does: a graceful stop, then at once a new process with the
// same identity. The replacement appears while the others take over its
// predecessor's pieces; it must not hold them up.
func TestHandoverRollingRestart(t *testing.T) {
	inLane(t, laneLight)
	f, all := settledFleet(t, 3)
	mark := time.Now().UnixNano()
	for _, n := range all {
		f.stop(n)
		f.start(n)
		f.waitSettled(all, 2*time.Minute)
	}
	gaps := f.gaps(mark)
	t.Logf("rolling restart of 3: %d pieces changed hands; gap p50 %v p99 %v max %v", len(gaps),
		percentile(gaps, 0.5).Round(time.Millisecond), percentile(gaps, 0.99).Round(time.Millisecond), percentile(gaps, 1).Round(time.Millisecond))
	// A handover that waited for the replacement to finish starting (or for
	// a lease to expire) would leave pieces unowned for seconds.
	if worst := percentile(gaps, 1); worst >= 2*time.Second {
		t.Errorf("a piece was unowned for %v during the rolling restart", worst)
	}
	f.alive()
	f.checkNoOverlap(1)
}

// TestHandoverKill kills one of three members with SIGKILL.
func TestHandoverKill(t *testing.T) {
	inLane(t, laneHeavy)
	f, all := settledFleet(t, 3)
	killedAt := f.signal(all[2], syscall.SIGKILL)
	d := f.waitSettled(all[:2], 2*time.Minute)
	gaps := f.gaps(killedAt)
	t.Logf("kill -9: every piece owned again %v after the kill; %d pieces moved; gap p50 %v max %v", d.Round(time.Millisecond), len(gaps), percentile(gaps, 0.5).Round(time.Millisecond), percentile(gaps, 1).Round(time.Millisecond))
	// Bound: the lease duration, one renewal period for the expiry check, and
	// the handover itself.
	if max := percentile(gaps, 1); max > 25*time.Second {
		t.Errorf("a piece of the killed member was unowned for %v", max)
	}
	f.alive()
	f.checkNoOverlap(1)
}

// TestHandoverPause stops one member with SIGSTOP for longer than the lease
// duration, then resumes it: the others take its pieces, and it must stop
// them before it acts again.
func TestHandoverPause(t *testing.T) {
	inLane(t, laneLight)
	f, all := settledFleet(t, 3)
	pausedAt := f.signal(all[2], syscall.SIGSTOP)
	// While it is stopped the others see its Lease expire and take over.
	d := f.waitSettled(all[:2], 2*time.Minute)
	t.Logf("SIGSTOP: the others own everything %v after the pause", d.Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	f.signal(all[2], syscall.SIGCONT)
	// It resumes, finds its authority gone, stops its pieces, and rejoins.
	d = f.waitSettled(all, 2*time.Minute)
	t.Logf("SIGCONT: fleet of 3 settled again %v after resume (pause lasted %v)", d.Round(time.Millisecond), time.Duration(time.Now().UnixNano()-pausedAt).Round(time.Second))
	f.alive()
	f.checkNoOverlap(1)
}

// TestHandoverAPIServerRestart restarts kube-apiserver under a settled fleet.
func TestHandoverAPIServerRestart(t *testing.T) {
	inLane(t, laneLight)
	f, all := settledFleet(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	restartAt := time.Now()
	if err := f.cluster.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver restarted in %v", time.Since(restartAt).Round(time.Millisecond))
	d := f.waitSettled(all, 2*time.Minute)
	t.Logf("fleet settled %v after the apiserver was back", d.Round(time.Millisecond))
	f.alive()
	f.checkNoOverlap(0)
}

// TestHandoverBadLeases writes Leases a fleet member must survive: garbage
// and huge state annotations under the fleet label, a member's own Lease
// overwritten with garbage, and a live member's Lease deleted by hand.
func TestHandoverBadLeases(t *testing.T) {
	inLane(t, laneLight)
	f, all := settledFleet(t, 3)
	client, err := f.cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases := client.CoordinationV1().Leases("kube-system")
	bad := map[string]string{
		"garbage":       "{not json",
		"huge":          `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","running":["partition/` + strings.Repeat("9", 200<<10) + `"]}`,
		"other-version": `{"v":9,"inc":"a","seq":1,"epoch":1,"view":""}`,
		"claims-all":    `{"v":1,"inc":"x","seq":1,"epoch":0,"view":"","running":["partition/1"],"joining":true}`,
	}
	for name, value := range bad {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: "bad-" + name, Labels: map[string]string{"fleet-controller-manager.io/fleet": "fleet-controller-manager"},
			Annotations: map[string]string{"fleet-controller-manager.io/state": value},
		}}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating bad lease %s: %v", name, err)
		}
	}
	// Someone else overwrites member-2's state, read afresh if member-2
	// renewed in between, as kubectl edit would.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, all[1], metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations["fleet-controller-manager.io/state"] = "overwritten"
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("overwriting %s: %v", all[1], err)
	}
	// An operator deletes member-3's Lease while it runs.
	mark := time.Now().UnixNano()
	if err := leases.Delete(ctx, all[2], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// member-3 writes its Lease back, and member-2 its state.
	poll(ctx, t, "the deleted Lease and the overwritten state restored", time.Minute, func() (bool, string) {
		for _, n := range all[1:] {
			l, err := leases.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, fmt.Sprintf("%s's lease: %v", n, err)
			}
			if st := l.Annotations["fleet-controller-manager.io/state"]; strings.HasPrefix(st, "overwritten") {
				return false, n + " has not restored its state"
			}
		}
		return true, ""
	})
	f.waitSettled(all, 2*time.Minute)
	if moved := f.gaps(mark); len(moved) > 0 {
		t.Logf("%d pieces changed hands after the bad writes", len(moved))
	}
	logs, err := os.ReadFile(f.members[all[0]].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "Ignoring unreadable state in fleet lease") {
		t.Errorf("member-1 did not log the unreadable leases")
	}
	f.alive()
	f.checkNoOverlap(0)
}
