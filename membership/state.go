package membership

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Labels and annotations on a member's Lease.
const (
	// FleetLabel carries the fleet name; the member set is every Lease in the
	// fleet namespace with this label set to the fleet's name.
	FleetLabel = "fleet-controller-manager.io/fleet"
	// StateAnnotation holds the member's published State as JSON.
	StateAnnotation = "fleet-controller-manager.io/state"
)

// StateVersion is the newest encoding of State, the one a member writes
// when every member it observes reads it (Member.writeVersion).
//
//   - Version 1 lists every running piece by name.
//
//   - Version 2 writes the partitions among them ("partition/N") as a
//     bitmap, field "parts": base64url without padding, bit N%8 of byte N/8.
//     A replica running a third of --partitions=1024 writes a state of
//     256 bytes at every renewal instead of 5,528.
//
//   - Version 3 adds the weights of the running partitions, field "w",
//     and the weight table the member places by, field "table"
//     (weights.go).
//
//   - Version 4 adds the running partitions still loading into the
//     member's cache, field "loading": partition number to the Unix
//     second its load began (loading.go), so that `status` names a load
//     that does not finish.
//
//   - Version 5 adds the weights of the young namespaces the member runs,
//     field "young" (young.go), so that a keeper deals a busy new tenant's
//     neighbours off its replica within seconds.
//
// A member refuses a state of a version it does not read rather than
// guess at its meaning: a version 1 reader would take a version 2 state
// for one running no partition.
const StateVersion = 5

// StateVersions are the encodings this release reads, oldest first.
var StateVersions = []int{1, 2, 3, 4, 5}

// PartitionPrefix begins the name of every partition piece (package
// shard names them); version 2 of the state writes those pieces as a
// bitmap.
const PartitionPrefix = "partition/"

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
	// before a piece starts, removed after the runner reported it ended.
	Running []string `json:"running,omitempty"`
	// Joining is set while a process (or one whose authority ran out) has
	// not yet seen every member that may act: it takes part in views but
	// owns nothing yet.
	Joining bool `json:"joining,omitempty"`
	// Leaving is set on the last write before a graceful leave: nothing
	// runs and the Lease is about to be deleted.
	Leaving bool `json:"leaving,omitempty"`
	// Weights: what each running partition holds (objects in the owned
	// cache), as quantized on the wire (version 3, weights.go); a
	// partition not measured yet has none.
	Weights map[int]uint64 `json:"-"`
	// Table is the partition weight table this member places by (version
	// 3): the view's first member keeps it, the others copy it, so that
	// the next first member starts from it (package shard).
	Table string `json:"table,omitempty"`
	// Loading: the running partitions whose objects are still being
	// loaded into this member's cache (their controllers do not act on
	// them yet), each with the Unix second its load began (version 4).
	Loading map[int]int64 `json:"loading,omitempty"`
	// Young: what each young namespace this member runs holds, as
	// quantized on the wire (version 5, young.go).
	Young map[string]uint64 `json:"-"`
}

var (
	incarnationRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	viewRE        = regexp.MustCompile(`^[0-9a-f]{0,64}$`)
	memberRE      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	pieceRE       = regexp.MustCompile(`^[a-z]+/[a-z0-9][-a-z0-9.]*$`)
	tableRE       = regexp.MustCompile(`^[A-Za-z0-9_-]*$`)
)

// stateWire is State as written in the annotation: version 2 moves the
// partitions out of Running into Parts.
type stateWire struct {
	State
	Parts   string          `json:"parts,omitempty"`
	Weights string          `json:"w,omitempty"`
	Young   map[string]byte `json:"young,omitempty"`
}

// ParseState decodes and validates an annotation value of any version
// this release reads. It never panics and rejects anything it does not
// fully understand: unknown versions and fields, oversize values,
// malformed names.
func ParseState(value string) (State, error) {
	return parseState(value, StateVersions)
}

