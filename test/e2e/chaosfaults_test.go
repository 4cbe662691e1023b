//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/faultproxy"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// The faults production brings that are not one clean fault: a replica
// slow rather than dead, an apiserver that throttles, every watch expired
// at once, a watch stalled on a live connection, and two faults at once.

// chaosReplicaUser is the user of replica's own client (its Lease, the
// owned cache's and the informers' requests): one per replica, so that a
// FlowSchema can single one out. The controllers act as their
// ServiceAccounts (--use-service-account-credentials), shared by every
// replica.
func chaosReplicaUser(replica string) string { return "fleet-controller-manager:" + replica }

// controllerServiceAccounts is the group of the controllers'
// ServiceAccounts.
const controllerServiceAccounts = "system:serviceaccounts:kube-system"

// chaosReplicasGroup is the group of every replica's own user. The
// replicas are given deploy/base's least-privilege RBAC through it, not
// system:masters: API Priority and Fairness exempts system:masters, and
// the soak throttles the replicas.
const chaosReplicasGroup = "fleet-controller-manager:replicas"

// grantLeastPrivilege applies deploy/base and adds chaosReplicasGroup to
// every binding it made for the fleet's ServiceAccount.
func (c *chaosRun) grantLeastPrivilege() {
	c.t.Helper()
	kubectlAsAdmin(c.ctx, c.t, c.cluster)("apply", "-k", repoPath(c.t, "deploy/base"))
	group := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: chaosReplicasGroup}
	forFleet := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == "fleet-controller-manager" && s.Namespace == "kube-system" {
				return true
			}
		}
		return false
	}
	granted := 0
	crbs, err := c.client.RbacV1().ClusterRoleBindings().List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, b := range crbs.Items {
		if forFleet(b.Subjects) {
			b.Subjects = append(b.Subjects, group)
			if _, err := c.client.RbacV1().ClusterRoleBindings().Update(c.ctx, &b, metav1.UpdateOptions{}); err != nil {
				c.t.Fatal(err)
			}
			granted++
		}
	}
	rbs, err := c.client.RbacV1().RoleBindings("").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, b := range rbs.Items {
		if forFleet(b.Subjects) {
			b.Subjects = append(b.Subjects, group)
			if _, err := c.client.RbacV1().RoleBindings(b.Namespace).Update(c.ctx, &b, metav1.UpdateOptions{}); err != nil {
				c.t.Fatal(err)
			}
			granted++
		}
	}
	if granted < 2 {
		c.t.Fatalf("deploy/base bound the fleet's ServiceAccount in %d bindings: want its ClusterRole and Lease bindings at least", granted)
	}
}

