//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/faultproxy"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// The chaos soak: a fleet running the real controllers, each replica
// reaching kube-apiserver through its own fault proxy, under a changing
// workload, while a seeded schedule injects one fault at a time. After
// every fault the workload must converge within the lease duration plus
// 30 s; at the end every replica's record of the pieces it ran is checked
// against the others' and against every partition controller write in the
// audit log.
//
// CHAOS_DURATION (a Go duration) and CHAOS_SEED (default 1) choose the
// run. Without CHAOS_DURATION it runs one round: every clean kind of fault
// once, in the seed's order (make test). A soak runs every kind, at least
// once: `make chaos` runs 20 minutes with a random seed, which it prints
// so that a failing run can be replayed; .ci/run adds the gray kinds,
// each at least once, with a fresh seed to every CI run.

// chaosFault is a kind of fault the soak injects.
type chaosFault string

const (
	faultCut          chaosFault = "cut"           // the replica's connections reset, new ones refused
	faultBlackhole    chaosFault = "blackhole"     // the replica's link goes silent
	faultLatency      chaosFault = "latency"       // 150-400 ms each way, with jitter
	faultBandwidth    chaosFault = "bandwidth"     // 16-64 KiB/s each way per connection
	faultKill         chaosFault = "kill"          // SIGKILL, started again 1-6 s later
	faultPause        chaosFault = "pause"         // SIGSTOP, SIGCONT 5-20 s later
	faultAPIServer    chaosFault = "apiserver"     // kube-apiserver restarted
	faultEtcd         chaosFault = "etcd"          // etcd restarted
	faultLeaseDeleted chaosFault = "lease-deleted" // a live replica's Lease deleted
	faultLeaseGarbage chaosFault = "lease-garbage" // a live replica's state overwritten with garbage
	faultSlow         chaosFault = "slow"          // the replica's CPU capped at 0.01-0.04 cores for 20-60 s
	faultThrottled    chaosFault = "throttled"     // APF answers 429 to the replica's own requests, or to the whole fleet's, for 5-20 s
	faultExpired      chaosFault = "expired"       // etcd compacted and restarted: every watch resumes into 410 Gone at once
	faultStalledWatch chaosFault = "stalled-watch" // the replica's watch streams frozen for 10-30 s, its other requests answered
	faultTwoAtOnce    chaosFault = "two-at-once"   // a cut while etcd restarts, two replicas paused, or a kill during a handover
	faultLoadShift    chaosFault = "load-shift"    // 150 objects move to namespaces one replica runs; a kill or a cut as the keeper's moves are handed over
)

// chaosCleanFaults are one clean fault each; chaosGrayFaults are the
// faults production brings that are not: slow rather than dead, throttled,
// blind, two at once, or a fault striking the moves a shifted load made.
var (
	chaosCleanFaults = []chaosFault{faultCut, faultBlackhole, faultLatency, faultBandwidth, faultKill, faultPause,
		faultAPIServer, faultEtcd, faultLeaseDeleted, faultLeaseGarbage}
	chaosGrayFaults = []chaosFault{faultSlow, faultThrottled, faultExpired, faultStalledWatch, faultTwoAtOnce, faultLoadShift}
	chaosFaults     = append(slices.Clone(chaosCleanFaults), chaosGrayFaults...)
)

// chaosConvergeBound is how soon after a fault is healed the workload
// must have converged: a lost replica's pieces wait out its lease, then
// the new owner has the rest to catch up.
const chaosConvergeBound = membership.DefaultLeaseDuration + 30*time.Second

// chaosGrace is how long after SIGKILL or SIGSTOP a write the replica had
// already sent may still be answered by the apiserver: the replica can
// send nothing after it, and no other replica can take its pieces before
// its lease runs out.
const chaosGrace = 2 * time.Second

type chaosReplica struct {
	name       string
	proxy      *faultproxy.Proxy
	httpProxy  *faultproxy.HTTPProxy
	kubeconfig string
	proc       *localcluster.Process
}