// parseState is ParseState for a reader of versions only (a member reads
// what its Supports says, so that a replica playing an older release in
// an upgrade test refuses what that release refuses).
func parseState(value string, versions []int) (State, error) {
	var w stateWire
	if len(value) > maxStateBytes {
		return State{}, fmt.Errorf("state annotation is %d bytes, more than %d", len(value), maxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return State{}, fmt.Errorf("decoding state annotation: %w", err)
	}
	if dec.More() {
		return State{}, errors.New("decoding state annotation: trailing data")
	}
	if !slices.Contains(versions, w.Version) {
		return State{}, &unreadVersionError{version: w.Version, reads: versions}
	}
	s := w.State
	if w.Parts != "" {
		if s.Version < 2 {
			return State{}, fmt.Errorf("state version %d with a partition bitmap", s.Version)
		}
		parts, err := decodeParts(w.Parts)
		if err != nil {
			return State{}, err
		}
		s.Running = append(s.Running, parts...)
	}
	if w.Weights != "" {
		if s.Version < 3 {
			return State{}, fmt.Errorf("state version %d with partition weights", s.Version)
		}
		weights, err := decodeWeights(w.Weights, runningPartitions(s.Running))
		if err != nil {
			return State{}, err
		}
		s.Weights = weights
	}
	young, err := decodeYoung(w.Young)
	if err != nil {
		return State{}, err
	}
	s.Young = young
	if err := s.Validate(); err != nil {
		return State{}, err
	}
	return s, nil
}

// unreadVersionError: a state of a version the reader does not read (a
// member of a newer release, or one that has not yet seen this reader).
type unreadVersionError struct {
	version int
	reads   []int
}

func (e *unreadVersionError) Error() string {
	return fmt.Sprintf("state version %d, this replica reads %v", e.version, e.reads)
}

// Validate checks every field of s against what a member can publish.
func (s State) Validate() error {
	if !slices.Contains(StateVersions, s.Version) {
		return fmt.Errorf("state version %d, this release reads %v", s.Version, StateVersions)
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
	return s.validatePartitionFields(seen)
}

// validatePartitionFields checks the fields about running partitions
// (seen: the running pieces) against them and against s's version.
func (s State) validatePartitionFields(seen map[string]bool) error {
	if len(s.Table) > base64.RawURLEncoding.EncodedLen(maxRunning) || !tableRE.MatchString(s.Table) {
		return fmt.Errorf("invalid weight table of %d characters", len(s.Table))
	}
	if s.Table != "" && s.Version < 3 {
		return fmt.Errorf("state version %d with a weight table", s.Version)
	}
	for p := range s.Weights {
		if !seen[PartitionPrefix+strconv.Itoa(p)] {
			return fmt.Errorf("a weight for partition %d, which is not running", p)
		}
	}
	if err := s.validateYoung(); err != nil {
		return err
	}
	if len(s.Loading) > 0 && s.Version < 4 {
		return fmt.Errorf("state version %d with loading partitions", s.Version)
	}
	for p, since := range s.Loading {
		if !seen[PartitionPrefix+strconv.Itoa(p)] {
			return fmt.Errorf("partition %d loading, which is not running", p)
		}
		if since <= 0 {
			return fmt.Errorf("partition %d loading since %d, not a time", p, since)
		}
	}
	return nil
}

// Encode renders s as an annotation value of the newest version.
func (s State) Encode() (string, error) { return s.EncodeVersion(StateVersion) }

// EncodeVersion renders s as an annotation value of version, with Running
// sorted so equal states encode equally.
func (s State) EncodeVersion(version int) (string, error) {
	s.Version = version
	s.Running = append([]string(nil), s.Running...)
	sort.Strings(s.Running)
	if version < 3 {
		// What an older release cannot read: it places by count.
		s.Weights, s.Table = nil, ""
	}
	if version < 4 {
		s.Loading = nil
	}
	if version < 5 {
		s.Young = nil
	}
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("refusing to publish an invalid state: %w", err)
	}
	w := stateWire{State: s}
	if version >= 2 {
		w.Running, w.Parts = encodeParts(s.Running)
	}
	if version >= 3 {
		w.Weights = encodeWeights(runningPartitions(s.Running), s.Weights)
	}
	w.Young = encodeYoung(s.Young)
	data, err := json.Marshal(w)
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

// encodeParts splits running into the partitions, as a bitmap, and the
// other pieces.
func encodeParts(running []string) (others []string, parts string) {
	var bitmap []byte
	for _, p := range running {
		n, ok := partitionNumber(p)
		if !ok {
			others = append(others, p)
			continue
		}
		for len(bitmap) <= n/8 {
			bitmap = append(bitmap, 0)
		}
		bitmap[n/8] |= 1 << (n % 8)
	}
	if len(bitmap) == 0 {
		return others, ""
	}
	return others, base64.RawURLEncoding.EncodeToString(bitmap)
}

// decodeParts reads a partition bitmap back into piece names.
func decodeParts(parts string) ([]string, error) {
	if len(parts) > base64.RawURLEncoding.EncodedLen(maxRunning/8) {
		return nil, fmt.Errorf("partition bitmap of %d characters, more than %d partitions", len(parts), maxRunning)
	}
	bitmap, err := base64.RawURLEncoding.DecodeString(parts)
	if err != nil {
		return nil, fmt.Errorf("decoding partition bitmap: %w", err)
	}
	var out []string
	for i, b := range bitmap {
		for bit := range 8 {
			if b&(1<<bit) != 0 {
				out = append(out, PartitionPrefix+strconv.Itoa(i*8+bit))
			}
		}
	}
	return out, nil
}

// partitionNumber reads "partition/N" (N in canonical decimal, below
// maxRunning); anything else is written by name.
func partitionNumber(piece string) (int, bool) {
	digits, ok := strings.CutPrefix(piece, PartitionPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || n >= maxRunning || strconv.Itoa(n) != digits {
		return 0, false
	}
	return n, true
}
