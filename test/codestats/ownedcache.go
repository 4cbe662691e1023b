package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The owned cache's figures: what a reader of informers/ must hold. The
// package is the one the fleet's correctness bugs keep being found in, and
// its redesign promises fewer lines, fewer locks and a doc.go that names
// every concept once; these are counted so each change can show them.

const informersPkg = "informers"

// ownedCacheStats is counted over informers/'s non-test files.
type ownedCacheStats struct {
	files, lines int
	// mutexes: "Type.field" of every sync.Mutex or sync.RWMutex field.
	mutexes []string
	// lockedComments: comments saying a function is called with a lock
	// held, the only record of a lock order outside doc.go.
	lockedComments int
}

// addOwnedCache counts one file of informers/.
func (o *ownedCacheStats) add(fset *token.FileSet, f *ast.File) {
	o.files++
	o.lines += fset.File(f.Pos()).LineCount()
	for _, group := range f.Comments {
		if strings.Contains(group.Text(), " held") && strings.Contains(group.Text(), "alled with") {
			o.lockedComments++
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, field := range st.Fields.List {
			sel, ok := field.Type.(*ast.SelectorExpr)
			if !ok {
				continue
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "sync" || (sel.Sel.Name != "Mutex" && sel.Sel.Name != "RWMutex") {
				continue
			}
			for _, name := range field.Names {
				o.mutexes = append(o.mutexes, ts.Name.Name+"."+name.Name)
			}
		}
		return false
	})
}

// conceptLine is a bullet of doc.go naming a concept: "//   - name: ..."
// or "//   - the name: ...", a name of at most three words.
var conceptLine = regexp.MustCompile(`^//\s+- (?:the |an |a )?([A-Za-z][\w-]*(?: [\w-]+){0,2}):`)

// docConcepts lists the concepts informers/doc.go names.
func docConcepts(root string) ([]string, error) {
	f, err := os.Open(filepath.Join(root, informersPkg, "doc.go"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := conceptLine.FindStringSubmatch(sc.Text()); m != nil && !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out, sc.Err()
}

// printOwnedCache prints the owned cache's figures.
func (s *stats) printOwnedCache(w io.Writer, root string) {
	o := s.ownedCache
	fmt.Fprintf(w, "== %s/ (non-test): %d files, %d lines, %d comments saying a lock is held\n", informersPkg, o.files, o.lines, o.lockedComments)
	sort.Strings(o.mutexes)
	section(w, informersPkg+"/ mutexes", len(o.mutexes), o.mutexes)
	concepts, err := docConcepts(root)
	if err != nil {
		fmt.Fprintf(w, "== %s/doc.go: %v\n", informersPkg, err)
		return
	}
	section(w, informersPkg+"/doc.go concepts named", len(concepts), []string{strings.Join(concepts, ", ")})
}