// chaosNamespace is what the workload asked of one namespace.
type chaosNamespace struct {
	replicas int32
	jobs     int
	// shifted: the namespace holds the load a shift moves (shiftLoad).
	shifted bool
}

type chaosRun struct {
	t       *testing.T
	ctx     context.Context
	cluster *localcluster.Cluster
	client  kubernetes.Interface
	bin     string
	rng     *rand.Rand

	replicas []*chaosReplica
	// deaths and pauses, by process id: when a replica stopped being able
	// to act (the checker ends its runs there).
	deaths map[int]time.Time
	pauses map[int][][2]time.Time

	live    map[string]*chaosNamespace
	deleted []string
	used    []string
	nextNS  int
	// placementArgs: the replicas' placement flags (chaosPlacement).
	placementArgs []string
}

// weightedChaosArgs place a soak's fleet by weight (the default), with a
// hold short enough that the changing workload makes the keeper adopt
// tables while faults strike.
var weightedChaosArgs = []string{"--placement-weight-hold=10s"}

// countChaosArgs place a soak's fleet by count.
var countChaosArgs = []string{"--placement-by-weight=false"}

// chaosPlacement is a soak's placement: CHAOS_PLACEMENT (count or
// weight), else by the seed, so that CI's soaks alternate between the
// default placement by weight and placement by count and a seed replays
// either. make test's one round places by weight.
func chaosPlacement(seed int64, soak bool) ([]string, error) {
	switch p := os.Getenv("CHAOS_PLACEMENT"); p {
	case "count":
		return countChaosArgs, nil
	case "weight":
		return weightedChaosArgs, nil
	case "":
		if soak && seed%2 != 0 {
			return countChaosArgs, nil
		}
		return weightedChaosArgs, nil
	default:
		return nil, fmt.Errorf("CHAOS_PLACEMENT=%q: want count or weight", p)
	}
}

