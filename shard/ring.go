package shard

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// RingConfig shapes the consistent-hash ring. Every replica of a fleet must
// use the same values, or they compute different owners; they are published
// in each member's Lease and a mismatch stops handover (see Coordinator).
type RingConfig struct {
	// Partitions is the number of namespace partitions (partition pieces).
	// It bounds the useful fleet size: members beyond it own no partition.
	Partitions int
	// ReplicationFactor is the number of virtual nodes per member.
	ReplicationFactor int
	// Load is the bounded-load factor: no member owns more than
	// ceil(Load * Partitions/members) partitions.
	Load float64
	// NamespaceHash places namespaces in partitions: HashXX (default) or
	// HashFNV, the apiserver's shard hash, which server-side sharded watch
	// needs. FNV-1a's top bits hardly depend on a name's last characters,
	// so with HashFNV namespaces that differ only there (team-01,
	// team-02, ...) all fall in one partition, hence on one replica.
	NamespaceHash string
	// Colocated: comma-separated singleton names placed together, on the
	// owner of one key, rather than each by its own name: singletons that
	// cache the same kinds cluster-wide (every Pod, every PVC) then cost
	// one replica that cache, not each replica that runs one of them.
	Colocated string
	// ColocatedShare: the fraction of an even share of the partitions
	// that the owner of the Colocated singletons keeps (0 to 1; it keeps
	// at least the partition their key hashes to). Those singletons hold
	// every Pod and every resource's metadata, so at an even share their
	// replica is the fleet's largest by far, and a Deployment's replicas
	// all get the memory of its largest; the partitions it gives up go to
	// the others, as a ring without it would place them.
	ColocatedShare float64
	// ColocatedShareByWeight is ColocatedShare under
	// PlacementWeightedEvenShare, where the weight table, not the count,
	// evens out the replicas: one unless the operator sets the share.
	ColocatedShareByWeight float64
	// Placement is how pieces are placed (one of Placements). The view
	// sets it: the newest placement every participant supports.
	Placement string
	// WeightTable is the view's partition weights (EncodeWeightTable), which
	// PlacementWeighted balances; the view sets it from its first member's
	// state (weightkeeper.go).
	WeightTable string
}

// colocatedKey is where the Colocated singletons are placed.
const colocatedKey = "colocated-singletons"

// Namespace hashes.
const (
	HashXX  = "xxhash"
	HashFNV = "fnv"
)

// DefaultRingConfig is a new fleet's (a fleet keeps the partition count
// it was created with: FleetPartitions). For 2..10 members, bounded loads
// keep every member at or under ceil(Load * floor(P/N)) partitions, and
// with 256 partitions a join or leave moves at most twice the ideal 1/N
// of them (TestRingBalanceAndMovement guards both); fewer partitions put
// more namespaces together on one replica and balance worse, more make
// the Lease state and the weight table larger.
var DefaultRingConfig = RingConfig{Partitions: 256, ReplicationFactor: 64, Load: 1.25, NamespaceHash: HashXX, ColocatedShare: DefaultColocatedShare, ColocatedShareByWeight: 1, Placement: PlacementColocatedShare}

// DefaultColocatedShare: the colocated singletons cache every Pod and
// every resource's metadata, about as much as half a share of partitions
// (docs/design.md, "Pieces and the ring").
const DefaultColocatedShare = 0.5

// placedBy is the configuration under placement: its colocated share is
// ColocatedShareByWeight's under PlacementWeightedEvenShare.
func (c RingConfig) placedBy(placement string) RingConfig {
	c.Placement = placement
	if placement == PlacementWeightedEvenShare {
		c.ColocatedShare = c.ColocatedShareByWeight
	}
	return c
}

