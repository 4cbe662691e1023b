package membership

import (
	"fmt"
	"strconv"
)

// PartitionsAnnotation holds the number of namespace partitions a member
// runs, in decimal. A replica started without --partitions reads it from
// the fleet's Leases and runs the same count (shard.FleetPartitions), so
// the count is a property of the fleet, set when the fleet is created. A
// release from before the annotation writes none; it ignores annotations
// it does not know.
const PartitionsAnnotation = "fleet-controller-manager.io/partitions"

// maxPartitions bounds what the annotation may say, as shard's
// RingConfig.Validate bounds --partitions.
const maxPartitions = 4096

// ParsePartitions decodes a PartitionsAnnotation value: 0 when the value
// is empty (a member that does not say).
func ParsePartitions(value string) (int, error) {
	if value == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		return 0, fmt.Errorf("partitions annotation %q: %w", value, err)
	}
	if n < 1 || n > maxPartitions {
		return 0, fmt.Errorf("partitions annotation says %d, not between 1 and %d", n, maxPartitions)
	}
	return n, nil
}
