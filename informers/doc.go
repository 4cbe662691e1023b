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
// ownedListWatch whose sources are requests to the apiserver:
//
//   - the trunk: one cluster-wide watch (and its list), keeping the events
//     of the namespaces it carries and dropping the others undecoded;
//   - a feeder: a list of namespaces being loaded, handed over to the
//     trunk with the trunk's events of them held back meanwhile and those
//     newer than the list applied after it (ownedfeed.go);
//   - an adopting source: while a singleton holds every namespace of the
//     kind (HoldEverywhere), one list and watch of every namespace.
//
// Compaction merges the watching sources back into one.
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