// Validate reports a configuration the ring cannot work with.
func (c RingConfig) Validate() error {
	switch {
	case c.Partitions < 1 || c.Partitions > 4096:
		return fmt.Errorf("partitions must be between 1 and 4096, got %d", c.Partitions)
	case c.ReplicationFactor < 1 || c.ReplicationFactor > 1024:
		return fmt.Errorf("replication factor must be between 1 and 1024, got %d", c.ReplicationFactor)
	case c.Load < 1 || c.Load > 10:
		return fmt.Errorf("load factor must be between 1 and 10, got %g", c.Load)
	case c.NamespaceHash != HashXX && c.NamespaceHash != HashFNV:
		return fmt.Errorf("namespace hash must be %s or %s, got %q", HashXX, HashFNV, c.NamespaceHash)
	case !(c.ColocatedShare >= 0 && c.ColocatedShare <= 1):
		return fmt.Errorf("colocated share must be between 0 and 1, got %g", c.ColocatedShare)
	case !(c.ColocatedShareByWeight >= 0 && c.ColocatedShareByWeight <= 1):
		return fmt.Errorf("colocated share placed by weight must be between 0 and 1, got %g", c.ColocatedShareByWeight)
	case !slices.Contains(Placements, c.Placement):
		return fmt.Errorf("placement must be one of %v, got %q", Placements, c.Placement)
	}
	return nil
}

type xxhasher struct{}

func (xxhasher) Sum64(data []byte) uint64 { return xxhash.Sum64(data) }

type ringMember string

func (m ringMember) String() string { return string(m) }

// Ring assigns pieces to members. It is a pure function of the member set and
// the configuration: every replica that sees the same members computes the
// same owners, whatever order it learnt them in.
type Ring struct {
	config  RingConfig
	members []string
	owners  []string // partition -> member
}

// NewRing builds the ring for members under config (which must be valid).
func NewRing(config RingConfig, members []string) *Ring {
	sorted := append([]string(nil), members...)
	sort.Strings(sorted)
	sorted = dedupe(sorted)
	r := &Ring{config: config, members: sorted, owners: make([]string, config.Partitions)}
	if len(sorted) == 0 {
		return r
	}
	// The bounded-load distribution panics when there are more members than
	// partitions (its average load rounds down to zero). Members beyond the
	// partition count would own nothing anyway; the ring uses the first
	// Partitions of them in name order and the rest stand by.
	inRing := sorted
	if len(inRing) > config.Partitions {
		inRing = inRing[:config.Partitions]
	}
	c := config.consistent(inRing)
	for p := range config.Partitions {
		r.owners[p] = c.GetPartitionOwner(p).String()
	}
	r.shrinkColocatedOwner(inRing)
	r.balance(inRing)
	return r
}

// balance moves partitions by the view's weight table: balanced by its
// weights (PlacementWeighted) or as its moves say (PlacementWeightedMoves).
// An empty or unreadable table moves none, so that the placement is then
// PlacementColocatedShare's.
func (r *Ring) balance(inRing []string) {
	if !ByWeight(r.config.Placement) || r.config.WeightTable == "" {
		return
	}
	if byMoves(r.config.Placement) {
		r.applyMoves(inRing)
		return
	}
	weights, err := DecodeWeightTable(r.config.WeightTable, r.config.Partitions)
	if err != nil || weights == nil {
		return
	}
	heavy, pinned := r.heavyOf()
	balanceByWeight(r.owners, inRing, weights, heavy, r.config.ColocatedShare, pinned, nil, false)
}

// colocatedHome is the partition whose owner runs the Colocated singletons.
func (r *Ring) colocatedHome() int {
	return int(xxhash.Sum64String(colocatedKey) % uint64(r.config.Partitions))
}

// consistent is buraksezer/consistent's bounded-load ring of members.
func (c RingConfig) consistent(members []string) *consistent.Consistent {
	ms := make([]consistent.Member, len(members))
	for i, m := range members {
		ms[i] = ringMember(m)
	}
	return consistent.New(ms, consistent.Config{
		PartitionCount:    c.Partitions,
		ReplicationFactor: c.ReplicationFactor,
		Load:              c.Load,
		Hasher:            xxhasher{},
	})
}

