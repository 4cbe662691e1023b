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
