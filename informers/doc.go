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
// ownedListWatch whose sources are requests to the apiserver: a trunk,
// the feeders loading namespaces into it and, while the kind is held
// everywhere, an adopting source, merged back into one trunk by
// compaction (the concepts below). The trunk drops the events of the
// namespaces it does not carry undecoded.
//
// # Concepts
//
// Each name below has one meaning in this package.
//
// Sources and what they carry (ownedsource.go, ownedfeed.go):
//
//   - trunk: an informer's watching source, one cluster-wide watch and
//     its list, whose events are kept for the namespaces it carries;
//   - feeder: a list of namespaces being loaded into the trunk; it never
//     watches;
//   - joining: a namespace on its way into the trunk through a feeder;
//   - backlog: the trunk's events of a joining namespace, held back until
//     the feeder's list is handed over, then applied where newer than it;
//   - floor: the version through which a namespace's events were handed
//     over by another request (a feeder's list, the sources a merge
//     replaced); the trunk drops that namespace's events up to it;
//   - compaction: the watching sources merged back into one trunk,
//     resumed from the oldest of their versions above each floor;
//   - superseded watch: a selected watch whose shard selector does not
//     name a namespace that joined: cancelled, and opened again naming it;
//   - adopting source: while the kind is held everywhere, a source whose
//     list and watch carry every namespace, taking one no other source
//     carries at its first object;
//   - keeper: a watching source that takes the namespaces of kept
//     partitions at their first event (ownedpartitions.go).
//
// What the informer is handed (ownedstream.go, ownedwatch.go):
//
//   - loaded: a namespace some source of the kind carries;
//   - awaited: a loaded namespace a Load waits for, until its first list
//     is handed over;
//   - ledger: per namespace, the objects handed to the informer and not
//     deleted since; a deletion of anything else is never sent;
//   - purge: the deletions of an unloaded namespace's objects, sent with
//     the next stream;
//   - bookmark: the newest version any source delivered, sent when the
//     store is behind it;
//   - catch-up: a gain's wait, over namespaces a source carried already,
//     until the informer holds every object of a list sent after the gain
//     at its version or newer (ownedcatchup.go);
//   - behind: a namespace a catch-up waits for;
//   - wake: a watching source's wait to resume cut short for a catch-up,
//     once per gain.
//
// What the partition controllers see (ownedheld.go, scope.go,
// scopewindow.go, view.go):
//
//   - created: a namespace created in a loaded partition, gathered with
//     others created within 5 ms into one join;
//   - held: a namespace of a loaded partition whose first list every
//     informer holds; a gated scope shows it from then on;
//   - held everywhere: a kind whose informer holds every namespace for the
//     colocated singletons (HoldEverywhere), until as many releases;
//   - scope: the partitions the replica owns and, gated, the namespaces
//     held, through which the partition controllers' handlers and listers
//     see the informers;
//   - reveal: a scope's delivery, as additions, of the cached objects of a
//     partition gained or a namespace held; a hide, as deletions, of a
//     partition lost;
//   - scope window: per handler, what a reveal or hide told it of the
//     namespaces it covers, kept 10 s to sort the events queued before it;
//   - deferred registration: a handler added to a running shared informer
//     that goes live only when its piece starts its informers.
//
// # A partition, per kind
//
// For every kind whose trunk watches every namespace (all but the Pods'
// selected watch of sharded-watch), a loaded partition moves through
// these states (ownedpartitions.go):
//
//	unloaded --Load/nameGain--> naming --keepGain--> kept --Unload/forget--> unloaded
//	                                                  kept --forget while held everywhere--> retained --let go--> unloaded
//
// The states:
//
//   - naming: the trunk decodes every event of the partition's namespaces;
//     those of namespaces it does not carry are dropped and noted. The
//     gain reads every namespace by a consistent list.
//   - keepGain: the namespaces read and noted are loaded (listed by a
//     feeder); the partition is kept.
//   - kept: a keeper takes a namespace of the partition at its first
//     event, with no list. The proof: the consistent list was issued after
//     the partition became naming, so its version is no older than any
//     event the trunk decoded before; a namespace missing from it was
//     created later, and every event of it reaches the trunk's decoder
//     while the partition is naming or kept.
//   - around every list of a keeper the namespaces are read: before a
//     list again, those of kept partitions no source carries join the
//     list (at the informer's first list none was taken at an event);
//     after it, those created meanwhile join through a feeder; those of
//     naming partitions are noted. Reads asked for together share one
//     consistent list, sent after each asked. A namespace is shown only while no keeper
//     lists, so no list folds an event its handlers were told of.
//
// The rules, each with the simulation's plant that breaks without it
// (TestOwnedCacheSimulation -ownedsim.plant=NAME):
//
//   - the gain's names come from a consistent list, not the Namespaces
//     informer, which lags (informer-names);
//   - a naming partition's dropped namespaces are noted (no-note);
//   - a keeper's list is read around (no-read-after-list);
//   - only keepers take by partition: an adopting source beside a keeper
//     would take a namespace from its list, folding events its handlers
//     were told of (any-keeper);
//   - a gain shows its namespaces only while no keeper lists: a keeper
//     listing since a singleton began holding every namespace folded a
//     ConfigMap created and deleted after the reveal
//     (gain-shows-while-listing).
//
// # What controllers see
//
// The partition table writes the Scope (Gain, Lose); the owned cache
// reports which namespaces it holds (HeldReporter), and the Scope shows a
// namespace only once held. A namespace of a kept partition is held at
// once; one a kind must list (selected Pods) once that list is in.
//
// # Lock order
//
// OwnedCache.reportMu, then OwnedCache.mu, then ownedListWatch.sendMu,
// then ownedListWatch.mu, then the informer's store; Scope.gainMu, then
// Scope.mu, then a scopedHandler's mu.
package informers