// shrinkColocatedOwner leaves the owner of the Colocated singletons
// ColocatedShare of an even share of the partitions: it keeps the one
// their key hashes to, then its others in ascending order; each partition
// it gives up goes to that partition's owner on the ring of the other
// members, so a join or leave elsewhere moves few of them.
func (r *Ring) shrinkColocatedOwner(inRing []string) {
	if r.config.Placement == PlacementColocated || r.config.Colocated == "" || r.config.ColocatedShare >= 1 || len(inRing) < 2 {
		return
	}
	home := r.colocatedHome()
	heavy := r.owners[home]
	keep := int(math.Round(r.config.ColocatedShare*float64(r.config.Partitions)/float64(len(inRing)))) - 1
	others := make([]string, 0, len(inRing)-1)
	for _, m := range inRing {
		if m != heavy {
			others = append(others, m)
		}
	}
	rest := r.config.consistent(others)
	for p, owner := range r.owners {
		if owner != heavy || p == home {
			continue
		}
		if keep > 0 {
			keep--
			continue
		}
		r.owners[p] = rest.GetPartitionOwner(p).String()
	}
}

func dedupe(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// Members is the sorted member set the ring was built from.
func (r *Ring) Members() []string { return r.members }

// Config is the configuration the ring was built with.
func (r *Ring) Config() RingConfig { return r.config }

// PartitionOwner is the member that owns namespace partition p, or "" when
// the ring has no members.
func (r *Ring) PartitionOwner(p int) string {
	if p < 0 || p >= len(r.owners) {
		return ""
	}
	return r.owners[p]
}

// SingletonOwner places a singleton piece by its name (or, if it is
// Colocated, by their common key), as consistent.LocateKey does: the owner
// of the partition the key hashes to.
func (r *Ring) SingletonOwner(name string) string {
	if len(r.members) == 0 {
		return ""
	}
	key := name
	if r.config.colocated(name) {
		key = colocatedKey
	}
	return r.owners[xxhash.Sum64String(key)%uint64(r.config.Partitions)]
}

func (c RingConfig) colocated(name string) bool {
	for _, n := range strings.Split(c.Colocated, ",") {
		if n == name {
			return true
		}
	}
	return false
}

// Owner is the member that owns piece.
func (r *Ring) Owner(piece Piece) string {
	if piece.IsPartition() {
		return r.PartitionOwner(piece.Partition())
	}
	return r.SingletonOwner(piece.Name())
}

// Owned lists, in order, the pieces among all that member owns.
func (r *Ring) Owned(member string, all []Piece) []Piece {
	var out []Piece
	for _, p := range all {
		if r.Owner(p) == member {
			out = append(out, p)
		}
	}
	return out
}

// NamespacePartition is the partition of namespace ns: the i-th of equal
// ranges of the 64-bit hash of its name (c.NamespaceHash).
func (c RingConfig) NamespacePartition(ns string) int {
	if c.NamespaceHash == HashFNV {
		return FNVPartition(ns, c.Partitions)
	}
	hi, _ := bits.Mul64(xxhash.Sum64String(ns), uint64(c.Partitions))
	return int(hi)
}

// FNVPartition is the partition of namespace ns among partitions by the
// 64-bit FNV-1a hash of its name: the hash k8s.io/apimachinery/pkg/sharding
// uses (sharding.HashField), so a partition is exactly one server-side
// shardRange(object.metadata.namespace, lo, hi).
func FNVPartition(ns string, partitions int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(ns))
	hi, _ := bits.Mul64(h.Sum64(), uint64(partitions))
	return int(hi)
}

// PartitionRange is the half-open hash range [lo, hi) of partition p, in
// the form server-side sharding takes (sharding.ShardRangeRequirement):
// 0x-prefixed 16-digit lowercase hex, the last range ending at
// 0x10000000000000000 (2^64).
func PartitionRange(p, partitions int) (lo, hi string) {
	bound := func(i int) string {
		if i == partitions {
			return "0x10000000000000000"
		}
		// ceil(i * 2^64 / partitions): the smallest hash in partition i.
		q, r := bits.Div64(uint64(i), 0, uint64(partitions))
		if r != 0 {
			q++
		}
		return fmt.Sprintf("0x%016x", q)
	}
	return bound(p), bound(p + 1)
}

// ShardSelector is the server-side list/watch selector (ListOptions
// ShardSelector, feature gate ShardedListAndWatch) of partition p: every
// namespaced object whose namespace falls in the partition.
func ShardSelector(p, partitions int) string {
	lo, hi := PartitionRange(p, partitions)
	return fmt.Sprintf("shardRange(object.metadata.namespace, '%s', '%s')", lo, hi)
}
