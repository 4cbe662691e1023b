package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		input  string
		failed bool
		tests  int
		report []string
	}{
		{"passing package", `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":2.5}
{"Action":"pass","Package":"p","Test":"TestA/sub","Elapsed":1}
{"Action":"pass","Package":"p","Test":"TestB","Elapsed":0.1}
{"Action":"pass","Package":"p","Elapsed":2.7}
`, false, 2, []string{"2.5s  pass p.TestA", "2.7s  pass p", "2 passed, 0 failed, 0 skipped"}},
		{"tests in lanes", `{"Action":"output","Package":"p","Test":"TestA","Output":"    lanes_test.go:70: lane: 2 of 4 shares after waiting 1m0s\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":70}
{"Action":"output","Package":"p","Test":"TestB/sides/fleet","Output":"    lanes_test.go:70: lane: 1 of 4 shares after waiting 3s\n"}
{"Action":"pass","Package":"p","Test":"TestB/sides/fleet","Elapsed":23}
{"Action":"pass","Package":"p","Test":"TestB/sides","Elapsed":25}
{"Action":"pass","Package":"p","Test":"TestB","Elapsed":25}
{"Action":"pass","Package":"p","Elapsed":80}
`, false, 2, []string{"20s pass p.TestB/sides/fleet (after 3s waiting for a lane)", "10s pass p.TestA (after 1m0s waiting for a lane)"}},
		{"a failing test", `{"Action":"fail","Package":"p","Test":"TestA","Elapsed":1}
{"Action":"fail","Package":"p","Elapsed":1}
`, true, 1, []string{"1 fail", "0 passed, 1 failed, 0 skipped"}},
		{"a build error", "# p\np/x.go:1: syntax error\nFAIL\tp [build failed]\n", false, 0, []string{"syntax error", "0 passed, 0 failed"}},
		{"a build error as events", `{"ImportPath":"p","Action":"build-output","Output":"p/x.go:1: syntax error\n"}
{"ImportPath":"p","Action":"build-fail"}
`, true, 0, []string{"syntax error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tests, packages, failed, err := summarize(strings.NewReader(tc.input), &out)
			if err != nil {
				t.Fatal(err)
			}
			report(&out, tests, packages, 10)
			if failed != tc.failed || len(tests) != tc.tests {
				t.Errorf("failed %v, %d tests; want %v, %d", failed, len(tests), tc.failed, tc.tests)
			}
			for _, want := range tc.report {
				if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), strings.Join(strings.Fields(want), " ")) {
					t.Errorf("the report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