// newChaosReplica makes replica's user and puts two proxies between it and
// kube-apiserver: an HTTPProxy next to kube-apiserver (it terminates TLS
// with the replica's credentials) and a TCP fault proxy in front of it,
// which the replica's kubeconfig points at.
func (c *chaosRun) newChaosReplica(replica string) *chaosReplica {
	c.t.Helper()
	kubeconfig, err := c.cluster.Kubeconfig("fleet-"+replica, chaosReplicaUser(replica), chaosReplicasGroup)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		c.t.Fatal(err)
	}
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	servingCert, servingKey, err := c.cluster.ServingCert("httpproxy-" + replica)
	if err != nil {
		c.t.Fatal(err)
	}
	httpProxy, err := faultproxy.StartHTTPProxy(c.cluster.URL, faultproxy.ProxyTLS{
		CAFile: c.cluster.CAFile(), ClientCertFile: auth.ClientCertificate, ClientKey: auth.ClientKey,
		ServingCertFile: servingCert, ServingKey: servingKey,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(httpProxy.Close)
	proxy, proxied := proxiedKubeconfig(c.t, "https://"+httpProxy.Addr(), kubeconfig, c.t.TempDir())
	return &chaosReplica{name: replica, proxy: proxy, httpProxy: httpProxy, kubeconfig: proxied}
}

// slowReplica caps victim's CPU at a few hundredths of a core, the gray
// failure a pause does not model: its controllers' work trickles. Its
// renewals keep up at 0.01 cores and more; CHAOS_SLOW_CORES under that
// starves them too.
func (c *chaosRun) slowReplica(victim *chaosReplica) string {
	cores := float64(1+c.rng.Intn(4)) / 100
	hold := time.Duration(20+c.rng.Intn(41)) * time.Second
	// CHAOS_SLOW_CORES: every slow replica gets this budget instead (under
	// 0.01, over a 1 s period), to starve its renewals too.
	if s := os.Getenv("CHAOS_SLOW_CORES"); s != "" {
		var err error
		if cores, err = strconv.ParseFloat(s, 64); err != nil {
			c.t.Fatalf("CHAOS_SLOW_CORES=%q: %v", s, err)
		}
	}
	release, err := localcluster.CapCPU(victim.name, victim.proc.Pid(), cores)
	if err != nil {
		c.t.Fatal(err)
	}
	from := time.Now()
	c.holdChanging(hold)
	throttled, err := release()
	if err != nil {
		c.t.Fatal(err)
	}
	return fmt.Sprintf("%s's CPU capped at %g cores for %v (throttled in %d of %d periods, %v in all; %s)", victim.name, cores, hold,
		throttled.Throttled, throttled.Periods, throttled.Time.Round(time.Millisecond), c.renewals(victim, from, time.Now()))
}

// throttle squeezes the fleet's requests for 5-20 s, one of two ways:
//   - API Priority and Fairness: a FlowSchema ahead of every other sends
//     every request of the fleet (every replica's user, the controllers'
//     ServiceAccounts) to a priority level of no seats that rejects rather
//     than queues. APF still runs one request at a time when none is
//     running, so the requests that meet another are answered 429.
//   - every request of victim answered 429 by its HTTP proxy, as APF
//     answers, its Lease renewals among them: it must give up its
//     authority in time, and the others must not take over before its
//     lease has run out.
func (c *chaosRun) throttle(victim *chaosReplica) string {
	hold := time.Duration(5+c.rng.Intn(16)) * time.Second
	from := time.Now()
	if c.rng.Intn(2) == 0 {
		before := victim.httpProxy.Rejected()
		victim.httpProxy.Throttle(true)
		c.holdChanging(hold)
		victim.httpProxy.Throttle(false)
		return fmt.Sprintf("every request of %s answered 429 for %v (%d requests; %s)", victim.name, hold, victim.httpProxy.Rejected()-before, c.renewals(victim, from, time.Now()))
	}
	c.retry("throttling the fleet", c.throttleFleet)
	c.holdChanging(hold)
	c.retry("ending the throttle", func() error {
		err := c.client.FlowcontrolV1().FlowSchemas().Delete(c.ctx, chaosThrottle, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	rejected := countAudit(c.t, c.cluster.AuditLog, from, time.Now(), func(e auditEvent) bool {
		return e.ResponseStatus != nil && e.ResponseStatus.Code == 429
	})
	return fmt.Sprintf("API Priority and Fairness squeezed the fleet into one seat for %v (%d writes answered 429; %s)", hold, rejected, c.renewals(victim, from, time.Now()))
}

// holdChanging holds a fault for d, changing the workload once or twice
// on the way: a fault that slows or blinds a replica shows only when
// there is work to do.
func (c *chaosRun) holdChanging(d time.Duration) {
	end := time.Now().Add(d)
	for i := 1 + c.rng.Intn(2); i > 0; i-- {
		time.Sleep(time.Until(end) / time.Duration(i+1))
		c.changeWorkload()
	}
	time.Sleep(time.Until(end))
}

// chaosThrottle names the throttle's FlowSchema and priority level: it
// comes first among FlowSchemas of the lowest precedence after exempt's
// (it sorts before "probes", by name).
const chaosThrottle = "chaos-throttle"

// throttleFleet sends every request of the fleet (each replica's user,
// the controllers' ServiceAccounts) to a priority level of no seats.
func (c *chaosRun) throttleFleet() error {
	_, err := c.client.FlowcontrolV1().PriorityLevelConfigurations().Create(c.ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: chaosThrottle},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](0),
				LendablePercent:          ptr.To[int32](0),
				BorrowingLimitPercent:    ptr.To[int32](0),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	subjects := []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: controllerServiceAccounts}}}
	for _, r := range c.replicas {
		subjects = append(subjects, flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: chaosReplicaUser(r.name)}})
	}
	_, err = c.client.FlowcontrolV1().FlowSchemas().Create(c.ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: chaosThrottle},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: chaosThrottle},
			MatchingPrecedence:         2,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: subjects,
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"},
				}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// expireWatches compacts etcd at its head and restarts it: kube-apiserver's
