//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/faultproxy"
)

// A load that shifts: the soak's fault for placement by weight. A load as
// large as the rest of the workload leaves the namespaces holding it for
// namespaces one replica runs, the keeper moves partitions to follow it, and the fault strikes the fleet while those moves are handed
// over: a weight-driven move must keep never-two-owners through a kill or
// a cut as any other handover does.

// shiftObjects is how many objects a shift carries: ServiceAccounts, which
// the owned cache holds (so they weigh) and which cost kwok and the
// scheduler nothing. Each chaos namespace holds about 15 objects; this is
// about as much as the rest of the workload together.
const shiftObjects = 150

// shiftNamespaces is how many namespaces a shift spreads its objects over:
// each of them stays lighter than a replica's mean share, so that the
// keeper can move them (a partition heavier than the mean stays where it
// is, and so would the soak's moves).
const shiftNamespaces = 3

// shiftLabel marks the objects a shift created, so the next shift deletes
// them in one request.
const shiftLabel = "chaos-shift"

// shiftAdoptionWait bounds the wait for the keeper's table after a shift:
// the weights reach the Leases within a measurement (10 s) and a renewal,
// then the load must stay uneven for the soak's hold (10 s).
const shiftAdoptionWait = 45 * time.Second

// shiftLoad moves the shifted load from the namespaces holding it to
// namespaces one replica runs (so that it is the busiest by far), waits
// for the keeper to adopt a table for it (placed by weight), and then, as
// that table's moves are handed over, kills or cuts victim, or lets the
// moves finish alone.
func (c *chaosRun) shiftLoad(victim *chaosReplica) string {
	c.t.Helper()
	offsets := c.logOffsets()
	var from []string
	for _, ns := range c.liveNames() {
		if !c.live[ns].shifted {
			continue
		}
		from = append(from, ns)
		c.retry("deleting the shifted load of "+ns, func() error {
			err := c.client.CoreV1().ServiceAccounts(ns).DeleteCollection(c.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: shiftLabel})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		c.live[ns].shifted = false
	}
	owner, to := c.shiftTargets()
	for _, ns := range to {
		for i := range shiftObjects / len(to) {
			name := fmt.Sprintf("shift-%d", i)
			c.retry("creating "+ns+"/"+name, func() error {
				_, err := c.client.CoreV1().ServiceAccounts(ns).Create(c.ctx, &corev1.ServiceAccount{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{shiftLabel: "true"}},
				}, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					return nil
				}
				return err
			})
		}
		c.live[ns].shifted = true
	}
	if len(from) == 0 {
		from = []string{"nowhere"}
	}
	what := fmt.Sprintf("%d ServiceAccounts moved from %s to %s (run by %s)", shiftObjects/len(to)*len(to), strings.Join(from, ","), strings.Join(to, ","), owner)
	if c.placementArgs == nil {
		return what + " (placed by count: no table follows)"
	}
	start := time.Now()
	keeper := ""
	for time.Since(start) < shiftAdoptionWait && keeper == "" {
		time.Sleep(250 * time.Millisecond)
		keeper = c.adoptedSince(offsets)
	}
	if keeper == "" {
		return what + fmt.Sprintf("; no table adopted within %v", shiftAdoptionWait)
	}
	what += fmt.Sprintf("; %s adopted a table %v later", keeper, time.Since(start).Round(100*time.Millisecond))
	switch c.rng.Intn(3) {
	case 0:
		pid := victim.proc.Pid()
		c.kill(victim)
		time.Sleep(time.Duration(1+c.rng.Intn(3)) * time.Second)
		c.startReplica(victim)
		return what + fmt.Sprintf(", and as its moves were handed over %s was killed (pid %d) and started again", victim.name, pid)
	case 1:
		victim.proxy.Set(faultproxy.Cut)
		d := time.Duration(3+c.rng.Intn(8)) * time.Second
		time.Sleep(d)
		victim.proxy.Set(faultproxy.Pass)
		return what + fmt.Sprintf(", and as its moves were handed over %s was cut off for %v", victim.name, d)
	default:
		return what + ", and its moves were handed over undisturbed"
	}
}

// shiftTargets picks up to shiftNamespaces live namespaces that one
// replica runs, the one running the most of them by the Leases, and
// names it.
func (c *chaosRun) shiftTargets() (string, []string) {
	c.t.Helper()
	var st shard.FleetStatus
	c.retry("reading the fleet's Leases", func() error {
		var err error
		st, err = shard.ReadFleet(c.ctx, membership.NewLeaseStore(c.client), "kube-system", "fleet-controller-manager", shard.DefaultRingConfig.Partitions)
		return err
	})
	owner := st.PartitionOwners()
	byOwner := map[string][]string{}
	busiest := ""
	for _, ns := range c.liveNames() {
		o := owner[shard.DefaultRingConfig.NamespacePartition(ns)]
		if o == "" {
			continue
		}
		byOwner[o] = append(byOwner[o], ns)
		if len(byOwner[o]) > len(byOwner[busiest]) || (len(byOwner[o]) == len(byOwner[busiest]) && o < busiest) {
			busiest = o
		}
	}
	if busiest == "" {
		// Nobody lists a live namespace's partition (a handover in
		// flight): any live namespace carries the load.
		names := c.liveNames()
		return "nobody yet", []string{names[c.rng.Intn(len(names))]}
	}
	to := byOwner[busiest]
	c.rng.Shuffle(len(to), func(i, j int) { to[i], to[j] = to[j], to[i] })
	return busiest, to[:min(len(to), shiftNamespaces)]
}

// logOffsets is each replica's log size now: adoptedSince reads only what
// follows.
func (c *chaosRun) logOffsets() map[string]int64 {
	c.t.Helper()
	out := map[string]int64{}
	for _, r := range c.replicas {
		info, err := os.Stat(r.proc.LogPath)
		if err != nil {
			c.t.Fatal(err)
		}
		out[r.name] = info.Size()
	}
	return out
}

// adoptedSince names the replica whose log says, after its offset, that
// it adopted a weight table by the hold as keeper ("" if none has).
func (c *chaosRun) adoptedSince(offsets map[string]int64) string {
	c.t.Helper()
	for _, r := range c.replicas {
		f, err := os.Open(r.proc.LogPath)
		if err != nil {
			c.t.Fatal(err)
		}
		_, err = f.Seek(offsets[r.name], io.SeekStart)
		var data []byte
		if err == nil {
			data, err = io.ReadAll(f)
		}
		f.Close()
		if err != nil {
			c.t.Fatal(err)
		}
		if strings.Contains(string(data), holdTableLog) {
			return r.name
		}
	}
	return ""
}

// adoptingTableLog is what a keeper logs when it adopts a weight table;
// holdTableLog, when it adopts one because the load stayed uneven for
// the hold (not to deal new namespaces).
const (
	adoptingTableLog = "Adopting a new partition weight table"
	holdTableLog     = adoptingTableLog + ": the busiest member stayed above the bound"
)
