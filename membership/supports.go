package membership

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// SupportsAnnotation holds what a member can run beside others, as JSON
// (Supports). It is its own annotation, not a field of State: a release
// from before it parses State strictly and would refuse a state with a new
// field, and it ignores annotations it does not know.
const SupportsAnnotation = "fleet-controller-manager.io/supports"

// Supports is what a member can compute and read: the placements (see
// package shard) and the State versions. The fleet uses what every
// participant supports, so replicas of two releases run side by side
// during a rolling upgrade. Parsing keeps unknown fields and names: a
// newer release may add both.
type Supports struct {
	Placements    []string `json:"placements,omitempty"`
	StateVersions []int    `json:"stateVersions,omitempty"`
}

// Bounds on a Supports annotation; anything past them is not one of ours.
const (
	maxSupportsBytes = 4 << 10
	maxSupported     = 32
)

var placementRE = regexp.MustCompile(`^[a-z0-9][-a-z0-9./]{0,127}$`)

// ParseSupports decodes a SupportsAnnotation value. An empty value is a
// member from before the annotation: it supports nothing it says, and the
// reader applies its own defaults for such a member.
func ParseSupports(value string) (Supports, error) {
	var s Supports
	if value == "" {
		return s, nil
	}
	if len(value) > maxSupportsBytes {
		return Supports{}, fmt.Errorf("supports annotation is %d bytes, more than %d", len(value), maxSupportsBytes)
	}
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return Supports{}, fmt.Errorf("decoding supports annotation: %w", err)
	}
	if len(s.Placements) > maxSupported || len(s.StateVersions) > maxSupported {
		return Supports{}, fmt.Errorf("supports annotation lists %d placements and %d state versions, more than %d", len(s.Placements), len(s.StateVersions), maxSupported)
	}
	for _, p := range s.Placements {
		if !placementRE.MatchString(p) {
			return Supports{}, fmt.Errorf("invalid placement %q", p)
		}
	}
	return s, nil
}

// Encode renders s as an annotation value.
func (s Supports) Encode() (string, error) {
	data, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding supports: %w", err)
	}
	if _, err := ParseSupports(string(data)); err != nil {
		return "", fmt.Errorf("refusing to publish: %w", err)
	}
	return string(data), nil
}