// watch cache resumes its etcd watches from revisions that are gone, so
// every cache relists and ends its watchers, and every client's watch
// resumes into 410 Gone at once.
func (c *chaosRun) expireWatches() string {
	from := time.Now()
	before := c.apiserverCounter("apiserver_watch_cache_initializations_total")
	var rev int64
	c.retry("compacting etcd", func() (err error) {
		rev, err = c.cluster.CompactEtcd(c.ctx)
		return err
	})
	if err := c.cluster.RestartEtcd(c.ctx); err != nil {
		c.t.Fatalf("restarting etcd: %v", err)
	}
	// The watch caches find out as they reconnect.
	time.Sleep(3 * time.Second)
	relisted := c.apiserverCounter("apiserver_watch_cache_initializations_total") - before
	return fmt.Sprintf("etcd compacted at revision %d and restarted (%v); %g watch caches of kube-apiserver relisted", rev, time.Since(from).Round(time.Millisecond), relisted)
}

// stallWatches freezes victim's watch streams for 10-30 s while its other
// requests, its renewals among them, are answered: it acts on a view that
// has stopped moving.
func (c *chaosRun) stallWatches(victim *chaosReplica) string {
	hold := time.Duration(10+c.rng.Intn(21)) * time.Second
	from := time.Now()
	victim.httpProxy.StallWatches(true)
	c.holdChanging(hold)
	victim.httpProxy.StallWatches(false)
	return fmt.Sprintf("%s's watch streams stalled for %v (%s)", victim.name, hold, c.renewals(victim, from, time.Now()))
}

// twoAtOnce injects one of three pairs: victim's link cut while etcd
// restarts; two replicas paused together (the fleet left with one); a
// kill during a handover in flight (victim killed and started again, and
// as soon as it starts taking pieces over, it or a replica handing them
// over killed).
func (c *chaosRun) twoAtOnce(victim *chaosReplica) string {
	other := c.replicas[(c.index(victim)+1+c.rng.Intn(len(c.replicas)-1))%len(c.replicas)]
	switch c.rng.Intn(3) {
	case 0:
		mode := []faultproxy.Fault{faultproxy.Cut, faultproxy.Blackhole}[c.rng.Intn(2)]
		victim.proxy.Set(mode)
		time.Sleep(time.Duration(1+c.rng.Intn(3)) * time.Second)
		start := time.Now()
		if err := c.cluster.RestartEtcd(c.ctx); err != nil {
			c.t.Fatalf("restarting etcd: %v", err)
		}
		restarted := time.Since(start)
		time.Sleep(time.Duration(1+c.rng.Intn(5)) * time.Second)
		victim.proxy.Set(faultproxy.Pass)
		return fmt.Sprintf("%s %v while etcd restarted (%v)", victim.name, mode, restarted.Round(time.Millisecond))
	case 1:
		from := time.Now()
		pids := []int{victim.proc.Pid(), other.proc.Pid()}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				c.t.Fatal(err)
			}
		}
		hold := time.Duration(5+c.rng.Intn(16)) * time.Second
		time.Sleep(hold)
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				c.t.Fatal(err)
			}
			c.pauses[pid] = append(c.pauses[pid], [2]time.Time{from, time.Now()})
		}
		return fmt.Sprintf("%s and %s paused together for %v", victim.name, other.name, hold)
	default:
		c.kill(victim)
		time.Sleep(time.Duration(1+c.rng.Intn(3)) * time.Second)
		c.startReplica(victim)
		took := c.waitStarting(victim, time.Minute)
		second := victim
		if c.rng.Intn(2) == 0 {
			second = other
		}
		c.kill(second)
		time.Sleep(time.Duration(1+c.rng.Intn(6)) * time.Second)
		c.startReplica(second)
		return fmt.Sprintf("%s killed and started again; %v after, as it took its first piece over, %s killed, started again", victim.name, took.Round(time.Millisecond), second.name)
	}
}

