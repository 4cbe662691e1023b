package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"io"
	"sort"
	"strings"
)

// Who writes what a replica's partition controllers see. A Scope shows a
// handler an object when its partition is owned (Gain, Lose) and, where
// the scope is gated, its namespace is held (Held, Dropped); each writer
// of one of them is a party whose order against the others must be
// argued. The partition table is meant to be the one writer; what reports
// to it (a HeldReporter's Held and Dropped) is listed apart, as inputs.

// visibilityMethods are the Scope's methods that change what its
// handlers see, and the HeldReporter's that call them.
var visibilityMethods = map[string]bool{"Gain": true, "Lose": true, "Held": true, "Dropped": true}

// visibilityWrite is one call (or method value) of a visibility method
// in the product: "package.Type" of the function it is in, and the call.
type visibilityWrite struct {
	writer, at, call string
	// report: a call on a HeldReporter, an input of the writer.
	report bool
}

// visibilityWrites finds the product's calls of a Scope's visibility
// methods: a selector of one of visibilityMethods on an expression
// naming a scope or the owned cache's reporter. Without type-checking a
// method of that name on something else would count too; -v lists each.
func visibilityWrites(fset *token.FileSet, rel, pkg string, f *ast.File) []visibilityWrite {
	var out []visibilityWrite
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		writer := pkg
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			writer += "." + receiverType(fn.Recv.List[0].Type)
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !visibilityMethods[sel.Sel.Name] {
				return true
			}
			x := strings.ToLower(exprText(sel.X))
			if !strings.HasSuffix(x, "scope") && !strings.HasSuffix(x, "reporter") {
				return true
			}
			out = append(out, visibilityWrite{writer: writer, at: fmt.Sprintf("%s:%d", rel, fset.Position(sel.Pos()).Line), call: exprText(sel.X) + "." + sel.Sel.Name, report: strings.HasSuffix(x, "reporter")})
			return true
		})
	}
	return out
}

// receiverType is the name of a method receiver's type.
func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.IndexExpr:
		return receiverType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// exprText is a selector chain as written ("t.scope"), "?" for anything
// else.
func exprText(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return exprText(t.X) + "." + t.Sel.Name
	}
	return "?"
}

// printVisibilityWriters prints the writers, each with its calls; with
// verbose, where each is.
func printVisibilityWriters(w io.Writer, writes []visibilityWrite, verbose bool) {
	byWriter, byReporter := map[string][]string{}, map[string][]string{}
	for _, v := range writes {
		if v.report {
			byReporter[v.writer] = append(byReporter[v.writer], v.call)
			continue
		}
		line := v.call
		if verbose {
			line += " (" + v.at + ")"
		}
		byWriter[v.writer] = append(byWriter[v.writer], line)
	}
	section(w, "writers of what the partition controllers see (Scope: Gain, Lose, Held, Dropped)", len(byWriter), callLines(byWriter))
	section(w, "their inputs (HeldReporter: Held, Dropped)", len(byReporter), callLines(byReporter))
}

// callLines is one sorted line per caller, with its calls.
func callLines(byCaller map[string][]string) []string {
	var lines []string
	for caller, calls := range byCaller {
		sort.Strings(calls)
		lines = append(lines, caller+": "+strings.Join(calls, ", "))
	}
	sort.Strings(lines)
	return lines
}