func TestChaos(t *testing.T) {
	// No lane: its convergence bound holds on a quiet machine, so it runs
	// alone, before the tests that run in lanes.
	var duration time.Duration // one round
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("CHAOS_DURATION=%q: %v", s, err)
		}
		duration = d
	}
	seed := int64(1)
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	schedule := os.Getenv("CHAOS_SCHEDULE")
	kinds := chaosFaults
	switch schedule {
	case "":
		if duration == 0 {
			// make test's one round: the clean kinds, about 2.5 minutes.
			// The gray kinds hold longer (a slow replica up to a minute)
			// and run in every soak: CI's gray one, make chaos.
			kinds = chaosCleanFaults
		}
	case "restarts":
		// A replica's network fault, then at once an etcd or
		// kube-apiserver restart: the soak's one failure came in such a
		// pair (a 14 s blackhole, then etcd restarted for 8 s).
		kinds = []chaosFault{faultBlackhole, faultCut, faultEtcd, faultAPIServer}
	case "gray":
		kinds = chaosGrayFaults
	default:
		t.Fatalf("CHAOS_SCHEDULE=%q: want empty, restarts or gray", schedule)
	}
	// CHAOS_KINDS: only these kinds (comma-separated).
	if s := os.Getenv("CHAOS_KINDS"); s != "" {
		kinds = nil
		for _, k := range strings.Split(s, ",") {
			if !slices.Contains(chaosFaults, chaosFault(k)) {
				t.Fatalf("CHAOS_KINDS: no fault kind %q; the kinds: %v", k, chaosFaults)
			}
			kinds = append(kinds, chaosFault(k))
		}
	}
	placementArgs, err := chaosPlacement(seed, duration > 0)
	if err != nil {
		t.Fatal(err)
	}
	byWeight := !slices.Equal(placementArgs, countChaosArgs)
	placement := "by count (" + strings.Join(placementArgs, " ") + ")"
	if byWeight {
		placement = "by weight (" + strings.Join(placementArgs, " ") + ")"
	}
	t.Logf("chaos: seed %d, %v of faults%s, placement %s (replay: CHAOS_SEED=%d CHAOS_DURATION=%v CHAOS_SCHEDULE=%s CHAOS_KINDS=%s)", seed, duration, map[bool]string{true: ", " + schedule}[schedule != ""],
		placement, seed, duration, schedule, os.Getenv("CHAOS_KINDS"))

	ctx, cancel := context.WithTimeout(context.Background(), duration+15*time.Minute)
	defer cancel()
	cluster, client, bin := podCluster(ctx, t)
	// CHAOS_FLEET_BIN: another build of the replicas (a planted fault's).
	if other := os.Getenv("CHAOS_FLEET_BIN"); other != "" {
		bin = other
		t.Logf("chaos: replicas run %s", bin)
	}
	keepLogsOnFailure(t, cluster)
	c := &chaosRun{t: t, ctx: ctx, cluster: cluster, client: client, bin: bin, rng: rand.New(rand.NewSource(seed)),
		deaths: map[int]time.Time{}, pauses: map[int][][2]time.Time{}, live: map[string]*chaosNamespace{}, placementArgs: placementArgs}

	c.grantLeastPrivilege()
	for _, name := range []string{"fcm-a", "fcm-b", "fcm-c"} {
		r := c.newChaosReplica(name)
		c.replicas = append(c.replicas, r)
		c.startReplica(r)
	}
	for i := 0; i < 5; i++ {
		c.createNamespace()
	}
	if took, ok := c.waitConverged(3 * time.Minute); !ok {
		t.Fatalf("the starting workload did not converge within %v", took)
	}

	counts := map[chaosFault]int{}
	var converge []time.Duration
	var windows []faultWindow
	late := 0
	deadline := time.Now().Add(duration)
	var bag []chaosFault
	// Until the time is up and every kind has run once.
	for n := 1; time.Now().Before(deadline) || len(counts) < len(kinds); n++ {
		// Every kind once per round, in a seeded order.
		if len(bag) == 0 {
			bag = append(bag, kinds...)
			c.rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		fault := bag[0]
		bag = bag[1:]
		for i := 1 + c.rng.Intn(3); i > 0; i-- {
			c.changeWorkload()
		}
		victim := c.replicas[c.rng.Intn(len(c.replicas))]
		from := time.Now()
		what := c.inject(fault, victim)
		counts[fault]++
		if schedule == "restarts" && (fault == faultBlackhole || fault == faultCut) {
			restart := []chaosFault{faultEtcd, faultAPIServer}[c.rng.Intn(2)]
			what += "; then " + c.inject(restart, victim)
			counts[restart]++
		}
		took, ok := c.waitConverged(chaosConvergeBound + 2*time.Minute)
		t.Logf("chaos: fault %d: %s; workload converged %v after it was healed", n, what, took.Round(time.Millisecond))
		converge = append(converge, took)
		windows = append(windows, faultWindow{kind: fault, what: fmt.Sprintf("fault %d, %s", n, what), from: from, to: time.Now()})
		if !ok {
			t.Fatalf("fault %d (%s): the workload did not converge within %v of the heal", n, what, took)
		}
		if took > chaosConvergeBound {
			late++
			t.Errorf("fault %d (%s): the workload converged %v after the heal, past %v", n, what, took, chaosConvergeBound)
		}
		time.Sleep(time.Duration(1+c.rng.Intn(3)) * time.Second)
	}

	// Every replica still runs (a crash would hide behind the restarts).
	for _, r := range c.replicas {
		if exited, err := r.proc.Exited(); exited {
			t.Errorf("%s exited: %v\n%s", r.name, err, r.proc.LogTail(30))
		}
	}
	runs := c.pieceRuns()
	replicas := map[string]bool{}
	for _, r := range c.replicas {
		replicas[r.name] = true
	}
	violations, judged := ownershipViolations(t, cluster.AuditLog, runs, replicas, c.used, shard.DefaultRingConfig)
	for i, v := range violations {
		if i == 20 {
			t.Errorf("... and %d more", len(violations)-20)
			break
		}
		t.Errorf("ownership checker: %v", v)
	}
	past := writesPastAuthority(t, cluster.AuditLog, runs)
	if len(past) > 0 {
		late := make([]time.Duration, len(past))
		for i, p := range past {
			late[i] = p.late
		}
		sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
		t.Logf("chaos: %d controller writes received after their writer's authority over their piece ended (its deadline or logged stop): median %v, latest %v after it (a violation past %v)",
			len(late), percentile(late, 0.5).Round(time.Microsecond), late[len(late)-1].Round(time.Microsecond), chaosGrace)
	} else {
		t.Logf("chaos: no controller write was received after its writer's authority over its piece ended")
	}
	figures := figuresByKind(windows, past, unservedGaps(runs, windows[0].from, time.Now()))
	for _, f := range kinds {
		t.Logf("chaos: %s: %v", f, figures[f])
	}
	if judged.inNamespaces == 0 || judged.singleton == 0 {
		t.Fatalf("the audit log holds %d partition controller writes into the workload's namespaces and %d singleton writes: the checker looked at nothing", judged.inNamespaces, judged.singleton)
	}
	nruns := 0
	for _, rs := range runs {
		nruns += len(rs)
	}

	total := 0
	var ran []string
	for _, f := range kinds {
		total += counts[f]
		ran = append(ran, fmt.Sprintf("%s %d", f, counts[f]))
		if counts[f] == 0 {
			t.Errorf("chaos: no %s fault ran", f)
		}
	}
	sort.Slice(converge, func(i, j int) bool { return converge[i] < converge[j] })
	t.Logf("chaos: seed %d: %d faults (%s); converged after each: median %v, p90 %v, longest %v (bound %v, %d late)",
		seed, total, strings.Join(ran, ", "), percentile(converge, 0.5).Round(time.Millisecond),
		percentile(converge, 0.9).Round(time.Millisecond), converge[len(converge)-1].Round(time.Millisecond), chaosConvergeBound, late)
	if byWeight {
		tables, byHold := c.tablesAdopted()
		t.Logf("chaos: the keepers adopted %d weight tables: %d by the hold, %d dealing new namespaces", tables, byHold, tables-byHold)
		// One round (make test) may end before the load turns uneven.
		if tables == 0 && duration > 0 {
			t.Errorf("chaos: placed by weight, but no weight table was adopted: the soak did not move a partition by weight")
		}
	}
	t.Logf("chaos: every write of every fleet client judged: %d partition controller writes (%d into the workload's %d namespaces) and %d singleton controller writes against %d runs of %d pieces, and %d of the replicas' own (Leases, ServiceAccounts): %d violations; %d namespaces live and converged, %d deleted and gone",
		judged.partition, judged.inNamespaces, len(c.used), judged.singleton, nruns, len(runs), judged.own, len(violations), len(c.live), len(c.deleted))
}

