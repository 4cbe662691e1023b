package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimits plants code past each limit in a repository of its own and
// checks that the check names the limit and the offender, and that code
// just within every limit passes.
func TestLimits(t *testing.T) {
	body := func(lines int) string {
		// A function of exactly lines lines, its braces included.
		return "func planted() {\n" + strings.Repeat("\t_ = 1\n", lines-2) + "}\n"
	}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		design int
		want   string // "" : every limit met
	}{
		{name: "within every limit", files: map[string]string{"pkg/a.go": "package pkg\n\n" + body(60)}, design: limitDesignLines},
		{name: "a 61-line function", files: map[string]string{"pkg/a.go": "package pkg\n\n" + body(61)}, design: 10,
			want: "product functions over 60 lines: 1, limit 0\n   pkg/a.go:3 planted (61 lines)"},
		{name: "a 501-line file", files: map[string]string{"pkg/a.go": "package pkg\n" + strings.Repeat("\n", 499) + "var x = 1\n"}, design: 10,
			want: "product files over 500 lines: 1, limit 0\n   pkg/a.go (501 lines)"},
		{name: "a global klog call", files: map[string]string{"pkg/a.go": "package pkg\n\nimport \"k8s.io/klog/v2\"\n\nfunc f() { klog.InfoS(\"x\") }\n"}, design: 10,
			want: "global klog logging calls in the product: 1, limit 0"},
		{name: "test code in the product", files: map[string]string{"pkg/a.go": "package pkg\n\nimport _ \"example.com/m/test/helpers\"\n"}, design: 10,
			want: "product files importing the module's test/ tree: 1, limit 0\n   pkg/a.go -> example.com/m/test/helpers"},
		{name: "a type defined twice", files: map[string]string{"pkg/a.go": "package pkg\n\ntype Twin int\n", "other/b.go": "package other\n\ntype Twin int\n"}, design: 10,
			want: "type names defined in more than one package: 1, limit 0\n   Twin: other, pkg"},
		{name: "too many benchmark files", files: benchFiles(limitBenchmarkFiles + 1), design: 10,
			want: fmt.Sprintf("files under docs/benchmarks: %d, limit %d", limitBenchmarkFiles+1, limitBenchmarkFiles)},
		{name: "a long design.md", files: map[string]string{"pkg/a.go": "package pkg\n"}, design: limitDesignLines + 1,
			want: fmt.Sprintf("docs/design.md: %d lines, limit %d", limitDesignLines+1, limitDesignLines)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"go.mod": "module example.com/m\n", "docs/design.md": strings.Repeat("line\n", tc.design)}
			for name, content := range tc.files {
				files[name] = content
			}
			for name, content := range files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := collect(root)
			if err != nil {
				t.Fatal(err)
			}
			breaches, err := s.breaches(root)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(breaches, "\n")
			if tc.want == "" && got != "" {
				t.Errorf("breaches %q, want none", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("breaches %q, want %q", got, tc.want)
			}
		})
	}
}

// benchFiles is a repository's pkg/a.go and n files under docs/benchmarks.
func benchFiles(n int) map[string]string {
	files := map[string]string{"pkg/a.go": "package pkg\n"}
	for i := range n {
		files[fmt.Sprintf("docs/benchmarks/run-%d/README.md", i)] = "x\n"
	}
	return files
}
