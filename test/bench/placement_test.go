package main

import (
	"math/rand"
	"testing"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

func TestZipfSizes(t *testing.T) {
	sizes := zipfSizes(100, 2000, 1.2, rand.New(rand.NewSource(1)))
	total, largest := 0, 0
	for _, n := range sizes {
		total += n
		largest = max(largest, n)
	}
	if len(sizes) != 100 || largest != 2000 || total < 6000 || total > 9000 {
		t.Errorf("100 Zipf sizes: %d namespaces, largest %d, total %d; want 100, 2000, about 7,400", len(sizes), largest, total)
	}
	if again := zipfSizes(100, 2000, 1.2, rand.New(rand.NewSource(1))); again["skew-000"] != sizes["skew-000"] {
		t.Errorf("the sizes differ for one seed")
	}
}

// TestBenchRing: the ring the bench places namespaces by follows the
// fleet's --partitions and --namespace-hash, and is the replicas' default
// otherwise.
func TestBenchRing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fleetArgs  []string
		partitions int
		hash       string
	}{
		{"no flags", nil, shard.DefaultRingConfig.Partitions, shard.DefaultRingConfig.NamespaceHash},
		{"other flags", []string{"--placement-by-weight=false"}, shard.DefaultRingConfig.Partitions, shard.DefaultRingConfig.NamespaceHash},
		{"more partitions", []string{"--partitions=256"}, 256, shard.DefaultRingConfig.NamespaceHash},
		{"fnv", []string{"--namespace-hash=fnv", "--partitions=128"}, 128, shard.HashFNV},
		{"not a number", []string{"--partitions=many"}, shard.DefaultRingConfig.Partitions, shard.DefaultRingConfig.NamespaceHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring := ringOf(tc.fleetArgs)
			if ring.Partitions != tc.partitions || ring.NamespaceHash != tc.hash {
				t.Errorf("ring: %d partitions by %s, want %d by %s", ring.Partitions, ring.NamespaceHash, tc.partitions, tc.hash)
			}
			if probes := probeNamespaces(ring); len(probes) != tc.partitions {
				t.Errorf("%d probe namespaces, want one per partition (%d)", len(probes), tc.partitions)
			}
		})
	}
}
