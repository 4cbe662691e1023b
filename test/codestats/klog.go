package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"io"
	"sort"
	"strings"
)

// klogLogging are klog's package-level functions that write a log entry
// (k8s.io/klog/v2 v2.140). Helpers such as FromContext, NewContext,
// LoggerWithName, LoggerWithValues, Background, TODO, KObj, KRef, Flush,
// FlushAndExit, InitFlags and SetOutput do not log and are not counted.
var klogLogging = setOf(
	"Info", "InfoDepth", "Infof", "InfofDepth", "Infoln", "InfolnDepth", "InfoS", "InfoSDepth",
	"Warning", "WarningDepth", "Warningf", "WarningfDepth", "Warningln", "WarninglnDepth",
	"Error", "ErrorDepth", "Errorf", "ErrorfDepth", "Errorln", "ErrorlnDepth", "ErrorS", "ErrorSDepth",
	"Fatal", "FatalDepth", "Fatalf", "FatalfDepth", "Fatalln", "FatallnDepth",
	"Exit", "ExitDepth", "Exitf", "ExitfDepth", "Exitln", "ExitlnDepth",
)

// klogVerboseLogging are the methods of klog.Verbose (klog.V(n)) that write
// a log entry; Enabled does not.
var klogVerboseLogging = setOf(
	"Info", "InfoDepth", "Infof", "InfofDepth", "Infoln", "InfolnDepth", "InfoS", "InfoSDepth",
	"Error", "ErrorS",
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// klogName is the name f imports k8s.io/klog/v2 under, "" if it does not.
func klogName(f *ast.File) string {
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, "`\"")
		if path != "k8s.io/klog/v2" && path != "k8s.io/klog" {
			continue
		}
		if imp.Name == nil {
			return "klog"
		}
		if imp.Name.Name != "_" && imp.Name.Name != "." {
			return imp.Name.Name
		}
	}
	return ""
}

// globalKlogCalls lists f's calls to klog's global logging functions, as
// "file:line klog.X" or "file:line klog.V(...).X".
func globalKlogCalls(fset *token.FileSet, rel string, f *ast.File) []string {
	name := klogName(f)
	if name == "" {
		return nil
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if what := klogLoggingCall(call, name); what != "" {
			out = append(out, fmt.Sprintf("%s:%d %s", rel, fset.Position(call.Pos()).Line, what))
		}
		return true
	})
	return out
}

// klogLoggingCall tells whether call logs through klog's global logger:
// pkg.InfoS(...) and the like, or pkg.V(n).InfoS(...) and the like, where
// pkg is the name klog is imported under.
func klogLoggingCall(call *ast.CallExpr, pkg string) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if isIdent(sel.X, pkg) && klogLogging[sel.Sel.Name] {
		return "klog." + sel.Sel.Name
	}
	inner, ok := sel.X.(*ast.CallExpr)
	if !ok || !klogVerboseLogging[sel.Sel.Name] {
		return ""
	}
	if v, ok := inner.Fun.(*ast.SelectorExpr); ok && isIdent(v.X, pkg) && (v.Sel.Name == "V" || v.Sel.Name == "VDepth") {
		return "klog." + v.Sel.Name + "(...)." + sel.Sel.Name
	}
	return ""
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// printKlog prints one line per product package with its count of global
// klog calls, and with verbose each call's file:line under it.
func (s *stats) printKlog(w io.Writer, verbose bool) {
	var pkgs []string
	total := 0
	for pkg, calls := range s.klogCalls {
		pkgs = append(pkgs, pkg)
		total += len(calls)
	}
	sort.Strings(pkgs)
	fmt.Fprintf(w, "== global klog logging calls per product package, non-test files (klog.InfoS, klog.V(n).InfoS ...; -v lists them): %d\n", total)
	for _, pkg := range pkgs {
		fmt.Fprintf(w, "   %-40s %d\n", pkg, len(s.klogCalls[pkg]))
		if verbose {
			for _, c := range s.klogCalls[pkg] {
				fmt.Fprintf(w, "      %s\n", c)
			}
		}
	}
	fmt.Fprintf(w, "   %-40s %d\n", "total", total)
}
