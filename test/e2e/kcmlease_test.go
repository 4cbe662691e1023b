//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// side says who made an audited write: "kcm", "fleet", or "" (anyone else,
// or a Lease: both sides write Leases to elect and to stay members).
func side(e auditEvent) string {
	if e.ObjectRef == nil || e.ObjectRef.Resource == "leases" || e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 {
		return ""
	}
	switch {
	case strings.HasPrefix(e.UserAgent, "kube-controller-manager/"):
		return "kcm"
	case strings.HasPrefix(e.UserAgent, "fleet-controller-manager/"):
		return "fleet"
	}
	return ""
}

type sideWrite struct {
	at   time.Time
	side string
	what string
}

func sideWrites(t *testing.T, auditLog string) []sideWrite {
	var out []sideWrite
	readAudit(t, auditLog, func(e auditEvent) {
		if s := side(e); s != "" {
			out = append(out, sideWrite{at: e.StageTimestamp, side: s, what: fmt.Sprintf("%s %s %s/%s by %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.UserAgent)})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// countWrites counts the writes of s in [from, to).
func countWrites(writes []sideWrite, s string, from, to time.Time) (int, string) {
	n, example := 0, ""
	for _, w := range writes {
		if w.side == s && !w.at.Before(from) && w.at.Before(to) {
			if n == 0 {
				example = w.what + " at " + w.at.Format("15:04:05.000")
			}
			n++
		}
	}
	return n, example
}

// kcmLeaseHolder is the holder of kube-controller-manager's leader Lease.
func kcmLeaseHolder(ctx context.Context, client kubernetes.Interface) string {
	l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func heldByFleet(holder string) bool {
	return strings.HasPrefix(holder, membership.FleetHolderPrefix("kube-system", "fleet-controller-manager"))
}

func heldByKCM(holder string) bool {
	return holder != "" && !heldByFleet(holder) && !strings.HasPrefix(holder, "<")
}

// scaleProbe scales the probe Deployment and waits until its pods exist:
// whoever runs the controllers made them.
func scaleProbe(ctx context.Context, t *testing.T, client kubernetes.Interface, replicas int32, timeout time.Duration) {
	t.Helper()
	// Read afresh if a status write came in between.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := client.AppsV1().Deployments("probe").Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(replicas)
		_, err = client.AppsV1().Deployments("probe").Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("scaling the probe Deployment to %d: %v", replicas, err)
	}
	poll(ctx, t, fmt.Sprintf("%d probe pods", replicas), timeout, func() (bool, string) {
		pods, err := client.CoreV1().Pods("probe").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		live := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live++
			}
		}
		return live == int(replicas), fmt.Sprintf("%d pods", live)
	})
}

// TestKubeControllerManagerBesideTheFleet runs upstream kube-controller-
// manager and a fleet of three on one apiserver, both with default flags,
// through every handover between them: a fleet deployed beside a leading
// KCM waits; KCM stopped, the fleet takes over; a KCM started beside the
// fleet stays a standby; the fleet stopped gracefully releases the Lease to
// it; KCM killed, the fleet takes over; a replica killed, KCM stays a
// standby; the rest of the fleet paused past the lease duration, KCM takes
// over and the resumed replicas write nothing. The audit log shows the two
// sides' writes never interleave.
func TestKubeControllerManagerBesideTheFleet(t *testing.T) {
	inLongLane(t, laneHeavy)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cluster := startCluster(ctx, t, localcluster.Options{KubeControllerManager: true})
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := cluster.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir(t), "fleet-controller-manager")
	kcm := cluster.KubeControllerManager()
	poll(ctx, t, "kube-controller-manager to lead", time.Minute, func() (bool, string) {
		h := kcmLeaseHolder(ctx, client)
		return heldByKCM(h), h
	})
	createNamespace(ctx, t, client, "probe")
	createDeployment(ctx, t, client, "probe", "probe", 1)
	scaleProbe(ctx, t, client, 1, time.Minute)

	replicas := []string{"fcm-0", "fcm-1", "fcm-2"}
	procs := map[string]*localcluster.Process{}
	ports := map[string]int{}
	startFleet := func() {
		for _, r := range replicas {
			if procs[r], ports[r], err = cluster.StartFleetReplica(ctx, bin, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	readyz := func(r string) (int, string) {
		resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", ports[r]))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	takeover := func(what string, members []string, since time.Time) time.Duration {
		t.Helper()
		waitFleetRunning(ctx, t, client, members)
		took := time.Since(since)
		t.Logf("%s: the fleet runs every piece %v later", what, took.Round(100*time.Millisecond))
		return took
	}

	// 1. KCM leads; a fleet of three deployed beside it waits and says why.
	fleetStarted := time.Now()
	startFleet()
	holder := kcmLeaseHolder(ctx, client)
	poll(ctx, t, "every replica to say it waits for kube-controller-manager", time.Minute, func() (bool, string) {
		for _, r := range replicas {
			code, body := readyz(r)
			if code != 503 || !strings.Contains(body, "waiting for kube-controller-manager "+holder+" to release its leader lease") {
				return false, fmt.Sprintf("%s /readyz: %d %s", r, code, body)
			}
		}
		return true, ""
	})
	resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d/debug/fleet", ports[replicas[0]]))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "waiting for kube-controller-manager "+holder+" to release its leader lease") {
		t.Errorf("/debug/fleet does not say the fleet waits for %s", holder)
	}
	out, err := exec.CommandContext(ctx, bin, "status", "--kubeconfig", cluster.AdminKubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "waiting for kube-controller-manager "+holder) {
		t.Errorf("status does not say the fleet waits for %s (%v):\n%s", holder, err, out)
	}
	// Longer than any lease duration: a fleet that took over would have.
	time.Sleep(20 * time.Second)
	scaleProbe(ctx, t, client, 2, time.Minute)
	if h := kcmLeaseHolder(ctx, client); h != holder {
		t.Fatalf("kube-controller-manager's Lease moved from %s to %s while it led", holder, h)
	}

	// KCM stopped (its static pod removed): the fleet takes over.
	kcmStopped := time.Now()
	if err := kcm.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	kcmToFleet := takeover("kube-controller-manager stopped", replicas, kcmStopped)
	scaleProbe(ctx, t, client, 3, time.Minute)

	// 2. A KCM started beside the running fleet stays a standby.
	kcmStarted := time.Now()
	if err := kcm.Restart(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(25 * time.Second)
	scaleProbe(ctx, t, client, 4, time.Minute)
	if h := kcmLeaseHolder(ctx, client); !heldByFleet(h) {
		t.Fatalf("a kube-controller-manager started beside the fleet took its Lease: %s", h)
	}
	if !strings.Contains(kcm.LogTail(400), "Attempting to acquire leader lease") {
		t.Errorf("kube-controller-manager's log does not show it standing by:\n%s", kcm.LogTail(20))
	}

	// The fleet stopped gracefully: the last replica releases the Lease.
	fleetStopped := time.Now()
	var wg sync.WaitGroup
	for _, r := range replicas {
		wg.Go(func() {
			if err := procs[r].Stop(60 * time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	var fleetToKCM time.Duration
	poll(ctx, t, "kube-controller-manager to lead after the fleet stopped", time.Minute, func() (bool, string) {
		h := kcmLeaseHolder(ctx, client)
		fleetToKCM = time.Since(fleetStopped)
		return heldByKCM(h), h
	})
	t.Logf("fleet stopped gracefully: kube-controller-manager leads %v later", fleetToKCM.Round(100*time.Millisecond))
	wg.Wait()
	fleetExited := time.Now()
	scaleProbe(ctx, t, client, 5, time.Minute)

	// KCM killed while a fleet waits: the fleet takes over.
	startFleet()
	fleetRestarted := time.Now()
	time.Sleep(5 * time.Second)
	kcmKilled := time.Now()
	if err := kcm.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-kcm.Done()
	kcmKilledToFleet := takeover("kube-controller-manager killed", replicas, kcmKilled)
	scaleProbe(ctx, t, client, 6, time.Minute)

	// 3. With a KCM standing by: the replica that renewed KCM's Lease last
	// killed (the others renew it too: KCM stays a standby) ...
	kcmStandby := time.Now()
	if err := kcm.Restart(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	holder = kcmLeaseHolder(ctx, client)
	var victim string
	for _, r := range replicas {
		if strings.Contains(holder, "/"+r+"/") {
			victim = r
		}
	}
	if victim == "" {
		t.Fatalf("no replica named in the Lease holder %q", holder)
	}
	if err := procs[victim].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[victim].Done()
	var rest []string
	for _, r := range replicas {
		if r != victim {
			rest = append(rest, r)
		}
	}
	time.Sleep(25 * time.Second)
	if h := kcmLeaseHolder(ctx, client); !heldByFleet(h) {
		t.Fatalf("kube-controller-manager took its Lease after one of three replicas (%s) was killed: %s", victim, h)
	}
	scaleProbe(ctx, t, client, 7, 2*time.Minute)

	// ... then the other two paused past the lease duration: KCM takes
	// over; resumed, they write nothing.
	paused := time.Now()
	for _, r := range rest {
		if err := procs[r].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "kube-controller-manager to lead while the fleet is paused", time.Minute, func() (bool, string) {
		h := kcmLeaseHolder(ctx, client)
		return heldByKCM(h), h
	})
	pausedToKCM := time.Since(paused)
	t.Logf("fleet paused: kube-controller-manager leads %v later", pausedToKCM.Round(100*time.Millisecond))
	scaleProbe(ctx, t, client, 8, time.Minute)
	for _, r := range rest {
		if err := procs[r].Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "the resumed replicas to say they wait for kube-controller-manager", time.Minute, func() (bool, string) {
		for _, r := range rest {
			code, body := readyz(r)
			if code != 503 || !strings.Contains(body, "waiting for kube-controller-manager") {
				return false, fmt.Sprintf("%s /readyz: %d %s", r, code, body)
			}
		}
		return true, ""
	})
	scaleProbe(ctx, t, client, 2, time.Minute)
	time.Sleep(5 * time.Second)
	end := time.Now()

	// The audit log: who wrote when.
	writes := sideWrites(t, cluster.AuditLog)
	for _, c := range []struct {
		what     string
		side     string
		from, to time.Time
		want     bool // side must have written
	}{
		{"fleet beside a leading KCM", "fleet", fleetStarted, kcmStopped, false},
		{"KCM leading before the fleet came", "kcm", time.Time{}, kcmStopped, true},
		{"KCM standing by beside the fleet", "kcm", kcmStarted, fleetStopped, false},
		{"fleet running beside a standby KCM", "fleet", kcmStarted, fleetStopped, true},
		{"fleet after it stopped", "fleet", fleetExited, kcmKilled, false},
		{"fleet restarted beside a leading KCM", "fleet", fleetRestarted, kcmKilled, false},
		{"KCM after it was killed", "kcm", kcmKilled, kcmStandby, false},
		{"KCM standing by while a replica was killed", "kcm", kcmStandby, paused, false},
		{"KCM taking over from the paused fleet", "kcm", paused, end, true},
	} {
		n, example := countWrites(writes, c.side, c.from, c.to)
		if c.want && n == 0 {
			t.Errorf("%s: no write by %s", c.what, c.side)
		}
		if !c.want && n > 0 {
			t.Errorf("%s: %d writes by %s, first: %s", c.what, n, c.side, example)
		}
	}
	// After KCM's first write following the pause, the fleet wrote nothing.
	var kcmFirst time.Time
	for _, w := range writes {
		if w.side == "kcm" && w.at.After(paused) {
			kcmFirst = w.at
			break
		}
	}
	var lastFleet time.Time
	for _, w := range writes {
		if w.side == "fleet" && w.at.Before(end) {
			lastFleet = w.at
		}
	}
	if !lastFleet.Before(kcmFirst) {
		t.Errorf("the fleet wrote at %s, after kube-controller-manager's first write at %s", lastFleet.Format("15:04:05.000"), kcmFirst.Format("15:04:05.000"))
	}
	// The sides' writes never interleave: one switch per handover.
	switches := 0
	for i := 1; i < len(writes); i++ {
		if writes[i].side != writes[i-1].side {
			switches++
			t.Logf("writes by %s from %s (%s)", writes[i].side, writes[i].at.Format("15:04:05.000"), writes[i].what)
		}
	}
	if switches > 4 {
		t.Errorf("the writes of kube-controller-manager and the fleet switched %d times; 4 handovers were made", switches)
	}
	t.Logf("takeover times: KCM stopped -> fleet %v; fleet stopped -> KCM %v; KCM killed -> fleet %v; fleet paused -> KCM %v",
		kcmToFleet.Round(100*time.Millisecond), fleetToKCM.Round(100*time.Millisecond), kcmKilledToFleet.Round(100*time.Millisecond), pausedToKCM.Round(100*time.Millisecond))
}
