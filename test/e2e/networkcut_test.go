//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/faultproxy"
)

// TestNetworkCutReplica cuts one replica of three off from kube-apiserver
// while it keeps running, by a blackhole (the link goes silent, nothing is
// refused; TestNetworkCutWithControllers also resets the connections). The cut replica
// must stop every piece it runs on its own clock, acting no later than its
// renew deadline after the cut; the others take its pieces once its Lease
// expires; when the link comes back it rejoins. No piece ever runs on two
// replicas at once (the pieces' own records).
func TestNetworkCutReplica(t *testing.T) {
	t.Parallel()
	for _, mode := range []faultproxy.Fault{faultproxy.Blackhole} {
		t.Run(mode.String(), func(t *testing.T) {
			inLane(t, laneHeavy)
			f := newFleet(t)
			all := names(3)
			cut := all[2]
			proxy := proxyFor(t, f, cut)
			for _, name := range all {
				f.start(name)
			}
			f.waitSettled(all, 2*time.Minute)
			var ran []string
			for piece, owners := range f.owners() {
				if len(owners) == 1 && owners[0] == cut {
					ran = append(ran, piece)
				}
			}
			if len(ran) == 0 {
				t.Fatalf("%s runs no piece before the cut", cut)
			}

			cutAt := time.Now().UnixNano()
			proxy.Set(mode)
			d := f.waitSettled(all[:2], 2*time.Minute)
			t.Logf("%s: the others run all pieces %v after the cut (lease duration %v)", mode, d.Round(time.Millisecond), membership.DefaultLeaseDuration)

			// The cut replica's own record: every piece it ran stopped,
			// and none acted past the renew deadline after the cut.
			deadline := cutAt + int64(membership.DefaultRenewDeadline)
			var latestStop, latestAct int64
			for _, iv := range f.intervals() {
				if iv.member != cut || iv.start > cutAt {
					continue
				}
				if iv.end == math.MaxInt64 || !iv.stopped {
					t.Errorf("%s still runs %s after it was cut off", cut, iv.piece)
					continue
				}
				if iv.end > deadline {
					t.Errorf("%s acted as owner of %s until %s, %v after the cut (renew deadline %v)", cut, iv.piece, ts(iv.end), time.Duration(iv.end-cutAt), membership.DefaultRenewDeadline)
				}
				latestAct = max(latestAct, iv.end)
			}
			for _, r := range f.records() {
				if r.Member == cut && r.Event == "stop" && r.Time > cutAt {
					latestStop = max(latestStop, r.Time)
				}
			}
			t.Logf("%s: the cut replica last acted %v after the cut and had stopped its %d pieces %v after it", mode,
				time.Duration(latestAct-cutAt).Round(time.Millisecond), len(ran), time.Duration(latestStop-cutAt).Round(time.Millisecond))

			healAt := time.Now()
			proxy.Set(faultproxy.Pass)
			d = f.waitSettled(all, 3*time.Minute)
			t.Logf("%s: fleet of 3 settled %v after the link came back (cut lasted %v)", mode, d.Round(time.Millisecond), healAt.Sub(time.Unix(0, cutAt)).Round(time.Second))
			f.alive()
			f.checkNoOverlap(1)
		})
	}
}

// proxyFor makes member reach the apiserver only through a fault proxy.
func proxyFor(t *testing.T, f *fleet, member string) *faultproxy.Proxy {
	t.Helper()
	proxy, path := proxiedKubeconfig(t, f.cluster.URL, f.kubeconfig, filepath.Join(f.dir, member))
	f.kubeconfigs[member] = path
	return proxy
}

