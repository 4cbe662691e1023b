package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"io"
	"sort"
	"strings"
)

// home is where a piece of the partition state is expected to live: a
// field of a struct type of a package directory.
type home struct {
	pkg, typ, field string
	label           string // how a reader knows it, when not typ.field
}

// stateHomes are the homes of the partition state: those the code had
// before the partition table (each absent once gone), then the table's.
// Scope.owned and OwnedCache.partitions are what the table acts through
// (the table is their one writer); State.Running is Local.Status as
// published.
var stateHomes = []home{
	{"shard", "Local", "Status", "Manager.local (its Status map)"},
	{"shard", "Manager", "running", ""},
	{"controllers", "partitionSet", "table", ""},
	{"controllers", "partitionSet", "expected", ""},
	{"controllers", "partitionFence", "open", ""},
	{"informers", "Scope", "owned", ""},
	{"informers", "OwnedCache", "partitions", ""},
	{"membership", "State", "Running", ""},
	{"controllers", "partitionTable", "rows", ""},
}

// stateFieldNames are the field names partition state goes by; every
// product struct field so named is listed, wherever it has moved.
var stateFieldNames = setOf("table", "rows", "expected", "open", "owned", "partitions", "running", "Running", "Status")

// field is a struct field of the product.
type field struct {
	typ  string // the field's type, as written
	site string // "file:line"
}

// addStructFields records the fields of every struct type f declares (at
// package level or in a function) under "Type.field" for package pkg; the
// fields of a struct nested in a field are under "Type.field.inner".
func addStructFields(into map[string]map[string]field, fset *token.FileSet, rel, pkg string, f *ast.File) {
	if into[pkg] == nil {
		into[pkg] = map[string]field{}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		if st, ok := ts.Type.(*ast.StructType); ok {
			addFields(into[pkg], fset, rel, ts.Name.Name, st)
		}
		return true
	})
}

func addFields(into map[string]field, fset *token.FileSet, rel, prefix string, st *ast.StructType) {
	for _, fl := range st.Fields.List {
		names := fieldNames(fl)
		for _, name := range names {
			site := fmt.Sprintf("%s:%d", rel, fset.Position(fl.Pos()).Line)
			into[prefix+"."+name] = field{typ: types.ExprString(fl.Type), site: site}
			if inner, ok := fl.Type.(*ast.StructType); ok {
				addFields(into, fset, rel, prefix+"."+name, inner)
			}
		}
	}
}

// fieldNames are a field list entry's names; an embedded field is named
// after its type.
func fieldNames(fl *ast.Field) []string {
	if len(fl.Names) > 0 {
		var out []string
		for _, n := range fl.Names {
			out = append(out, n.Name)
		}
		return out
	}
	t := fl.Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	switch x := t.(type) {
	case *ast.Ident:
		return []string{x.Name}
	case *ast.SelectorExpr:
		return []string{x.Sel.Name}
	}
	return nil
}

// printStateHomes prints the fixed homes of the partition state with
// present or absent, then every product field named like partition state.
func (s *stats) printStateHomes(w io.Writer) {
	var lines []string
	present := 0
	for _, h := range stateHomes {
		lines = append(lines, s.homeLine(h, &present))
	}
	section(w, fmt.Sprintf("homes of the partition state present (of %d)", len(stateHomes)), present, lines)
	fields := s.stateFields()
	section(w, "product struct fields named like partition state ("+namesOf(stateFieldNames)+")", len(fields), fields)
}

// homeLine says whether h's type still has h's field; when it has not, it
// names the types of h's package that have a field of that name now.
func (s *stats) homeLine(h home, present *int) string {
	what := h.pkg + " " + h.typ + "." + h.field
	if h.label != "" {
		what = fmt.Sprintf("%s %s = %s.%s", h.pkg, h.label, h.typ, h.field)
	}
	if f, ok := s.structs[h.pkg][h.typ+"."+h.field]; ok {
		*present++
		return fmt.Sprintf("present  %s  %s  (%s)", what, f.typ, f.site)
	}
	var elsewhere []string
	for key, f := range s.structs[h.pkg] {
		if strings.HasSuffix(key, "."+h.field) {
			elsewhere = append(elsewhere, fmt.Sprintf("%s %s (%s)", key, f.typ, f.site))
		}
	}
	sort.Strings(elsewhere)
	if len(elsewhere) == 0 {
		return "absent   " + what
	}
	return fmt.Sprintf("absent   %s  (a field so named is on: %s)", what, strings.Join(elsewhere, "; "))
}

// stateFields lists the product's struct fields named like partition
// state, as "package Type.field fieldType (file:line)".
func (s *stats) stateFields() []string {
	var out []string
	for pkg, fields := range s.structs {
		for key, f := range fields {
			if stateFieldNames[key[strings.LastIndex(key, ".")+1:]] {
				out = append(out, fmt.Sprintf("%s %s %s (%s)", pkg, key, f.typ, f.site))
			}
		}
	}
	sort.Strings(out)
	return out
}

func namesOf(set map[string]bool) string {
	var names []string
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