func (c *chaosRun) index(r *chaosReplica) int {
	for i, x := range c.replicas {
		if x == r {
			return i
		}
	}
	c.t.Fatalf("no replica %s", r.name)
	return 0
}

// kill sends SIGKILL to r and waits for its end, recording when it died.
func (c *chaosRun) kill(r *chaosReplica) {
	c.t.Helper()
	pid := r.proc.Pid()
	c.deaths[pid] = time.Now()
	if err := r.proc.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	<-r.proc.Done()
}

// waitStarting waits until r's current process logs that it starts a
// piece, and says how long that took.
func (c *chaosRun) waitStarting(r *chaosReplica, timeout time.Duration) time.Duration {
	start := time.Now()
	marker := fmt.Sprintf(" %d ", r.proc.Pid())
	for time.Since(start) < timeout {
		data, err := os.ReadFile(r.proc.LogPath)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, marker) && strings.Contains(line, `"Starting piece"`) {
				return time.Since(start)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("%s started no piece within %v of starting", r.name, timeout)
	return 0
}

// renewals says how r renewed its Lease between from and to: how many
// renewals the apiserver accepted and the longest time between two (from
// and to count as renewals), which shows whether a fault reached them.
func (c *chaosRun) renewals(r *chaosReplica, from, to time.Time) string {
	c.t.Helper()
	var at []time.Time
	readAudit(c.t, c.cluster.AuditLog, func(e auditEvent) {
		if e.Stage != "ResponseComplete" || e.ObjectRef == nil || e.ObjectRef.Resource != "leases" || e.ObjectRef.Name != r.name ||
			(e.Verb != "update" && e.Verb != "patch") || e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 {
			return
		}
		if e.RequestReceivedTimestamp.After(from) && e.RequestReceivedTimestamp.Before(to) {
			at = append(at, e.RequestReceivedTimestamp)
		}
	})
	at = append(append([]time.Time{from}, at...), to)
	var longest time.Duration
	for i := 1; i < len(at); i++ {
		longest = max(longest, at[i].Sub(at[i-1]))
	}
	return fmt.Sprintf("%d renewals accepted, at most %v apart", len(at)-2, longest.Round(time.Millisecond))
}

// countAudit counts the audit log's answered requests received between
// from and to that match.
func countAudit(t *testing.T, auditLog string, from, to time.Time, match func(auditEvent) bool) int {
	t.Helper()
	n := 0
	readAudit(t, auditLog, func(e auditEvent) {
		if e.Stage == "ResponseComplete" && !e.RequestReceivedTimestamp.Before(from) && !e.RequestReceivedTimestamp.After(to) && match(e) {
			n++
		}
	})
	return n
}

// apiserverCounter sums the samples of counter family name on
// kube-apiserver's /metrics.
func (c *chaosRun) apiserverCounter(name string) float64 {
	c.t.Helper()
	client, err := c.cluster.AdminHTTPClient()
	if err != nil {
		c.t.Fatal(err)
	}
	var sum float64
	c.retry("reading kube-apiserver's "+name, func() error {
		resp, err := client.Get(c.cluster.URL + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			return err
		}
		sum = 0
		for _, m := range families[name].GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return nil
	})
	return sum
}
