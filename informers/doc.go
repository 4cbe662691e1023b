// Package informers builds the informer views through which the fleet's
// controllers see one replica-wide cache: a SharedInformerFactory for a
// singleton (every object, from the replica's pool of cluster-wide
// informers, or the owned cache holding every namespace) and for the
// replica's one set of partition controllers (the namespaces of the
// partitions the replica owns now, a Scope that grows and shrinks while
// they run, cached by the owned cache, or by the pool in filtered-watch:
// see Mode). A view's event handlers are removed from the shared
// informers when its controllers stop, and every factory records what it
// handed to which controller (census.go).
//
// # The owned cache
//
// OwnedCache holds, per namespaced kind, one informer fed by an
// ownedListWatch whose sources are requests to the apiserver: one trunk,
// and the feeders loading namespaces into it (the concepts below). The
// trunk drops the events of the namespaces it does not carry undecoded.
//
// # Concepts
//
// Each name below has one meaning in this package.
//
// Sources and what they carry (ownedsource.go, ownedstream.go):
//
//   - trunk: an informer's one watching source, a cluster-wide watch (a
//     selected kind's names its namespaces) and its list, whose events
//     are kept for the namespaces it carries;
//   - feeder: a list of namespaces being loaded into the trunk; it never
//     watches;
//   - joining: a namespace on its way into the trunk through a feeder;
//   - backlog: the trunk's events of a joining namespace, held back until
//     the feeder's list is handed over, then applied where newer than it;
//   - floor: the version through which a feeder's list handed a
//     namespace over; the trunk drops that namespace's events up to it;
//   - superseded watch: the trunk's watch ended and opened again from its
//     version, with a shard selector naming a namespace that joined, or
//     with none or one again as its kind is held everywhere or let go.
//
// What the informer is handed (ownedstream.go, ownedwatch.go):
//
//   - loaded: a namespace the trunk carries or a feeder lists;
//   - awaited: a loaded namespace a Load waits for, until its first list
//     is handed over;
//   - ledger: per namespace, the objects handed to the informer and not
//     deleted since; a deletion of anything else is never sent;
//   - purge: the deletions of an unloaded namespace's objects, sent with
//     the next stream;
//   - bookmark: the newest version any source delivered, sent when the
//     store is behind it;
//   - catch-up: a gain's wait, over namespaces the trunk carried already,
//     until the informer holds every object of a list sent after the gain
//     at its version or newer (ownedcatchup.go);
//   - behind: a namespace a catch-up waits for;
//   - wake: the trunk's wait to resume cut short for a catch-up, once per
//     gain.
//
// What the partition controllers see (ownedheld.go, scope.go,
// scopedispatch.go, scopequeue.go, view.go):
//
//   - created: a namespace created in a loaded partition, joined at once;
//   - held: a namespace of a loaded partition whose first list every
//     informer holds; a gated scope shows it from then on;
//   - held everywhere: a kind whose informer has every partition loaded
//     for the colocated singletons (HoldEverywhere), until as many
//     releases;
//   - scope: the partitions the replica owns and, gated, the namespaces
//     held, through which the partition controllers' handlers and listers
//     see the informers;
//   - reveal: a scope's delivery, as additions, of the cached objects of a
//     partition gained or a namespace held; a hide, as deletions, of a
//     partition lost;
//   - dispatcher: a scope's one handler on an informer; it keeps the
//     objects the informer's events told it of (known) and queues, under
//     one lock, the events of visible namespaces and each reveal's or
//     hide's objects from known to every partition controller's handler,
//     so each is told in the informer's order, as client-go tells a
//     handler added to a running informer;
//   - deferred registration: a handler added to a running shared informer
//     that goes live only when its piece starts its informers.
//
// # A partition, per kind
//
// A kind keeps partitions by partition while its trunk's watch carries
// every namespace: always, but for a selected kind (the Pods of
// sharded-watch), whose watch names its namespaces, and which keeps them
// only while held everywhere. A partition of such a kind moves through
// these states (ownedpartitions.go):
//
//	unloaded --Load or HoldEverywhere: nameGain--> naming --keepGain--> kept --Unload or ReleaseEverywhere: forget--> unloaded
//	kept --ReleaseEverywhere of a selected kind (leaveEverywhere)--> leaving --letGoEverywhere--> unloaded (its namespaces carried by name)
//	leaving --HoldEverywhere--> kept
//
// A kind that does not keep by partition loads every namespace by a
// feeder's list, and those created later in a loaded partition from
// their creation (takeFrom): the Namespaces informer lists, then watches,
// so each addition its watch tells of is a creation, at its version
// (Creations); every object of the namespace is newer, so the trunk's
// watch, resumed from there if it has delivered past it, with every
// other namespace floored at what it had delivered, hands all of it over
// with no list. A namespace whose creation the informer did not watch
// (met in its list) joins through a list. The states:
//
//   - naming: the trunk decodes every event of the partition's namespaces;
//     those of namespaces it does not carry are dropped and noted. The
//     gain reads every namespace by a consistent list.
//   - keepGain: the namespaces read and noted are loaded (listed by a
//     feeder); the partition is kept.
//   - kept: the trunk takes a namespace of the partition at its first
//     event, with no list. The proof: the consistent list was issued
//     after the partition became naming, so its version is no older than
//     any event the trunk decoded before; a namespace missing from it was
//     created later, and every event of it reaches the trunk's decoder
//     while the partition is naming or kept. A selected trunk's watch is
//     superseded before its partitions are named, resuming from its
//     version with no selector, so the same holds.
//   - leaving: a selected kind let go everywhere, about to name its
//     namespaces in its watch again. The trunk still takes a namespace at
//     its first event, but one created now joins through a list. A
//     consistent read issued after leaving began names the rest; the
//     trunk takes those not taken yet, which have had no event handed
//     over, and watches again from its version naming them.
//   - a trunk whose kind keeps by partition lists again (its version
//     expired) at once and cluster-wide, as a plain informer does: it
//     takes the namespaces of kept partitions its list shows and notes
//     those of naming ones; those with no object then are taken at
//     their first event, which its watch resumes from the list to
//     deliver.
//   - around any other list of the trunk (the informer's first, or a
//     selected trunk's) the namespaces are read: before a list again,
//     those of kept partitions no source carries join the list (at the
//     informer's first list none was taken at an event); after it,
//     those created meanwhile join through a feeder; those of naming
//     partitions are noted. Reads asked for together share one
//     consistent list, sent after each asked. A namespace is shown only
//     while the trunk does not list, so no list folds an event its
//     handlers were told of.
//
// The rules, each with the simulation's plant that breaks without it
// (TestOwnedCacheSimulation -ownedsim.plant=NAME):
//
//   - the gain's names come from a consistent list, not the Namespaces
//     informer, which lags (informer-names);
//   - a naming partition's dropped namespaces are noted (no-note);
//   - the trunk's list is read around (no-read-after-list);
//   - a trunk keeping by partition lists again at once, with no read of
//     the namespaces first: the read (tens of milliseconds on a busy
//     machine) widened what its list folds, and a ConfigMap the
//     publisher wrote and the schedule deleted after the 410 was folded
//     away (relist-reads-namespaces);
//   - a gain shows its namespaces only while the trunk does not list: a
//     trunk listing since a singleton began holding every namespace
//     folded a ConfigMap created and deleted after the reveal; a trunk
//     that begins listing after the gain's list was handed over leaves
//     nothing awaited, and only this wait holds the namespace
//     (gain-shows-while-listing; TestGainWaitsForATrunkListingAfterItsList
//     fails without it);
//   - a namespace is shown only while no trunk lists and no source has
//     it joining, in every kind, not only one keeping its partition by
//     partition: a selected kind let go everywhere joins a leaving
//     partition's namespace through its listing trunk with no partition
//     kept and nothing awaited, and a namespace shown then had a
//     ConfigMap created and deleted after the reveal folded into its
//     feeder's list (ready-by-partition-only);
//   - a selected trunk's watch is superseded before a hold names its
//     partitions (hold-keeps-selector);
//   - a selected kind let go everywhere takes its namespaces from a
//     consistent read issued once its partitions leave, not from the
//     Namespaces informer at once: a gain of a partition then waited for
//     a namespace no source would ever carry (let-go-from-informer);
//   - a namespace the trunk takes as it lets go everywhere joins it while
//     it lists (its list may have been asked for without it), as a join
//     does: inserted, a ConfigMap created with its namespace was never
//     delivered (let-go-while-listing);
//   - a reveal reads what the dispatcher's events told it, not the store,
//     which runs ahead of them: a handler was told an object twice
//     (reveal-from-store);
//   - a selected trunk taking a namespace from its creation resumes from
//     the creation's version when it has delivered past it, not from its
//     own: with the Namespaces watch behind the ConfigMaps', a namespace's
//     ConfigMap written in its first moments was never delivered
//     (take-from-trunk);
//   - a gain keeps only the partitions named before its read of the
//     namespaces was asked for: a hold of every namespace naming a
//     partition lost and gained again meanwhile left a namespace
//     created in between, missing from the earlier gain's read, with
//     events its trunk never decoded, and a ConfigMap of it never
//     delivered (keeps-later-naming);
//   - a namespace joining a trunk drops the events at or below its floor
//     rather than holding them back: a trunk resumed from a creation
//     would replay them behind the ones it held;
//   - a gain ends by loading and showing every namespace of its
//     partitions the Namespaces informer holds that its loads did not:
//     those created during the gain, and all of a partition included
//     before any informer existed, as a starting replica includes its
//     first ones; without it such a namespace was never shown
//     (settle-loaded-only).
//
// # What controllers see
//
// The partition table is the one writer of the Scope: Gain and Lose as
// it serves partitions, Held and Dropped as the owned cache reports to it
// (HeldReporter) which namespaces it holds; the Scope shows a namespace
// only once held. A namespace of a kept partition, or created in a
// loaded one, is held at once; one a kind must list (a namespace a
// selected kind met in a list, a leaving partition's) once that list is
// in. Each change of the Scope is queued to the partition controllers'
// handlers in order with the informers' events (dispatcher).
//
// # Lock order
//
// OwnedCache.reportMu, then OwnedCache.mu, then ownedListWatch.sendMu,
// then ownedListWatch.mu, then the informer's store; Scope.mu, then
// every dispatcher's mu, then Scope.heldMu, then a scopedHandler's mu.
package informers
