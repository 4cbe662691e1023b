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

// The rules of keeping namespaces by partition, each planted out by the
// owned-cache simulation (-ownedsim.plant=NAME) to show a schedule that
// breaks without it; doc.go says what each guards. Every build leaves
// them false.
var (
	plantedGainNamesFromInformer    bool // informer-names
	plantedNoNote                   bool // no-note
	plantedNoReadAfterList          bool // no-read-after-list
	plantedGainShowsWhileListing    bool // gain-shows-while-listing
	plantedRelistReadsNamespaces    bool // relist-reads-namespaces
	plantedReadyByPartitionOnly     bool // ready-by-partition-only
	plantedHoldKeepsSelector        bool // hold-keeps-selector
	plantedLetGoFromInformer        bool // let-go-from-informer
	plantedLetGoInsertsWhileListing bool // let-go-while-listing
	plantedRevealFromStore          bool // reveal-from-store
	plantedTakeFromTrunk            bool // take-from-trunk
	plantedKeepsLaterNaming         bool // keeps-later-naming
	plantedSettleLoadedOnly         bool // settle-loaded-only
)
