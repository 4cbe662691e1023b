package informers

// plantedNoRelistOnExpiry is a planted fault for showing that the chaos
// soak's checks bite (membership/plants.go has the others): in a build
// tagged plant_no_relist_on_expiry, a source of the owned cache told its
// version is gone (410) watches again from that version instead of
// listing its namespaces again, so it never catches up. Every other build
// leaves it false.
var plantedNoRelistOnExpiry bool

// plantedStuckLoad is a planted fault for showing that a load that does
// not finish is reported (the FleetPartitionLoadStuck alert, `status`,
// /debug/fleet): in a build tagged plant_stuck_load, a Load of partitions
// holding a namespace named stuck-load-* never returns until cancelled.
// Every other build leaves it false.
var plantedStuckLoad bool

// stuckLoadPrefix names the namespaces whose loads plantedStuckLoad
// holds.
const stuckLoadPrefix = "stuck-load-"

// The rules of keeping namespaces by partition (ownedpartitions.go),
// each planted out by the owned-cache simulation (-ownedsim.plant) to
// show a schedule that breaks without it. Every build leaves them false.
var (
	// plantedGainNamesFromInformer: a gain reads its partitions'
	// namespaces from the Namespaces informer, which lags, instead of a
	// consistent list issued after they were named.
	plantedGainNamesFromInformer bool
	// plantedNoNote: the trunk drops a naming partition's events without
	// noting their namespaces for the gain.
	plantedNoNote bool
	// plantedNoReadAfterList: a trunk's list is not followed by a read
	// of the namespaces it did not carry.
	plantedNoReadAfterList bool
	// plantedGainShowsWhileListing: a gain shows the namespaces it
	// loaded once their lists are in, even while the trunk lists.
	plantedGainShowsWhileListing bool
	// plantedRelistReadsNamespaces: a trunk whose kind keeps by
	// partition reads the namespaces before and after it lists again,
	// as a trunk naming its namespaces does, instead of listing every
	// namespace at once.
	plantedRelistReadsNamespaces bool
	// plantedReadyByPartitionOnly: a namespace is held back from its
	// handlers while a trunk lists or a source has it joining only in a
	// kind that keeps its partition by partition.
	plantedReadyByPartitionOnly bool
	// plantedHoldKeepsSelector: holding every namespace of a selected
	// kind names its partitions while the trunk's open watch still
	// carries its selector.
	plantedHoldKeepsSelector bool
	// plantedLetGoFromInformer: letting go every namespace of a selected
	// kind takes at once the namespaces the Namespaces informer shows,
	// with no leaving partitions and no consistent read.
	plantedLetGoFromInformer bool
	// plantedLetGoInsertsWhileListing: letting go every namespace of a
	// selected kind inserts a leaving partition's namespace into a trunk
	// that is listing, instead of joining it.
	plantedLetGoInsertsWhileListing bool
	// plantedRevealFromStore: a scope's reveal reads the informer's
	// store, which runs ahead of its dispatched events, instead of what
	// those events told the dispatcher.
	plantedRevealFromStore bool
)