// keepLogsOnFailure copies, if the test fails, every fleet replica's log,
// kube-apiserver's and the audit log to a folder that outlives the test
// (unless FCM_E2E_KEEP_DIR keeps the cluster's files anyway), and says
// where: a violation is judged from them.
func keepLogsOnFailure(t *testing.T, cluster *localcluster.Cluster) {
	t.Cleanup(func() {
		if !t.Failed() || os.Getenv("FCM_E2E_KEEP_DIR") != "" {
			return
		}
		if dir := copyLogs(t, cluster); dir != "" {
			t.Logf("the replicas' logs, kube-apiserver's and the audit log are kept in %s", dir)
		}
	})
}

// keepLogsIfParentFails copies cluster's logs now, before the cluster is
// stopped and its folder removed, and keeps them if parent fails: a test
// that compares the end states of several clusters fails after each is
// gone.
func keepLogsIfParentFails(parent, t *testing.T, cluster *localcluster.Cluster) {
	if os.Getenv("FCM_E2E_KEEP_DIR") != "" {
		return
	}
	dir := copyLogs(t, cluster)
	if dir == "" {
		return
	}
	parent.Cleanup(func() {
		if !parent.Failed() {
			_ = os.RemoveAll(dir)
			return
		}
		parent.Logf("%s: the replicas' logs, kube-apiserver's and the audit log are kept in %s", t.Name(), dir)
	})
}

