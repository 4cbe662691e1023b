package main

import (
	"math/rand"
	"testing"
)

func TestFewestMoves(t *testing.T) {
	for _, tc := range []struct {
		name      string
		owners    map[int]string
		weights   map[int]uint64
		colocated string
		want      int
	}{
		{"even", map[int]string{0: "a", 1: "b"}, map[int]uint64{0: 10, 1: 10}, "", 0},
		{"one heavy member sheds its heaviest first", map[int]string{0: "a", 1: "a", 2: "a", 3: "b"}, map[int]uint64{0: 50, 1: 5, 2: 5, 3: 0}, "", 1},
		{"many light partitions", map[int]string{0: "a", 1: "a", 2: "a", 3: "a", 4: "b"}, map[int]uint64{0: 10, 1: 10, 2: 10, 3: 10, 4: 0}, "", 2},
		{"the heaviest partition alone is the bound", map[int]string{0: "a", 1: "a", 2: "b"}, map[int]uint64{0: 100, 1: 10, 2: 1}, "", 1},
		{"nothing owned", map[int]string{}, map[int]uint64{}, "", 0},
		// a 60, b 40, the colocated b carries 25 more: mean 62.5, limit 68.75.
		{"the colocated owner's half share counts", map[int]string{0: "a", 1: "b", 2: "b"}, map[int]uint64{0: 60, 1: 20, 2: 20}, "b", 0},
		// b 80 + 50 = 130 against a limit of 68.75: two of its 20s go.
		{"the colocated owner sheds", map[int]string{0: "a", 1: "b", 2: "b", 3: "b", 4: "b"}, map[int]uint64{0: 20, 1: 20, 2: 20, 3: 20, 4: 20}, "b", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fewestMoves(tc.owners, tc.weights, tc.colocated, 1.1); got != tc.want {
				t.Errorf("fewestMoves = %d, want %d", got, tc.want)
			}
		})
	}
}

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