// TestNetworkCutWithControllers cuts a replica that runs the real
// controllers off from kube-apiserver just after its partition was given
// work (writes in flight), keeps it cut past the lease duration, and
// brings the link back. Its own log must show the partition stopped within
// its renew deadline of the cut; the other replica takes the partition and
// serves the workload; the cut replica rejoins; and every write into the
// partition's namespace, from the audit log, falls within its writer's
// ownership: a write held in the network and delivered after the heal
// would not.
func TestNetworkCutWithControllers(t *testing.T) {
	t.Parallel()
	for _, mode := range []faultproxy.Fault{faultproxy.Cut, faultproxy.Blackhole} {
		t.Run(mode.String(), func(t *testing.T) {
			inLane(t, laneHeavy)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cluster, client, bin := podCluster(ctx, t)
			const stay, cut = "fcm-a", "fcm-b"
			ns, p := namespaceMovingTo(cut, []string{stay, cut})
			piece := string(shard.PartitionPiece(p))

			kubeconfig, err := cluster.Kubeconfig("fleet-controller-manager", "system:kube-controller-manager", "system:masters")
			if err != nil {
				t.Fatal(err)
			}
			proxy, proxied := proxiedKubeconfig(t, cluster.URL, kubeconfig, t.TempDir())
			stayProc, _, err := cluster.StartFleetReplica(ctx, bin, stay, "-v=2")
			if err != nil {
				t.Fatal(err)
			}
			cutProc, _, err := cluster.StartFleetReplicaAs(ctx, bin, cut, proxied, "-v=2")
			if err != nil {
				t.Fatal(err)
			}
			waitRunsPiece(ctx, t, client, cut, piece)
			createMovingWorkload(ctx, t, client, ns)

			// Work for the cut replica, then the cut while it writes:
			// 38 pod creations take the replicaset controller about two
			// seconds at its client limits, so some are in flight.
			scaleMoving(ctx, t, client, ns, 40)
			time.Sleep(500 * time.Millisecond)
			cutAt := time.Now()
			proxy.Set(mode)
			waitRunsPiece(ctx, t, client, stay, piece)
			t.Logf("%s: %s runs %s %v after the cut", mode, stay, piece, time.Since(cutAt).Round(time.Millisecond))
			scaleMoving(ctx, t, client, ns, 5)
			createMoveJob(ctx, t, client, ns, 1)
			waitMovingWorkload(ctx, t, client, ns, 5, 2, time.Minute)

			// The cut replica's own record of the run that the cut ended,
			// and the other's run that took over.
			var takeover time.Time
			for _, run := range ownership(t, stayProc.LogPath, piece) {
				if run[0].After(cutAt) {
					takeover = run[0]
					break
				}
			}
			runs := ownership(t, cutProc.LogPath, piece)
			for _, run := range runs {
				if run[0].After(cutAt) || run[1].Before(cutAt) {
					continue
				}
				if !run[1].Before(takeover) {
					t.Errorf("%s ran %s until %s, %s started it at %s", cut, piece, run[1].Format("15:04:05.000000"), stay, takeover.Format("15:04:05.000000"))
				}
				took := run[1].Sub(cutAt)
				t.Logf("%s: %s logged %s stopped %v after the cut", mode, cut, piece, took.Round(time.Millisecond))
				// "Piece stopped" is logged once the fence is closed and
				// the writes in flight are answered; a second of slack is
				// for the logging, not for acting.
				if took > membership.DefaultRenewDeadline+time.Second {
					t.Errorf("%s stopped %s %v after it was cut off, past its renew deadline (%v)", cut, piece, took, membership.DefaultRenewDeadline)
				}
			}

			if log, err := os.ReadFile(cutProc.LogPath); err == nil {
				t.Logf("%s: %s abandoned %d writes in flight when its authority ran out", mode, cut,
					strings.Count(string(log), "Write still in flight when this replica's authority ran out"))
			}
			healAt := time.Now()
			proxy.Set(faultproxy.Pass)
			// Its Lease still names the piece from before the cut: wait
			// for its own log to start the piece again.
			poll(ctx, t, cut+" to start "+piece+" again", 2*time.Minute, func() (bool, string) {
				runs := ownership(t, cutProc.LogPath, piece)
				return len(runs) > 0 && runs[len(runs)-1][0].After(healAt), fmt.Sprintf("%d runs", len(runs))
			})
			t.Logf("%s: %s runs %s again %v after the link came back", mode, cut, piece, time.Since(healAt).Round(time.Millisecond))
			scaleMoving(ctx, t, client, ns, 3)
			createMoveJob(ctx, t, client, ns, 2)
			waitMovingWorkload(ctx, t, client, ns, 3, 3, time.Minute)
			logs := map[string]string{stay: stayProc.LogPath, cut: cutProc.LogPath}
			checkWritesWithinOwnership(t, cluster.AuditLog, ns, piece, logs)
			for _, v := range checkOwnership(t, cluster.AuditLog, logs, []string{ns}) {
				t.Errorf("ownership checker: %v", v)
			}
		})
	}
}

// proxiedKubeconfig starts a fault proxy in front of the apiserver at
// apiserverURL and writes a copy of kubeconfig, into dir, that reaches the
// apiserver only through it.
func proxiedKubeconfig(t *testing.T, apiserverURL, kubeconfig, dir string) (*faultproxy.Proxy, string) {
	t.Helper()
	server, err := url.Parse(apiserverURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(server.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + proxy.Addr()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "proxied-"+filepath.Base(kubeconfig))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return proxy, path
}
