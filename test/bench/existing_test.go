package main

import "testing"

func TestBusiestNamespaceCount(t *testing.T) {
	partition := map[string]int{"a": 0, "b": 0, "c": 1, "d": 2, "e": 3}
	of := func(ns string) int { return partition[ns] }
	for _, tc := range []struct {
		name       string
		namespaces []string
		owner      map[int]string
		want       int
	}{
		{"two namespaces in one partition count twice", []string{"a", "b", "c"}, map[int]string{0: "x", 1: "y"}, 2},
		{"partitions of one owner add up", []string{"a", "c", "d"}, map[int]string{0: "x", 1: "x", 2: "y"}, 2},
		{"a partition nobody runs counts for nobody", []string{"a", "e"}, map[int]string{0: "x"}, 1},
		{"no owner at all", []string{"a"}, map[int]string{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := busiestNamespaceCount(tc.namespaces, tc.owner, of); got != tc.want {
				t.Errorf("busiestNamespaceCount = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestNeighbourCount(t *testing.T) {
	partition := map[string]int{"hot": 0, "a": 0, "b": 1, "c": 2, "d": 3}
	of := func(ns string) int { return partition[ns] }
	for _, tc := range []struct {
		name  string
		owner map[int]string
		want  int
	}{
		{"a tenant in the busy partition and one in another of its owner's", map[int]string{0: "x", 1: "x", 2: "y", 3: "y"}, 2},
		{"no other tenant on the busy owner but its partition's", map[int]string{0: "x", 1: "y", 2: "y", 3: "z"}, 1},
		{"the busy partition runs nowhere", map[int]string{1: "x", 2: "x"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := neighbourCount("hot", []string{"a", "b", "c", "d"}, tc.owner, of); got != tc.want {
				t.Errorf("neighbourCount = %d, want %d", got, tc.want)
			}
		})
	}
}
