package membership

import (
	"encoding/base64"
	"fmt"
	"math"
	"sort"
)

// The weights of the partitions a member runs, as version 3 of State
// writes them: what each partition holds, so that every member can see
// how the work is spread and a placement can even it out.
//
// Field "w" is base64url without padding, one byte per partition of the
// bitmap ("parts"), in ascending partition order. A byte is a code on a
// logarithmic scale: 0 says the partition is not measured yet, code c >= 1
// a weight of 2^((c-1)/8) - 1, within 4.5% of the measured value. A
// member running the default third of 64 partitions adds 30 bytes to its
// state; exact counts as decimal numbers would add 150.

// maxWeightCode is the largest code: about 2.8e9 objects.
const maxWeightCode = 255

// WeightCode is weight w's code (w >= 0), never 0.
func WeightCode(w uint64) byte {
	c := math.Round(8*math.Log2(1+float64(w))) + 1
	if c > maxWeightCode {
		return maxWeightCode
	}
	return byte(c)
}

// WeightOfCode is the weight code c stands for; c must not be 0.
func WeightOfCode(c byte) uint64 {
	return uint64(math.Round(math.Exp2(float64(c-1)/8) - 1))
}

// Quantized is w as its code reads back: what other members see of it.
func Quantized(w uint64) uint64 { return WeightOfCode(WeightCode(w)) }

// encodeWeights writes the codes of weights for partitions (ascending),
// "" when none of them is measured.
func encodeWeights(partitions []int, weights map[int]uint64) string {
	codes := make([]byte, len(partitions))
	measured := false
	for i, p := range partitions {
		if w, ok := weights[p]; ok {
			codes[i] = WeightCode(w)
			measured = true
		}
	}
	if !measured {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(codes)
}

// decodeWeights reads field "w" back against the partitions of the
// bitmap (ascending).
func decodeWeights(value string, partitions []int) (map[int]uint64, error) {
	codes, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return nil, fmt.Errorf("decoding partition weights: %w", err)
	}
	if len(codes) != len(partitions) {
		return nil, fmt.Errorf("%d partition weights for %d partitions", len(codes), len(partitions))
	}
	weights := map[int]uint64{}
	for i, c := range codes {
		if c != 0 {
			weights[partitions[i]] = WeightOfCode(c)
		}
	}
	return weights, nil
}

// runningPartitions are the partition numbers among running, ascending.
func runningPartitions(running []string) []int {
	var out []int
	for _, p := range running {
		if n, ok := partitionNumber(p); ok {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// SetWeights sets the weights of the partitions this member runs, to be
// written with the next write of its state (a renewal at the latest): a
// weight that changes costs no write of its own.
func (m *Member) SetWeights(weights map[int]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.weights = weights
}

// weightsOfLocked are the set weights of the partitions among running.
// m.mu is held.
func (m *Member) weightsOfLocked(running []string) map[int]uint64 {
	if len(m.weights) == 0 {
		return nil
	}
	out := map[int]uint64{}
	for _, p := range runningPartitions(running) {
		if w, ok := m.weights[p]; ok {
			out[p] = w
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
