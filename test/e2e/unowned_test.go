//go:build e2e

package e2e

import (
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// unownedGap is the longest time one piece ran on no replica.
type unownedGap struct {
	piece  string
	length time.Duration
}

// readPieceRuns is every piece's runs from the logs of replicas (name to
// log file).
func readPieceRuns(t *testing.T, logs map[string]string) map[string][]pieceRun {
	t.Helper()
	runs := map[string][]pieceRun{}
	for replica, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := parsePieceRuns(replica, strings.Split(string(data), "\n"), time.Now().Year(), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for piece, rs := range parsed {
			runs[piece] = append(runs[piece], rs...)
		}
	}
	return runs
}

// longestUnowned is the longest time within [from, to] that a piece of
// runs ran on no replica.
func longestUnowned(runs map[string][]pieceRun, from, to time.Time) unownedGap {
	var longest unownedGap
	for piece, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		covered := from
		for _, r := range rs {
			if r.end.Before(from) {
				continue
			}
			if r.start.After(to) {
				break
			}
			if gap := r.start.Sub(covered); gap > longest.length {
				longest = unownedGap{piece: piece, length: gap}
			}
			if r.end.After(covered) {
				covered = r.end
			}
		}
		if covered.Before(to) {
			if gap := to.Sub(covered); gap > longest.length {
				longest = unownedGap{piece: piece + " (not running at the end)", length: gap}
			}
		}
	}
	return longest
}
