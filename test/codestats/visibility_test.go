package main

import (
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// TestVisibilityWrites: a call or method value of a visibility method on
// a scope is a write, on a reporter an input, by the enclosing method's
// type (or the package, for a function); the same name on anything else
// is neither.
func TestVisibilityWrites(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // "writer call"
	}{
		{name: "a method's call", src: "func (t *table) lose(p int) { t.scope.Lose(p) }", want: []string{"pkg.table t.scope.Lose"}},
		{name: "a method value", src: "func (r Runtime) wire() { r.deliver = r.table.scope.Gain }", want: []string{"pkg.Runtime r.table.scope.Gain"}},
		{name: "a function reporting", src: "func report(reporter R) { reporter.Held(nil) }", want: []string{"pkg reporter.Held (input)"}},
		{name: "another receiver", src: "func (w *ring) step() { w.members.Gain(1) }"},
		{name: "another method", src: "func (t *table) own(p int) { t.scope.Owns(p) }"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "a.go", "package pkg\n\n"+tc.src+"\n", 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range visibilityWrites(fset, "pkg/a.go", "pkg", f) {
				line := w.writer + " " + w.call
				if w.report {
					line += " (input)"
				}
				got = append(got, line)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
