// Command codestats prints the figures a reader of this codebase feels
// first, so a change that claims to make it easier to read can show them
// before and after. It parses every non-test Go file of the repository
// (go/ast only: nothing is built or type-checked, so it runs in well under
// a second) and splits the code into the product (every directory outside
// test/: cmd/, controllers/, shard/, informers/, membership/, deploy/ ...)
// and the test/ tree (harnesses, benchmarks, tools). It prints:
//
//   - functions over 60 lines and files over 500 lines, for the product
//     (targets: at most 3 functions, no file) and for test/ apart, because
//     a long function or file is where a reader loses the thread;
//   - the calls to klog's global logging functions (klog.InfoS,
//     klog.V(n).InfoS, klog.Fatalf ...) per product package, because a
//     logger should come from the context (klog.FromContext), so that its
//     name and values say which piece or partition logged; -v lists each
//     call's file:line;
//   - product files importing a package of the module's test/ tree, because
//     test code linked into the product is code a reader of the product
//     does not expect;
//   - where the partition state lives: a fixed list of (package, type,
//     field) homes checked for presence, and every product struct field
//     named like partition state, so a restructuring that moves or renames
//     it shows where the state went;
//   - type names defined in more than one package of the repository;
//   - the owned cache's size (informers/): files, lines, mutexes, comments
//     saying a lock is held, and the concepts its doc.go names;
//   - the writers of what the partition controllers see: the functions
//     calling a Scope's Gain, Lose, Held or Dropped, by package and type,
//     and apart, their inputs (the calls of a HeldReporter).
//
// Usage:
//
//	go run ./test/codestats [-root .] [-v] [-check]
//
// -check prints only the limits the code is past (limits.go) and exits 1
// if there is one: make test runs it.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	longFunc = 60
	longFile = 500

	// The product's targets, shown in the headings: its limits.
	targetLongFuncs = limitLongFuncs
	targetLongFiles = limitLongFiles
)

// area is the part of the repository a file belongs to.
type area int

const (
	product  area = iota // everything outside test/
	testTree             // test/
)

func (a area) String() string {
	if a == product {
		return "product"
	}
	return "test/"
}

// stats is what codestats counts.
type stats struct {
	module      string                      // the module path, from go.mod
	funcs, srcs [2]int                      // per area
	longFuncs   [2][]string                 // per area: "file:line name (n lines)"
	longFiles   [2][]string                 // per area: "file (n lines)"
	klogCalls   map[string][]string         // product package -> "file:line klog.X"
	testImports []string                    // "file -> import path"
	structs     map[string]map[string]field // product package -> "Type.field" -> field
	typeHomes   map[string][]string         // type name -> packages
	ownedCache  ownedCacheStats             // informers/
	visibility  []visibilityWrite           // writers of a Scope's visibility
	root        string
}

func main() {
	root := flag.String("root", ".", "the repository's root")
	verbose := flag.Bool("v", false, "list the file:line of each global klog call and each write of a Scope's visibility")
	check := flag.Bool("check", false, "print nothing but the limits the code is past (limits.go), and fail if any")
	flag.Parse()
	s, err := collect(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	if !*check {
		s.print(os.Stdout, *verbose)
		return
	}
	breaches, err := s.breaches(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	for _, b := range breaches {
		fmt.Fprintln(os.Stderr, "codestats: past a limit:", b)
	}
	if len(breaches) > 0 {
		os.Exit(1)
	}
	fmt.Println("codestats: every limit met")
}

// collect parses every non-test Go file of the repository (the tools module
// under test/tools, bin/ and hidden directories are not the project's code).
func collect(root string) (*stats, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	s := &stats{
		module:    module,
		klogCalls: map[string][]string{},
		structs:   map[string]map[string]field{},
		typeHomes: map[string][]string{},
		root:      root,
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", rel, err)
		}
		s.add(fset, rel, f)
		return nil
	})
	return s, err
}

func skipDir(rel, name string) bool {
	return rel == "test/tools" || name == "bin" || strings.HasPrefix(name, ".") && rel != "."
}

// modulePath reads the module path from go.mod's module directive.
func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module directive", gomod)
}

// areaOf tells the product from the test/ tree.
func areaOf(rel string) area {
	if rel == "test" || strings.HasPrefix(rel, "test/") {
		return testTree
	}
	return product
}

