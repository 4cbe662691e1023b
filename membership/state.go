package membership

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
)

// Labels and annotations on a member's Lease.
const (
	// FleetLabel carries the fleet name; the member set is every Lease in the
	// fleet namespace with this label set to the fleet's name.
	FleetLabel = "fleet-controller-manager.io/fleet"
	// StateAnnotation holds the member's published State as JSON.
	StateAnnotation = "fleet-controller-manager.io/state"
)

// StateVersion is the encoding version of State; a member refuses states of
// another version rather than guess at their meaning.
const StateVersion = 1

// Bounds on what a State may hold. The apiserver allows 256 KiB of
// annotations in all; anything near that is not one of ours.
const (
	maxStateBytes   = 64 << 10
	maxAcks         = 1024
	maxRunning      = 8192
	maxPieceLength  = 256
	maxMemberLength = 253
)

// Ack says which publication of a member this member has seen: the member's
// incarnation and its epoch.
type Ack struct {
	Incarnation string `json:"inc"`
	Epoch       uint64 `json:"epoch"`
}

// State is what a member publishes in its Lease. The handover protocol (see
// package shard) reads only these fields.
type State struct {
	Version int `json:"v"`
	// Incarnation is random per process start; Seq counts the writes of one
	// incarnation, so an observer can drop a state older than one it has seen.
	Incarnation string `json:"inc"`
	Seq         uint64 `json:"seq"`
	// Epoch counts the views this incarnation has applied; View is the
	// fingerprint of the last applied one (ring configuration and members).
	Epoch uint64 `json:"epoch"`
	View  string `json:"view"`
	// Acks maps each other member to the publication of it that this member
	// has seen.
	Acks map[string]Ack `json:"acks,omitempty"`
	// Running lists every piece this member may be running: published
	// before a piece starts, removed after its Run returned.
	Running []string `json:"running,omitempty"`
	// Joining is set by a new process during its first lease duration: it
	// takes part in views but owns nothing yet.
	Joining bool `json:"joining,omitempty"`
	// Leaving is set on the last write before a graceful leave: nothing
	// runs and the Lease is about to be deleted.
	Leaving bool `json:"leaving,omitempty"`
}

var (
	incarnationRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	viewRE        = regexp.MustCompile(`^[0-9a-f]{0,64}$`)
	memberRE      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	pieceRE       = regexp.MustCompile(`^[a-z]+/[a-z0-9][-a-z0-9.]*$`)
)

// ParseState decodes and validates an annotation value. It never panics and
// rejects anything it does not fully understand: unknown versions and
// fields, oversize values, malformed names.
func ParseState(value string) (State, error) {
	var s State
	if len(value) > maxStateBytes {
		return s, fmt.Errorf("state annotation is %d bytes, more than %d", len(value), maxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("decoding state annotation: %w", err)
	}
	if dec.More() {
		return State{}, errors.New("decoding state annotation: trailing data")
	}
	if err := s.Validate(); err != nil {
		return State{}, err
	}
	return s, nil
}

// Validate checks every field of s against what a member can publish.
func (s State) Validate() error {
	if s.Version != StateVersion {
		return fmt.Errorf("state version %d, want %d", s.Version, StateVersion)
	}
	if !incarnationRE.MatchString(s.Incarnation) {
		return fmt.Errorf("invalid incarnation %q", s.Incarnation)
	}
	if !viewRE.MatchString(s.View) {
		return fmt.Errorf("invalid view %q", s.View)
	}
	if len(s.Acks) > maxAcks {
		return fmt.Errorf("%d acks, more than %d", len(s.Acks), maxAcks)
	}
	for m, a := range s.Acks {
		if len(m) > maxMemberLength || !memberRE.MatchString(m) {
			return fmt.Errorf("invalid member name %q in acks", m)
		}
		if !incarnationRE.MatchString(a.Incarnation) {
			return fmt.Errorf("invalid incarnation %q in ack of %q", a.Incarnation, m)
		}
	}
	if len(s.Running) > maxRunning {
		return fmt.Errorf("%d running pieces, more than %d", len(s.Running), maxRunning)
	}
	seen := make(map[string]bool, len(s.Running))
	for _, p := range s.Running {
		if len(p) > maxPieceLength || !pieceRE.MatchString(p) {
			return fmt.Errorf("invalid piece %q", p)
		}
		if seen[p] {
			return fmt.Errorf("piece %q listed twice", p)
		}
		seen[p] = true
	}
	if s.Leaving && len(s.Running) > 0 {
		return errors.New("leaving with pieces still running")
	}
	if s.Joining && len(s.Running) > 0 {
		return errors.New("joining with pieces running")
	}
	return nil
}

// Encode renders s as an annotation value, with Running sorted so equal
// states encode equally.
func (s State) Encode() (string, error) {
	s.Version = StateVersion
	s.Running = append([]string(nil), s.Running...)
	sort.Strings(s.Running)
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("refusing to publish an invalid state: %w", err)
	}
	data, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding state: %w", err)
	}
	if len(data) > maxStateBytes {
		return "", fmt.Errorf("state is %d bytes, more than %d", len(data), maxStateBytes)
	}
	return string(data), nil
}

// Runs reports whether s lists piece as running.
func (s State) Runs(piece string) bool {
	for _, p := range s.Running {
		if p == piece {
			return true
		}
	}
	return false
}