// copyLogs copies every process's log and the audit log of cluster into a
// new folder that outlives the test, and returns it ("" if it could not
// be made).
func copyLogs(t *testing.T, cluster *localcluster.Cluster) string {
	dir, err := os.MkdirTemp("", "fcm-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Logf("keeping the logs: %v", err)
		return ""
	}
	paths := []string{cluster.AuditLog}
	for _, p := range cluster.Processes() {
		paths = append(paths, p.LogPath)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o644)
		}
		if err != nil {
			t.Logf("keeping %s: %v", path, err)
		}
	}
	return dir
}

func (c *chaosRun) startReplica(r *chaosReplica) {
	c.t.Helper()
	args := append([]string{"-v=2"}, c.placementArgs...)
	// CHAOS_FLEET_ARGS: comma-separated extra flags for every replica
	// (make chaos FLEET_ARGS=...), to soak other settings, such as
	// shorter member lease timings.
	if extra := os.Getenv("CHAOS_FLEET_ARGS"); extra != "" {
		args = append(args, strings.Split(extra, ",")...)
	}
	p, _, err := c.cluster.StartFleetReplicaAs(c.ctx, c.bin, r.name, r.kubeconfig, args...)
	if err != nil {
		c.t.Fatalf("starting %s: %v", r.name, err)
	}
	r.proc = p
}

