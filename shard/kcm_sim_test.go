package shard

import (
	"sort"
	"strings"
	"testing"
	"time"
)

// The simulation with a kube-controller-manager beside the fleet: KCM's
// leader Lease as the apiserver keeps it (conditional writes), a KCM that
// elects itself as client-go does (kube-controller-manager's defaults:
// 15 s lease, 10 s renew deadline, 2 s retry with jitter, requests that time
// out after half the renew deadline), and fleet members that renew the
// Lease as membership's leaderLease does. The check adds: KCM never leads
// while a fleet member may act on a piece.

// simKCMTakeoverWait is how long a fleet member waits, from when it saw a
// KCM's record change last, before it takes the Lease (as
// membership.LeaderLeaseConfig.takeoverWait). The lease duration alone, as
// KCM standbys wait, lets a KCM whose last renewal was answered late act
// beside the fleet; a wait of 10 s fails here within a few hundred runs.
const simKCMTakeoverWait = simRenewDeadline + simRetry + simRenewDeadline/2

// simKCMTimeout is client-go's request timeout for KCM's lock client.
const simKCMTimeout = simRenewDeadline / 2

// simKCMLease is KCM's leader Lease in the modelled apiserver.
type simKCMLease struct {
	exists bool
	rv     int64
	// record counts changes of the leader election record (what client-go
	// compares); a change of the writers list alone leaves it.
	record int64
	// holder is "" (released), "kcm", or "fleet/<member>/<incarnation>".
	holder  string
	writers map[string]bool
}

func (l simKCMLease) fleetHeld() bool { return strings.HasPrefix(l.holder, "fleet/") }

// simLeaderLease is a member's side of KCM's Lease.
type simLeaderLease struct {
	fence      int64 // may act while now < fence
	inflight   bool
	left       bool
	obsRV      int64
	obsAt      int64
	unknownAt  map[string]int64
	generation int // bumped per process start, to drop stale answers
	// read: the writers on the version the last successful renewal,
	// sent at readSent, replaced (membership's writersRead).
	read     map[string]bool
	readSent int64
	readOK   bool
	// heldSince: when the renewal that began the current stretch of
	// authority was sent.
	heldSince int64
}

// simKCM is a kube-controller-manager process electing itself.
type simKCM struct {
	alive    bool
	leader   bool
	inflight bool
	obsRV    int64
	obsAt    int64
	lastOK   int64 // answer time of its last successful renewal
	gen      int
}

// acting: KCM leads and has not yet given up. client-go's leader stops
// when a renewal window (retry period, then polling for the renew
// deadline) passes without success, and KCM then exits.
func (k *simKCM) acting(now int64) bool {
	return k != nil && k.alive && k.leader && now < k.lastOK+simRetry+simRenewDeadline
}

