package shard

import "fmt"

// explainBalance says in a line why the busiest of the running members
// holds over weightBound times the mean, as far as the Leases tell: too
// few partitions hold objects to go round, one partition alone is more
// than a fair share (a partition's namespaces are never split), the fleet
// places by count, or the keeper waits out its hold before it moves any.
// It says nothing when the members are within the bound.
func (s FleetStatus) explainBalance(running int) string {
	if s.Busiest <= weightBound || running < 2 {
		return ""
	}
	var busiest *MemberStatus
	byWeight := true
	for i := range s.Members {
		m := &s.Members[i]
		if m.Health == MemberExpired || len(m.Partitions) == 0 {
			continue
		}
		byWeight = byWeight && m.ByWeight
		if busiest == nil || m.Objects > busiest.Objects {
			busiest = m
		}
	}
	held := s.partitionsHolding()
	fair := s.Objects / uint64(running)
	switch {
	case held < running:
		return fmt.Sprintf("uneven: only %d partitions hold objects, fewer than the %d members, and a partition is never split", held, running)
	case busiest.HeaviestObjects > fair:
		return fmt.Sprintf("uneven: partition %d alone holds %d objects, more than a fair share (%d), and a partition's namespaces are never split: %s stays the busiest", busiest.Heaviest, busiest.HeaviestObjects, fair, busiest.Name)
	case !byWeight:
		return "uneven: the fleet places by count (a member places by count or is of a release that cannot place by weight), so partitions do not move by what they hold"
	default:
		return "uneven: placing by weight, partitions move once the busiest member has stayed above 1.1x the mean for --placement-weight-hold, or as new namespaces are dealt"
	}
}

// partitionsHolding counts the running members' partitions that hold
// objects, each counted once (mid-handover two members may list one).
func (s FleetStatus) partitionsHolding() int {
	holding := map[int]bool{}
	for _, m := range s.Members {
		if m.Health == MemberExpired {
			continue
		}
		for _, p := range m.Partitions {
			if w, ok := m.weights[p]; ok && w > 0 {
				holding[p] = true
			}
		}
	}
	return len(holding)
}