// inject applies fault to victim, holds it, heals it, and says what it did.
func (c *chaosRun) inject(fault chaosFault, victim *chaosReplica) string {
	c.t.Helper()
	hold := func(min, max int) time.Duration {
		d := time.Duration(min+c.rng.Intn(max-min+1)) * time.Second
		time.Sleep(d)
		return d
	}
	switch fault {
	case faultCut, faultBlackhole:
		mode := faultproxy.Cut
		if fault == faultBlackhole {
			mode = faultproxy.Blackhole
		}
		victim.proxy.Set(mode)
		d := hold(3, 20)
		victim.proxy.Set(faultproxy.Pass)
		return fmt.Sprintf("%s %s for %v", victim.name, fault, d)
	case faultLatency:
		latency := time.Duration(150+c.rng.Intn(250)) * time.Millisecond
		victim.proxy.SetLatency(latency, latency/2)
		d := hold(8, 20)
		victim.proxy.SetLatency(0, 0)
		return fmt.Sprintf("%s latency %v (jitter %v) for %v", victim.name, latency, latency/2, d)
	case faultBandwidth:
		rate := (16 + c.rng.Intn(49)) << 10
		victim.proxy.SetBandwidth(rate)
		d := hold(8, 20)
		victim.proxy.SetBandwidth(0)
		return fmt.Sprintf("%s bandwidth %d KiB/s for %v", victim.name, rate>>10, d)
	case faultKill:
		pid := victim.proc.Pid()
		c.kill(victim)
		d := hold(1, 6)
		c.startReplica(victim)
		return fmt.Sprintf("%s killed (pid %d), started again %v later", victim.name, pid, d)
	case faultPause:
		pid := victim.proc.Pid()
		from := time.Now()
		if err := victim.proc.Signal(syscall.SIGSTOP); err != nil {
			c.t.Fatal(err)
		}
		d := hold(5, 20)
		if err := victim.proc.Signal(syscall.SIGCONT); err != nil {
			c.t.Fatal(err)
		}
		c.pauses[pid] = append(c.pauses[pid], [2]time.Time{from, time.Now()})
		return fmt.Sprintf("%s paused for %v", victim.name, d)
	case faultAPIServer:
		start := time.Now()
		if err := c.cluster.RestartAPIServer(c.ctx); err != nil {
			c.t.Fatalf("restarting kube-apiserver: %v", err)
		}
		return fmt.Sprintf("kube-apiserver restarted (%v)", time.Since(start).Round(time.Millisecond))
	case faultEtcd:
		start := time.Now()
		if err := c.cluster.RestartEtcd(c.ctx); err != nil {
			c.t.Fatalf("restarting etcd: %v", err)
		}
		return fmt.Sprintf("etcd restarted (%v)", time.Since(start).Round(time.Millisecond))
	case faultLeaseDeleted:
		c.retry("deleting "+victim.name+"'s Lease", func() error {
			err := c.client.CoordinationV1().Leases("kube-system").Delete(c.ctx, victim.name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		return fmt.Sprintf("%s's Lease deleted", victim.name)
	case faultLeaseGarbage:
		c.retry("overwriting "+victim.name+"'s Lease", func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				l, err := c.client.CoordinationV1().Leases("kube-system").Get(c.ctx, victim.name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				if err != nil {
					return err
				}
				if l.Annotations == nil {
					l.Annotations = map[string]string{}
				}
				l.Annotations["fleet-controller-manager.io/state"] = fmt.Sprintf("{garbage %d", c.rng.Int())
				_, err = c.client.CoordinationV1().Leases("kube-system").Update(c.ctx, l, metav1.UpdateOptions{})
				return err
			})
		})
		return fmt.Sprintf("%s's Lease state overwritten with garbage", victim.name)
	case faultSlow:
		return c.slowReplica(victim)
	case faultThrottled:
		return c.throttle(victim)
	case faultExpired:
		return c.expireWatches()
	case faultStalledWatch:
		return c.stallWatches(victim)
	case faultTwoAtOnce:
		return c.twoAtOnce(victim)
	case faultLoadShift:
		return c.shiftLoad(victim)
	}
	c.t.Fatalf("unknown fault %q", fault)
	return ""
}

// changeWorkload makes one seeded change: scale a Deployment, add a Job,
// delete a namespace or create one.
func (c *chaosRun) changeWorkload() {
	c.t.Helper()
	names := c.liveNames()
	switch roll := c.rng.Intn(100); {
	case len(names) < 3 || roll < 12:
		c.createNamespace()
	case roll < 24 && len(names) > 3:
		ns := names[c.rng.Intn(len(names))]
		c.retry("deleting namespace "+ns, func() error {
			err := c.client.CoreV1().Namespaces().Delete(c.ctx, ns, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		delete(c.live, ns)
		c.deleted = append(c.deleted, ns)
	case roll < 60:
		ns := names[c.rng.Intn(len(names))]
		replicas := int32(1 + c.rng.Intn(6))
		c.retry("scaling "+ns+"/web", func() error {
			_, err := c.client.AppsV1().Deployments(ns).Patch(c.ctx, "web", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)), metav1.PatchOptions{})
			return err
		})
		c.live[ns].replicas = replicas
	default:
		ns := names[c.rng.Intn(len(names))]
		job := c.live[ns].jobs
		c.retry("creating a Job in "+ns, func() error {
			err := createJob(c.ctx, c.client, ns, job)
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		c.live[ns].jobs++
	}
}

func (c *chaosRun) liveNames() []string {
	var names []string
	for ns := range c.live {
		names = append(names, ns)
	}
	sort.Strings(names)
	return names
}

// createNamespace creates the next namespace with a Deployment "web" of 2
// replicas, a Service for it and one Job.
func (c *chaosRun) createNamespace() {
	c.t.Helper()
	ns := fmt.Sprintf("chaos-%d", c.nextNS)
	c.nextNS++
	c.retry("creating namespace "+ns, func() error {
		_, err := c.client.CoreV1().Namespaces().Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	c.retry("creating "+ns+"/web", func() error {
		_, err := c.client.AppsV1().Deployments(ns).Create(c.ctx, newDeployment(ns, "web", 2), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	c.retry("creating the Service "+ns+"/web", func() error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
		}
		_, err := c.client.CoreV1().Services(ns).Create(c.ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	c.retry("creating a Job in "+ns, func() error {
		err := createJob(c.ctx, c.client, ns, 0)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	c.live[ns] = &chaosNamespace{replicas: 2, jobs: 1}
	c.used = append(c.used, ns)
}

// retry repeats a workload call through an apiserver that may be
// restarting.
func (c *chaosRun) retry(what string, call func() error) {
	c.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(c.ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = call()
		return last == nil, nil
	})
	if err != nil {
		c.t.Fatalf("%s: %v (last error: %v)", what, err, last)
	}
}

// waitConverged waits until every live namespace's Deployment is available
// at its replicas, its Jobs succeeded and its Service's EndpointSlices
// list exactly its ready pods, and every deleted namespace is gone. It
// returns how long that took and whether it happened within timeout.
func (c *chaosRun) waitConverged(timeout time.Duration) (time.Duration, bool) {
	c.t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(c.ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = c.converged()
		return last == "", nil
	})
	if err != nil {
		c.t.Logf("not converged after %v: %s", time.Since(start).Round(time.Millisecond), last)
		return time.Since(start), false
	}
	return time.Since(start), true
}

// converged says what is not yet as asked ("" when everything is).
func (c *chaosRun) converged() string {
	for _, ns := range c.liveNames() {
		if missing := movingWorkloadMissing(c.ctx, c.client, ns, c.live[ns].replicas, c.live[ns].jobs); missing != "" {
			return missing
		}
	}
	for _, ns := range c.deleted {
		_, err := c.client.CoreV1().Namespaces().Get(c.ctx, ns, metav1.GetOptions{})
		if err == nil {
			return fmt.Sprintf("namespace %s not yet gone", ns)
		}
		if !apierrors.IsNotFound(err) {
			return err.Error()
		}
	}
	return ""
}

// klogPieceByPid is klogPiece with the writing process's id, which tells a
// replica's incarnations apart in its log (they append to one file), and
// the authority's deadline a stop for lost authority logs.
var klogPieceByPid = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+(\d+) \S+\] "(Starting piece|Stopping piece|Piece stopped)" piece="([^"]+)"(?: authority=(true|false))?(?: authorityUntil="([^"]+)")?`)

// tablesAdopted counts the weight tables the replicas' logs say they
// adopted as keepers, all and those by the hold (the others dealt new
// namespaces).
func (c *chaosRun) tablesAdopted() (all, byHold int) {
	c.t.Helper()
	for _, r := range c.replicas {
		data, err := os.ReadFile(r.proc.LogPath)
		if err != nil {
			c.t.Fatal(err)
		}
		all += strings.Count(string(data), adoptingTableLog)
		byHold += strings.Count(string(data), holdTableLog)
	}
	return all, byHold
}

// pieceRuns reads every replica's runs of every piece from its log
// (parsePieceRuns).
func (c *chaosRun) pieceRuns() map[string][]pieceRun {
	c.t.Helper()
	runs := map[string][]pieceRun{}
	for _, r := range c.replicas {
		data, err := os.ReadFile(r.proc.LogPath)
		if err != nil {
			c.t.Fatal(err)
		}
		parsed, err := parsePieceRuns(r.name, strings.Split(string(data), "\n"), time.Now().Year(), c.deaths, c.pauses)
		if err != nil {
			c.t.Fatalf("%s: %v", r.proc.LogPath, err)
		}
		for piece, rs := range parsed {
			runs[piece] = append(runs[piece], rs...)
		}
	}
	return runs
}

// parsePieceRuns reads a replica's runs of every piece from its log lines:
// when the apiserver may receive its writes.
//
//   - A run starts at "Starting piece".
//   - It ends at "Piece stopped": the piece's write gate is closed and the
//     writes it let through are answered by then.
//   - A run stopped because the replica's authority ran out ("Stopping
//     piece" authority=false) ends at that line. Its writes may reach the
//     apiserver until that line or the authority's deadline it logs,
//     whichever is first, plus chaosGrace (writesUntil): the replica
//     sends no write after either (its transport refuses writes past the
//     deadline, and the stop revokes the piece's gate before it is
//     logged), but a write sent just before can reach the apiserver's
//     handler after them (the chaos soak saw two 0.1 ms apart, sent as
//     etcd came back from a restart, received after the logged stop),
//     and the replica abandons the writes unanswered at the deadline
//     rather than wait for their answers, so "Piece stopped" does not
//     bound them. Another replica may start the piece once this one's
//     lease has run out or it has said it stopped: a write that is
//     answered after that is judged by judgeWrite's second rule.
//   - A run its process never logged the end of ends where the process
//     was killed, plus chaosGrace.
//   - A run through a pause of the process that outlasted the renew
//     deadline ends where the pause began, plus chaosGrace (the replica
//     cannot act after it until its pieces are started again).
func parsePieceRuns(replica string, lines []string, year int, deaths map[int]time.Time, pauses map[int][][2]time.Time) (map[string][]pieceRun, error) {
	runs := map[string][]pieceRun{}
	forever := time.Unix(0, math.MaxInt64)
	type open struct {
		pid    int
		start  time.Time
		lostAt time.Time // authority ran out; zero if not
		// until: the authority's deadline logged with the loss.
		until time.Time
	}
	opened := map[string]open{}
	end := func(piece string, o open, at time.Time, why string) {
		// cut bounds t by the process's death or long pause.
		cut := func(t time.Time, why string) (time.Time, string) {
			if died, ok := deaths[o.pid]; ok && died.Add(chaosGrace).Before(t) {
				t, why = died.Add(chaosGrace), "killed + "+chaosGrace.String()
			}
			for _, p := range pauses[o.pid] {
				if p[1].Sub(p[0]) >= membership.DefaultRenewDeadline && p[0].After(o.start) && p[0].Before(t) {
					t, why = p[0].Add(chaosGrace), "paused + "+chaosGrace.String()
					break
				}
			}
			return t, why
		}
		run := pieceRun{replica: replica, start: o.start}
		if !o.lostAt.IsZero() && o.lostAt.Before(at) {
			at, why = o.lostAt, "authority lost"
		}
		run.end, why = cut(at, why)
		if !o.lostAt.IsZero() {
			run.authorityEnded = o.lostAt
			if !o.until.IsZero() && o.until.Before(run.authorityEnded) {
				run.authorityEnded = o.until
			}
			var whyWrites string
			run.writesUntil, whyWrites = cut(run.authorityEnded.Add(chaosGrace), "")
			why += fmt.Sprintf(" at %s, deadline %s", o.lostAt.Format("15:04:05.000000"), o.until.Local().Format("15:04:05.000000"))
			if whyWrites != "" {
				why += "; writes: " + whyWrites
			}
		}
		run.ended = fmt.Sprintf("pid %d, %s", o.pid, why)
		runs[piece] = append(runs[piece], run)
	}
	for _, line := range lines {
		m := klogPieceByPid.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[1]), time.Local)
		if err != nil {
			return nil, err
		}
		pid, _ := strconv.Atoi(m[2])
		piece := m[4]
		if m[3] == "Stopping piece" {
			if o, ok := opened[piece]; ok && o.pid == pid && m[5] == "false" {
				o.lostAt = at
				if m[6] != "" {
					if o.until, err = time.Parse(time.RFC3339Nano, m[6]); err != nil {
						return nil, fmt.Errorf("authorityUntil of %q: %w", line, err)
					}
				}
				opened[piece] = o
			}
			continue
		}
		if o, ok := opened[piece]; ok && (m[3] == "Starting piece" || o.pid != pid) {
			// The incarnation that started it died without stopping it.
			end(piece, o, at, "its process ended")
			delete(opened, piece)
		}
		if m[3] == "Starting piece" {
			opened[piece] = open{pid: pid, start: at}
		} else if o, ok := opened[piece]; ok {
			end(piece, o, at, "logged stop")
			delete(opened, piece)
		}
	}
	for piece, o := range opened {
		end(piece, o, forever, "still running")
	}
	return runs, nil
}