// add counts one parsed file.
func (s *stats) add(fset *token.FileSet, rel string, f *ast.File) {
	a, pkg := areaOf(rel), filepath.ToSlash(filepath.Dir(rel))
	s.srcs[a]++
	if n := fset.File(f.Pos()).LineCount(); n > longFile {
		s.longFiles[a] = append(s.longFiles[a], fmt.Sprintf("%s (%d lines)", rel, n))
	}
	s.addDecls(fset, rel, a, pkg, f)
	if a != product {
		return
	}
	if pkg == informersPkg {
		s.ownedCache.add(fset, f)
	}
	if _, ok := s.klogCalls[pkg]; !ok {
		s.klogCalls[pkg] = nil // every product package gets a line, even at 0
	}
	s.klogCalls[pkg] = append(s.klogCalls[pkg], globalKlogCalls(fset, rel, f)...)
	s.testImports = append(s.testImports, s.importsOfTestTree(rel, f)...)
	s.visibility = append(s.visibility, visibilityWrites(fset, rel, pkg, f)...)
	addStructFields(s.structs, fset, rel, pkg, f)
}

// addDecls counts functions, long functions and the packages' type names.
func (s *stats) addDecls(fset *token.FileSet, rel string, a area, pkg string, f *ast.File) {
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			s.funcs[a]++
			start, end := fset.Position(decl.Pos()).Line, fset.Position(decl.End()).Line
			if n := end - start + 1; n > longFunc {
				s.longFuncs[a] = append(s.longFuncs[a], fmt.Sprintf("%s:%d %s (%d lines)", rel, start, funcName(decl), n))
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				if ts, ok := spec.(*ast.TypeSpec); ok && pkg != "." {
					s.typeHomes[ts.Name.Name] = append(s.typeHomes[ts.Name.Name], pkg)
				}
			}
		}
	}
}

// importsOfTestTree lists the imports of the module's test/ tree in f.
func (s *stats) importsOfTestTree(rel string, f *ast.File) []string {
	testRoot := s.module + "/test"
	var out []string
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, "`\"")
		if path == testRoot || strings.HasPrefix(path, testRoot+"/") {
			out = append(out, fmt.Sprintf("%s -> %s", rel, path))
		}
	}
	return out
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch idx := t.(type) {
	case *ast.IndexExpr:
		t = idx.X
	case *ast.IndexListExpr:
		t = idx.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// twins are type names defined in more than one package.
func (s *stats) twins() []string {
	var out []string
	for name, pkgs := range s.typeHomes {
		uniq := map[string]bool{}
		for _, p := range pkgs {
			uniq[p] = true
		}
		if len(uniq) > 1 {
			var ps []string
			for p := range uniq {
				ps = append(ps, p)
			}
			sort.Strings(ps)
			out = append(out, fmt.Sprintf("%s: %s", name, strings.Join(ps, ", ")))
		}
	}
	sort.Strings(out)
	return out
}

// section prints a heading with its count and the lines under it.
func section(w io.Writer, title string, count int, lines []string) {
	fmt.Fprintf(w, "== %s: %d\n", title, count)
	for _, l := range lines {
		fmt.Fprintf(w, "   %s\n", l)
	}
}

func (s *stats) print(w io.Writer, verbose bool) {
	s.printSizes(w)
	s.printKlog(w, verbose)
	sort.Strings(s.testImports)
	section(w, "product non-test files importing the module's test/ tree (file -> import)", len(s.testImports), s.testImports)
	s.printStateHomes(w)
	section(w, "type names defined in more than one package", len(s.twins()), s.twins())
	s.printOwnedCache(w, s.root)
	printVisibilityWriters(w, s.visibility, verbose)
}

// printSizes prints the long functions and files, the product's first.
func (s *stats) printSizes(w io.Writer) {
	targets := map[area][2]string{
		product:  {fmt.Sprintf("; target at most %d", targetLongFuncs), fmt.Sprintf("; target %d", targetLongFiles)},
		testTree: {"", ""},
	}
	for _, a := range []area{product, testTree} {
		sort.Strings(s.longFiles[a])
		section(w, fmt.Sprintf("%s non-test functions over %d lines (of %d%s)", a, longFunc, s.funcs[a], targets[a][0]),
			len(s.longFuncs[a]), s.longFuncs[a])
		section(w, fmt.Sprintf("%s non-test files over %d lines (of %d%s)", a, longFile, s.srcs[a], targets[a][1]),
			len(s.longFiles[a]), s.longFiles[a])
	}
}
