package shard

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// Piece names one unit of work that exactly one member runs:
// "partition/<i>" is namespace partition i for every partition controller,
// "singleton/<controller>" is one whole controller.
type Piece string

const (
	// partitionPrefix is membership's: its state encodes partition pieces
	// by it.
	partitionPrefix = membership.PartitionPrefix
	singletonPrefix = "singleton/"
)

// PartitionPiece is the piece of namespace partition i.
func PartitionPiece(i int) Piece { return Piece(partitionPrefix + strconv.Itoa(i)) }

// SingletonPiece is the piece of one whole controller.
func SingletonPiece(controller string) Piece { return Piece(singletonPrefix + controller) }

// IsPartition reports whether p is a namespace partition.
func (p Piece) IsPartition() bool { return strings.HasPrefix(string(p), partitionPrefix) }

// Partition is the partition number of a partition piece, -1 otherwise.
func (p Piece) Partition() int {
	if !p.IsPartition() {
		return -1
	}
	i, err := strconv.Atoi(strings.TrimPrefix(string(p), partitionPrefix))
	if err != nil {
		return -1
	}
	return i
}

// Name is the controller of a singleton piece, the partition number of a
// partition piece.
func (p Piece) Name() string {
	_, name, _ := strings.Cut(string(p), "/")
	return name
}

// AllPieces lists every piece of a fleet: the partitions, then the
// singletons in name order.
func AllPieces(partitions int, singletons []string) []Piece {
	out := make([]Piece, 0, partitions+len(singletons))
	for i := range partitions {
		out = append(out, PartitionPiece(i))
	}
	names := append([]string(nil), singletons...)
	sort.Strings(names)
	for _, s := range names {
		out = append(out, SingletonPiece(s))
	}
	return out
}

// ViewID fingerprints a view: the ring configuration, the placement
// algorithm, the members in the ring and every participant (ring members
// and joining members). Two members that publish the same ViewID compute the
// same owner for every piece and wait for the same acknowledgements.
func ViewID(config RingConfig, ringMembers, participants []string) string {
	key := fmt.Sprintf("%s|%d|%d|%g|%s|%s|%g|%s|%s", config.Placement, config.Partitions, config.ReplicationFactor, config.Load, config.NamespaceHash, config.Colocated, config.ColocatedShare,
		strings.Join(sortedCopy(ringMembers), ","), strings.Join(sortedCopy(participants), ","))
	if ByWeight(config.Placement) && !plantedTableOutsideView {
		// Members agree on owners only if they place by the same table.
		key += "|" + config.WeightTable
	}
	return fmt.Sprintf("%016x", xxhash.Sum64String(key))
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}
