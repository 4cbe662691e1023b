// Command codestats prints the figures a reader of this codebase feels
// first, so a change that claims to make it easier to read can show them
// before and after: non-test functions over 60 lines, non-test files over
// 500 lines, global klog calls in membership (a logger should come from
// the context), and types defined under the same name in more than one
// package of the project.
//
//	go run ./test/codestats [-root .]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	longFunc = 60
	longFile = 500
)

// stats is what codestats counts.
type stats struct {
	longFuncs   []string // "file:line name (n lines)"
	longFiles   []string // "file (n lines)"
	globalKlog  []string // "file:line klog.X"
	typeHomes   map[string][]string
	funcs, srcs int
}

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	s, err := collect(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	s.print(os.Stdout)
}

// collect parses every non-test Go file of the project (the tools module
// under test/tools is not the project's code).
func collect(root string) (*stats, error) {
	s := &stats{typeHomes: map[string][]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == filepath.Join("test", "tools") || strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", rel, err)
		}
		s.srcs++
		if n := fset.File(f.Pos()).LineCount(); n > longFile {
			s.longFiles = append(s.longFiles, fmt.Sprintf("%s (%d lines)", rel, n))
		}
		pkg := filepath.Dir(rel)
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				s.funcs++
				start, end := fset.Position(decl.Pos()).Line, fset.Position(decl.End()).Line
				if n := end - start + 1; n > longFunc {
					s.longFuncs = append(s.longFuncs, fmt.Sprintf("%s:%d %s (%d lines)", rel, start, funcName(decl), n))
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && pkg != "." {
						s.typeHomes[ts.Name.Name] = append(s.typeHomes[ts.Name.Name], pkg)
					}
				}
			}
		}
		if strings.HasPrefix(rel, "membership"+string(filepath.Separator)) {
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "klog" && sel.Sel.Name != "FromContext" && sel.Sel.Name != "Logger" && sel.Sel.Name != "KObj" && sel.Sel.Name != "KRef" && sel.Sel.Name != "NewContext" && sel.Sel.Name != "LoggerWithValues" && sel.Sel.Name != "LoggerWithName" && sel.Sel.Name != "Background" {
					s.globalKlog = append(s.globalKlog, fmt.Sprintf("%s:%d klog.%s", rel, fset.Position(sel.Pos()).Line, sel.Sel.Name))
				}
				return true
			})
		}
		return nil
	})
	return s, err
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
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

func (s *stats) print(w *os.File) {
	section := func(title string, lines []string) {
		fmt.Fprintf(w, "== %s: %d\n", title, len(lines))
		for _, l := range lines {
			fmt.Fprintf(w, "   %s\n", l)
		}
	}
	sort.Strings(s.longFiles)
	section(fmt.Sprintf("non-test functions over %d lines (of %d)", longFunc, s.funcs), s.longFuncs)
	section(fmt.Sprintf("non-test files over %d lines (of %d)", longFile, s.srcs), s.longFiles)
	section("global klog calls in membership", s.globalKlog)
	section("type names defined in more than one package", s.twins())
}
