//go:build e2e

package e2e

import (
	"math"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/faultproxy"
)

// TestNetworkCutReplica cuts one replica of three off from kube-apiserver
// while it keeps running, once by resetting its connections and once by a
// blackhole (the link goes silent, nothing is refused). The cut replica
// must stop every piece it runs on its own clock, acting no later than its
// renew deadline after the cut; the others take its pieces once its Lease
// expires; when the link comes back it rejoins. No piece ever runs on two
// replicas at once (the pieces' own records).
func TestNetworkCutReplica(t *testing.T) {
	for _, mode := range []faultproxy.Mode{faultproxy.Cut, faultproxy.Blackhole} {
		t.Run(mode.String(), func(t *testing.T) {
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
			f.checkNoOverlap()
		})
	}
}

// proxyFor starts a fault proxy in front of the cluster's apiserver and
// makes member reach the apiserver only through it.
func proxyFor(t *testing.T, f *fleet, member string) *faultproxy.Proxy {
	t.Helper()
	server, err := url.Parse(f.cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(server.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg, err := clientcmd.LoadFromFile(f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + proxy.Addr()
	}
	path := filepath.Join(f.dir, member+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	f.kubeconfigs[member] = path
	return proxy
}
