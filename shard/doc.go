// Package shard decides which replica runs which piece: the consistent-hash
// ring over the live members, and the handover protocol that moves pieces
// between replicas without ever letting two of them run the same piece.
//
// # Pieces and the ring
//
// A piece is a namespace partition ("partition/i": the i-th equal range of
// a 64-bit hash of namespace names, xxhash by default; with
// RingConfig.NamespaceHash set to HashFNV, FNV-1a, the hash of server-side
// sharded list/watch, so that a partition is one shardRange) or a
// singleton controller ("singleton/name"). The
// Ring (buraksezer/consistent over xxhash, bounded loads) gives each
// partition an owner; a singleton goes to the owner of the partition its
// name hashes to, as consistent.LocateKey does, except the Colocated ones,
// placed together by one key, whose owner keeps only ColocatedShare of an
// even share of the partitions. The ring is a pure function of the member
// set and RingConfig.
//
// # The protocol
//
// Each member publishes a State in its own Lease (package membership):
// its incarnation, the view it has applied (ViewID: ring configuration,
// ring members and participants) with an epoch that counts applied views,
// an acknowledgement of the epoch of every other participant it has seen,
// and every piece it may be running. Decide, a pure function shared by the
// runtime and the simulation, applies four rules:
//
//  1. Apply a view only after every piece it takes away has ended (the
//     Runner reported it on Ended); then bump the epoch and publish.
//  2. List a piece as running before starting it (intent, confirmed by a
//     successful write), and unlist it only after it ended.
//  3. Start a piece only when the ring of the applied view gives it to this
//     member, and every other participant publishes the same view, has
//     acknowledged this member's current epoch, and does not list the
//     piece. A Lease deleted by anyone but a graceful leave stays a
//     participant for a lease duration after its deletion (its member may
//     be alive and acting on what it saw; it recreates its Lease on its
//     next renewal), and what an incarnation listed stays listed for a
//     lease duration after it was last seen when a newer incarnation
//     takes its Lease over (a new process writes at once when it finds
//     its Lease deleted, while the old one's writes may be in transit).
//  4. Own nothing while joining: after the first write of a process, and
//     after regaining authority that had run out (over its own Lease or
//     over KCM's leader Lease, below), until every member that may act is
//     certainly seen: for one lease duration (every live member renews
//     its Lease within it), or sooner once a consistent list of the
//     fleet's Leases sent since the join began is observed (what it knows
//     of every member is then as new as the list, and it judges none
//     expired), and a renewal of KCM's leader Lease sent since then
//     succeeded with every writer listed on the version it replaced seen
//     (or known to have stopped).
//     Joining members take part in views (they must acknowledge them) but
//     the ring gives them nothing, so a joiner delays no running piece.
//
// Why never two owners. Suppose B starts p at time b while A runs it. At b,
// B's copy of A's state (version k) shows B's view and acknowledges B's
// epoch, so A wrote version k after it saw B publish that epoch, and before
// b. If A was running p when it wrote k, k lists p (rule 2) and B would not
// start. So A started p after k, under a view that gives p to A, hence a
// different view than B's, with a newer epoch of A. Rule 3 made A wait for
// B to acknowledge that epoch with that view, so B published that view
// after k; but B's own view at b differs, so B changed views after that
// publication and bumped its epoch, which A acknowledged in version k —
// written before A's epoch that B then acknowledged. The writes cannot be
// ordered both ways, because observations of a member never go back in
// time (membership drops older states), so no such A exists. Members that
// drop out of a view do so only after their authority has certainly run
// out (expiry is judged on the observer's clock after a fresh read; a
// replica stops acting RenewDeadline after a renewal was sent, and only
// renewals answered within LeaseDuration-RenewDeadline count), after they
// published that nothing runs (graceful leave); a Lease deleted by hand
// changes no view until a lease duration has passed, by when its holder
// has renewed (recreating it) or its authority has run out: a deleted
// member listing nothing may be about to start pieces others have
// acknowledged to it.
// Joiners (rule 4) have seen every live member before they own anything,
// which the argument above needs: a member B never saw cannot be in its
// view.
//
// Why a join that ends early has seen enough. A member acts only on a
// renewal of KCM's leader Lease sent within its renew deadline (below).
// Every renewal is a conditional write, so the renewals are totally
// ordered; each lists its writer and keeps every writer its writer still
// sees live, so a member stays listed while it renews. Suppose A runs p,
// started under a view without B (otherwise B acknowledged that view, so
// B saw A), while B, whose join ended early on renewal R, starts p. A's
// authority at the start of p came from a stretch of renewals that began
// with a join of A's (rule 4). If that stretch began before R, the version
// R replaced lists A, and B waited until it saw A. If it began after R,
// A's join ended on a renewal after R, whose replaced version lists B, or
// after a lease duration in which B renewed in sight: A saw B, and A's
// view would hold B. Either way A is in B's view or B in A's, as the
// argument above needs; and since B's copy of A is at least as new as
// B's list, no copy from before B's join (a member back from a network
// cut holds those, acknowledging the epoch it published before) counts
// for B's starts. (A renewal that takes the Lease from a KCM replaces a
// version whose writers no longer act, and lists nothing else.) The list
// covers a member that renews no writers list (one run with
// --leader-elect=false beside the others) but whose Lease exists; the
// writers cover a member that acts while its own Lease is gone (deleted by
// hand, recreated at its next renewal), which no list shows: a cut-off
// member whose Lease was deleted by hand, and a joiner that listed while it
// was gone, would both own. (Every simulated member renews KCM's Lease, so
// the simulation passes without the list.) The simulation
// (protocol_sim_test.go) checks the property under delayed and reordered
// events, crashes, pauses, outages, hand-deleted Leases and weight tables
// switched under them (PlacementWeighted and the keeper's moves tables of
// PlacementWeightedMoves), and that members which applied one view own
// disjoint pieces; the e2e tests check it on a real apiserver.
//
// # Releases side by side
//
// A placement (Placements) names how the ring places pieces for the same
// members and RingConfig; a release that changes placement adds a name and
// keeps computing the older ones. Each member says in its Lease what it
// supports (membership.Supports), and Decide places a view by
// CommonPlacement: the newest placement every participant supports (a
// member that says nothing, a release from before, supports only
// PlacementColocatedShare). The placement is part of the ViewID, so the
// argument above holds unchanged: two members that agree on a view place
// every piece alike, and members that would place differently never agree
// on a view, so they start nothing (rule 3) until one of them leaves. Every
// member computes the placement from the participants it sees, the same
// set the view is made of, so members that see the same participants
// agree. A rolling upgrade therefore keeps the older placement while any
// old replica takes part, and switches, as one view change, moving only
// what the newer placement moves, when the last one leaves; a rollback
// switches back when the first old replica joins. The simulation runs
// fleets of one release, of two consecutive ones and of one beside a
// release from before the annotation, each start picking one;
// TestRollingUpgradeAndRollback does it with the real controllers.
//
// The Lease state has versions too (membership.StateVersion). A member
// writes the newest version that every live member it observes reads (a
// member that says nothing reads version 1), and reads every version its
// release reads for as long as it runs, so no version it read from a live
// peer goes away under it. The version changes how the state is written,
// never what it says, so the argument above is untouched by it, with one
// condition: a member whose Lease a joiner cannot read is invisible to
// that joiner, which rule 4 needs to see. So a joiner stays joining while
// a live member's Lease holds the next version, which it does not read
// (a join that is over stays over, and any other version is garbage,
// which holds no one); that member
// writes a version the joiner reads at its next renewal after seeing the
// joiner's Lease. In the simulation the older of two releases reads only
// version 1, and each write carries the version its writer chose; with
// every member writing its newest version instead, a fleet of two
// releases never settles (a member never reads another's view).
//
// # Never beside kube-controller-manager
//
// A kube-controller-manager (KCM) elects itself through its own leader
// Lease (client-go's leader election). The fleet takes part in that
// election (membership's leaderLease), and a member's authority is the
// conjunction of its own Lease and of its renewal of KCM's Lease: Decide
// sees Authority false, and the fence refuses every write, unless both
// hold.
//
//   - Every member renews KCM's Lease itself, each time with a conditional
//     update (the resourceVersion it read), as holder
//     "fleet:<namespace>/<fleet>/<member>/<incarnation>", and acts only
//     until RenewDeadline after it sent its last successful renewal.
//   - A KCM takes the Lease only after its own GET showed the record
//     unchanged for LeaseDuration of its clock, with a conditional update
//     based on that GET. Its first sight of a record is after the record's
//     write committed, which is after the member sent it; any later fleet
//     write changes the record again (the holder names the incarnation,
//     whose renew times move on by at least a second, the resolution at
//     which client-go compares records) or makes KCM's update conflict. So
//     KCM acts no sooner than LeaseDuration after the last fleet renewal
//     was sent, and every member stopped RenewDeadline after sending its
//     own last renewal: LeaseDuration-RenewDeadline (5 s) earlier. This
//     holds for a member killed, paused or cut off, since it is a bound on
//     the member's own clock alone; a member also drops its authority at
//     once when its watch shows the Lease deleted or held by anyone else.
//   - The other way, a member takes the Lease from a KCM only after the
//     record stayed unchanged for max(LeaseDuration, RenewDeadline +
//     RetryPeriod + RenewDeadline/2) on its clock (17 s with KCM's
//     defaults): a KCM leader acts until a renewal window (one retry
//     period, then RenewDeadline of retries) passes without success, and
//     its last successful renewal may be answered up to its client timeout
//     (RenewDeadline/2) after it was written. KCM standbys wait only the
//     lease duration, so two KCMs can overlap after a slow answer; the fleet
//     does not.
//   - A member that leaves releases the Lease (empty holder, as client-go's
//     ReleaseOnCancel writes: a KCM takes it at its next retry) only when
//     every other member listed in the Lease's writers annotation has
//     certainly stopped acting: left gracefully (its last state lists
//     nothing running), expired (confirmed by a fresh read), or superseded
//     by a newer incarnation. Otherwise it takes itself off the list, so
//     the last member to leave can release; a KCM otherwise waits one lease
//     duration.
//
// One hole is left, as between two KCMs: a Lease deleted by hand while the
// fleet holds it lets a standby KCM create it anew and lead at its next
// retry, while members act until their watch shows the deletion
// (milliseconds, normally). Only cluster admins should be able to delete
// Leases in kube-system.
//
// KCM must run with the fleet's --leader-elect-* values (the defaults on
// both): a KCM with a shorter lease duration than the fleet's renew
// deadline could lead while members still act. The simulation models a KCM
// (client-go's timings and request timeout) and checks that it never leads
// while a member may act (kcm_sim_test.go).
//
// What it costs: a participant that renews but never acknowledges (a hung
// process) blocks new starts across the fleet until it dies; pieces already
// running keep running. A fleet that lost the apiserver for longer than the
// renew deadline stops everything, as kube-controller-manager does after
// losing its leader lease, and owns nothing until its members' joins have
// seen every member again (at most one lease duration).
package shard
