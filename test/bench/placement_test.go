package main

import (
	"math/rand"
	"testing"
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
