package membership

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
)

// The weights of the young namespaces a member runs, as version 5 of
// State writes them: a namespace created within the last minute brings
// its work with it, long before the partitions' weights (measured every
// 10 s) say so, and the member keeping the weight table deals young
// namespaces by their work to come (package shard). A member publishes
// the Pods each one's workloads want and do not have available yet
// (package controllers); members of releases before it published what
// each one held, which a keeper reads alike for the minute an upgrade
// mixes them: it only places, never decides who runs a piece twice.
//
// Field "young" maps each such namespace to its weight's code
// (WeightCode: 1 to 255, within 4.5%); it holds at most maxYoung, the
// heaviest (a keeper only needs to see the heavy ones: the others count
// as one namespace each). Twenty namespaces add about 400 bytes.

// maxYoung bounds the young namespaces one state names.
const maxYoung = 64

// namespaceRE is a namespace name (an RFC 1123 label).
var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// SetYoung sets the weights of the young namespaces this member runs, to
// be written with the next write of its state (a renewal at the latest),
// as the partitions' weights are.
func (m *Member) SetYoung(young map[string]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.young = young
}

// youngOfLocked is the set young namespaces' weights, the heaviest
// maxYoung of them. m.mu is held.
func (m *Member) youngOfLocked() map[string]uint64 {
	if len(m.young) == 0 {
		return nil
	}
	return heaviestYoung(m.young)
}

// heaviestYoung is young cut to its maxYoung heaviest (ties by name).
func heaviestYoung(young map[string]uint64) map[string]uint64 {
	if len(young) <= maxYoung {
		return maps.Clone(young)
	}
	names := slices.SortedFunc(maps.Keys(young), func(a, b string) int {
		return cmp.Or(cmp.Compare(young[b], young[a]), cmp.Compare(a, b))
	})
	out := make(map[string]uint64, maxYoung)
	for _, ns := range names[:maxYoung] {
		out[ns] = young[ns]
	}
	return out
}

// encodeYoung writes the codes of young's weights.
func encodeYoung(young map[string]uint64) map[string]byte {
	if len(young) == 0 {
		return nil
	}
	out := make(map[string]byte, len(young))
	for ns, w := range young {
		out[ns] = WeightCode(w)
	}
	return out
}

// decodeYoung reads field "young" back.
func decodeYoung(codes map[string]byte) (map[string]uint64, error) {
	if len(codes) == 0 {
		return nil, nil
	}
	out := make(map[string]uint64, len(codes))
	for ns, c := range codes {
		if c == 0 {
			return nil, fmt.Errorf("young namespace %q with weight code 0", ns)
		}
		out[ns] = WeightOfCode(c)
	}
	return out, nil
}

// validateYoung checks the young namespaces' weights against s's version.
func (s State) validateYoung() error {
	if len(s.Young) > 0 && s.Version < 5 {
		return fmt.Errorf("state version %d with young namespaces", s.Version)
	}
	if len(s.Young) > maxYoung {
		return fmt.Errorf("%d young namespaces, more than %d", len(s.Young), maxYoung)
	}
	for ns := range s.Young {
		if !namespaceRE.MatchString(ns) {
			return fmt.Errorf("invalid young namespace %q", ns)
		}
	}
	return nil
}