// kcmWrite applies a write; record says whether it changes the leader
// election record (every renewal does; taking a member off the writers
// list does not).
func (s *sim) kcmWrite(apply func(), record bool) {
	s.kcmLease.rv++
	apply()
	if record {
		s.kcmLease.record++
	}
	s.logf("kcm lease rv %d holder %q writers %v", s.kcmLease.rv, s.kcmLease.holder, sortedKeys(s.kcmLease.writers))
	// Watches of the members see it after a delay.
	snapshot := s.kcmLease
	for _, n := range s.nodes {
		n := n
		gen := n.leader.generation
		s.at(s.watchDelay(), n, func() {
			if n.leader.generation == gen {
				n.watchLeaderLease(snapshot)
			}
		})
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// conditional runs a write at a random point of its latency, if the Lease
// is still at rv then; answer (an event of node, nil for KCM) is told
// whether it applied and was answered in time.
func (s *sim) conditional(node *simNode, rv int64, exists, record bool, timeout int64, write func(), answer func(ok bool)) {
	lat := s.latency()
	up := s.reaches(node) && (node == nil || s.now >= s.fleetDeniedUntil)
	applied := false
	s.at(lat*int64(s.rng.Intn(100))/100, nil, func() {
		if !up || !s.apiUp() || s.kcmLease.exists != exists || (exists && s.kcmLease.rv != rv) {
			return
		}
		applied = true
		s.kcmWrite(write, record)
	})
	respond := min(lat, timeout)
	s.at(respond, node, func() { answer(applied && lat <= timeout) })
}

// read answers with the Lease as it was at a random point of the latency.
func (s *sim) read(node *simNode, timeout int64, answer func(l simKCMLease, ok bool)) {
	lat := s.latency()
	var snap simKCMLease
	ok := s.reaches(node)
	s.at(lat*int64(s.rng.Intn(100))/100, nil, func() {
		ok = ok && s.apiUp()
		snap = s.kcmLease
	})
	s.at(min(lat, timeout), node, func() { answer(snap, ok && lat <= timeout) })
}

// reaches: node (nil: the KCM) can talk to the apiserver now.
func (s *sim) reaches(node *simNode) bool {
	if node != nil {
		return node.reaches()
	}
	return s.apiUp() && s.now >= s.kcmCutUntil
}

func (s *sim) startKCM(delay int64) {
	if s.kcm == nil {
		s.kcm = &simKCM{}
	}
	k := s.kcm
	k.gen++
	gen := k.gen
	s.at(delay, nil, func() {
		if k.gen != gen {
			return
		}
		s.logf("kcm: started")
		*k = simKCM{alive: true, gen: gen}
		s.kcmTick(gen)
	})
}

func (s *sim) kcmTick(gen int) {
	k := s.kcm
	if k.gen != gen || !k.alive {
		return
	}
	if k.leader && !k.acting(s.now) {
		s.logf("kcm: leader election lost; exiting")
		k.alive = false
		s.startKCM(1000 + s.rng.Int63n(5000)) // the kubelet restarts it
		return
	}
	if !k.inflight {
		k.inflight = true
		s.read(nil, simKCMTimeout, func(l simKCMLease, ok bool) {
			if k.gen != gen || !k.alive {
				return
			}
			if !ok {
				k.inflight = false
				return
			}
			if !l.exists {
				s.conditional(nil, 0, false, true, simKCMTimeout, func() {
					s.kcmLease = simKCMLease{exists: true, rv: s.kcmLease.rv, record: s.kcmLease.record, holder: "kcm"}
				}, func(ok bool) { s.kcmAnswered(gen, ok) })
				return
			}
			if l.record != k.obsRV {
				k.obsRV, k.obsAt = l.record, s.now
			}
			if l.holder != "" && l.holder != "kcm" && s.now < k.obsAt+simLease {
				k.inflight = false
				return
			}
			s.conditional(nil, l.rv, true, true, simKCMTimeout, func() {
				s.kcmLease.holder = "kcm"
			}, func(ok bool) { s.kcmAnswered(gen, ok) })
		})
	}
	next := int64(simRetry)
	if !k.leader {
		next += s.rng.Int63n(simRetry * 12 / 10) // client-go's jitter
	}
	s.at(next, nil, func() { s.kcmTick(gen) })
}

func (s *sim) kcmAnswered(gen int, ok bool) {
	k := s.kcm
	if k.gen != gen || !k.alive {
		return
	}
	k.inflight = false
	if !ok {
		return
	}
	if !k.leader {
		s.logf("kcm: became leader")
	}
	k.leader, k.lastOK = true, s.now
}

func (s *sim) disruptKCM(live []*simNode) {
	k := s.kcm
	switch r := s.rng.Float64(); {
	case r < 0.15:
		d := 2000 + s.rng.Int63n(30000)
		s.logf("kcm: cut off from the apiserver for %d ms", d)
		s.kcmCutUntil = s.now + d
	case r < 0.3:
		// Say an RBAC change: the fleet may read KCM's Lease, not write it,
		// while its own Leases renew.
		d := 2000 + s.rng.Int63n(30000)
		s.logf("fleet writes to kcm lease refused for %d ms", d)
		s.fleetDeniedUntil = s.now + d
	case r < 0.5 && k.alive:
		s.logf("kcm: killed")
		k.alive = false
		s.startKCM(2000 + s.rng.Int63n(30000))
	case r < 0.7:
		// Every member leaves at once (a fleet stopped, or scaled to 0):
		// the last one may release the Lease to the KCM.
		for _, n := range live {
			s.logf("%s: leaving with the whole fleet", n.name)
			n.leaving = true
			n.step()
		}
	default:
		if len(live) < 8 {
			s.logf("join")
			s.newNode(s.nextName())
		}
	}
}

func (n *simNode) writer() string { return n.name + "/" + n.incarnation }

func (n *simNode) startLeaderLease() {
	if n.s.kcm == nil {
		return
	}
	n.leader = simLeaderLease{generation: n.leader.generation + 1, unknownAt: map[string]int64{}}
	gen := n.leader.generation
	var tick func()
	tick = func() {
		if n.leader.generation != gen || n.leader.left {
			return
		}
		n.renewLeaderLease()
		n.s.at(simRetry, n, tick)
	}
	n.s.at(0, n, tick)
}

func (n *simNode) watchLeaderLease(l simKCMLease) {
	if (!l.exists || !l.fleetHeld()) && n.s.now < n.leader.fence {
		n.s.logf("%s: kcm lease seen lost (holder %q)", n.name, l.holder)
		n.leader.fence = n.s.now
		n.step()
	}
}

// writerStatus as membership.Member.writerStatus, from this node's
// observations.
func (n *simNode) writerStatus(w string) writerState {
	name, inc, _ := strings.Cut(w, "/")
	if name == n.name {
		if inc == n.incarnation {
			return writerLive
		}
		return writerStopped
	}
	o := n.obs[name]
	switch {
	case o == nil || !o.good || o.state.Incarnation != inc:
		// Never read (an unread state version, or only a deletion
		// seen): unknown, as in the runtime.
		return writerUnknown
	case o.expired || o.state.Leaving:
		return writerStopped
	case o.deleted && n.s.now-o.lastChange > simLease:
		return writerStopped
	}
	return writerLive
}

type writerState int

const (
	writerUnknown writerState = iota
	writerLive
	writerStopped
)

func (n *simNode) renewLeaderLease() { n.renewLeaderLeaseOnce(true) }

// renewLeaderLeaseOnce reads and writes KCM's Lease once; a write that
// failed is tried again at once when retry is set, as the runtime reads
// the Lease again after a conflict (leaderLease.tryAcquireOrRenew): with
// one attempt per retry period, several members renewing the same Lease
// lost their authority to each other's writes.
func (n *simNode) renewLeaderLeaseOnce(retry bool) {
	if n.leader.inflight {
		return
	}
	n.leader.inflight = true
	gen := n.leader.generation
	n.s.read(n, simRenewDeadline, func(l simKCMLease, ok bool) {
		if n.leader.generation != gen || !n.alive {
			return
		}
		if !ok || n.leader.left {
			n.leader.inflight = false
			return
		}
		if l.exists && l.record != n.leader.obsRV {
			n.leader.obsRV, n.leader.obsAt = l.record, n.s.now
		}
		takeover := !l.fleetHeld()
		if l.exists && l.holder != "" && takeover && n.s.now < n.leader.obsAt+simKCMTakeoverWait {
			n.leader.inflight = false
			return
		}
		writers := map[string]bool{n.writer(): true}
		if !takeover {
			for w := range l.writers {
				switch n.writerStatus(w) {
				case writerLive:
					delete(n.leader.unknownAt, w)
					writers[w] = true
				case writerUnknown:
					first, seen := n.leader.unknownAt[w]
					if !seen {
						n.leader.unknownAt[w], first = n.s.now, n.s.now
					}
					if n.s.now-first <= simLease {
						writers[w] = true
					}
				}
			}
		}
		sent := n.s.now
		holder := "fleet/" + n.writer()
		n.s.conditional(n, l.rv, l.exists, true, simRenewDeadline, func() {
			n.s.kcmLease.exists, n.s.kcmLease.holder, n.s.kcmLease.writers = true, holder, writers
		}, func(ok bool) {
			if n.leader.generation != gen || !n.alive {
				return
			}
			n.leader.inflight = false
			if !ok && retry && !n.leader.left && n.reaches() {
				n.renewLeaderLeaseOnce(false)
				return
			}
			if ok && !n.leader.left {
				if l.exists {
					read := l.writers
					if takeover {
						// As membership's leaderLease.renewFrom.
						read = nil
					}
					n.leader.read, n.leader.readSent, n.leader.readOK = read, sent, true
				}
				if n.s.now >= n.leader.fence {
					// Authority back: a join begins (Member.Joining).
					n.leader.heldSince = sent
					n.s.at(simLease, n, n.step)
				}
				n.leader.fence = max(n.leader.fence, sent+simRenewDeadline)
				n.s.at(simRenewDeadline, n, n.step)
			}
			n.step()
		})
	})
}

// leaveLeaderLease releases KCM's Lease if every other writer listed has
// certainly stopped, else takes this member off the list (as
// membership's leaderLease.leave, in one conditional write).
func (n *simNode) leaveLeaderLease() {
	if n.s.kcm == nil {
		return
	}
	n.leader.left, n.leader.fence = true, 0
	l := n.s.kcmLease
	if !l.exists || !l.fleetHeld() {
		return
	}
	release := true
	for w := range l.writers {
		if w != n.writer() && n.writerStatus(w) != writerStopped {
			release = false
		}
	}
	me := n.writer()
	n.s.conditional(nil, l.rv, true, release, simRenewDeadline, func() {
		if release {
			n.s.kcmLease.holder, n.s.kcmLease.writers = "", nil
			return
		}
		writers := map[string]bool{}
		for w := range n.s.kcmLease.writers {
			if w != me {
				writers[w] = true
			}
		}
		n.s.kcmLease.writers = writers
	}, func(bool) {})
}

// TestProtocolSimulationWithKubeControllerManager runs the simulation with
// a KCM beside the fleet that is killed and restarted, and fleets that stop
// whole and start again.
func TestProtocolSimulationWithKubeControllerManager(t *testing.T) {
	seeds := []int64{}
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		base := time.Now().UnixNano()
		for i := range *simRuns {
			seeds = append(seeds, base+int64(i))
		}
	}
	var worst time.Duration
	joinedEarly := 0
	for _, seed := range seeds {
		out, err := runSimulation(t, seed, true)
		if err != nil {
			t.Fatalf("seed %d (replay: go test ./shard -run TestProtocolSimulationWithKubeControllerManager -sim.seed=%d): %v", seed, seed, err)
		}
		worst = max(worst, out.settle)
		joinedEarly += out.joinedEarly
	}
	// The runs must exercise the early end of a join, or they say nothing
	// of it.
	if len(seeds) >= 10 && joinedEarly == 0 {
		t.Errorf("no join ended early in %d simulations", len(seeds))
	}
	t.Logf("%d simulations with a kube-controller-manager (seeds %d..%d), never two owners and never the fleet beside a leading KCM; %d joins ended early; slowest settle: %v", len(seeds), seeds[0], seeds[len(seeds)-1], joinedEarly, worst)
}

// joinStart is when the current join began (membership.Member.Joining):
// the joining write's answer, or a later renewal of KCM's Lease that
// brought authority back; -1 before the joining write.
func (n *simNode) joinStart() int64 {
	if n.joinAt < 0 {
		return -1
	}
	if n.s.kcm != nil && n.leader.heldSince > n.joinAt {
		return n.leader.heldSince
	}
	return n.joinAt
}

// wantList is membership.Member.listLoop: the Leases as the apiserver
// has them at some point of the request's latency, observed. Without a KCM's Lease there is nothing to end a
// join early with, as in the runtime.
func (n *simNode) wantList() {
	if n.s.kcm == nil || n.listing {
		return
	}
	n.listing = true
	inc := n.incarnation
	sent := n.s.now
	lat := n.s.latency()
	var snap map[string]simLeaseRecord
	ok := n.reaches()
	n.s.at(lat*int64(n.s.rng.Intn(100))/100, nil, func() {
		ok = ok && n.s.apiUp()
		snap = map[string]simLeaseRecord{}
		for name, rec := range n.s.leases {
			snap[name] = *rec
		}
	})
	n.s.at(min(lat, simRenewTimeout), n, func() {
		if n.incarnation != inc {
			return
		}
		n.listing = false
		if !ok || lat > simRenewTimeout {
			n.s.at(simRetry/4, n, n.step)
			return
		}
		for name, rec := range snap {
			// As membership.Member.observeListed: every listed Lease is
			// observed (older than what was seen is dropped), except
			// over a deletion already seen.
			o, seen := n.obs[name]
			if name == n.name || seen && (o.deleted || rec.rv <= o.rv) {
				continue
			}
			if !seen {
				o = &simObs{}
				n.obs[name] = o
			}
			rec := rec
			n.read(o, &rec)
			o.rv, o.lastChange, o.expired = rec.rv, n.s.now, false
		}
		n.listSent = sent
		n.step()
	})
}

// everyMemberSeen is membership.Member.unseenLocked returning "": a
// fresh list sent since start observed, a renewal of KCM's Lease sent
// since start succeeded, and every writer on the version it replaced
// seen.
func (n *simNode) everyMemberSeen(start int64) bool {
	if n.s.kcm == nil || n.listSent < start || !n.leader.readOK || n.leader.readSent < start {
		return false
	}
	for w := range n.leader.read {
		if name, _, _ := strings.Cut(w, "/"); name == n.name {
			continue
		}
		if n.writerStatus(w) == writerUnknown {
			return false
		}
	}
	// A member judged expired holds the join until it renews.
	for _, o := range n.obs {
		if o.good && !o.state.Leaving && o.expired && !o.deleted {
			return false
		}
	}
	return true
}
