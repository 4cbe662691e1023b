package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The limits `make test` holds the product to (codestats -check): each is
// what the code meets as it stands, so that a change past one fails with
// the limit and what broke it named, rather than drifting unseen. No file
// or function is exempt.
const (
	// limitLongFuncs: product functions over longFunc lines.
	limitLongFuncs = 0
	// limitLongFiles: product files over longFile lines.
	limitLongFiles = 0
	// limitGlobalKlog: calls of klog's global logging functions in the
	// product (a logger comes from the context).
	limitGlobalKlog = 0
	// limitTestImports: product files importing the module's test/ tree.
	limitTestImports = 0
	// limitTwins: type names defined in more than one package.
	limitTwins = 0
	// limitDesignLines: lines of docs/design.md, which says what the
	// project does and why and links the measurements rather than
	// retelling them.
	limitDesignLines = 600
	// limitBenchmarkFiles: files under docs/benchmarks/, which keeps the
	// evidence the docs link and the current figures; a superseded run
	// leaves with the figure it backed (git keeps it).
	limitBenchmarkFiles = 250
)

// breaches lists every limit the repository at root is past, each with
// its offenders.
func (s *stats) breaches(root string) ([]string, error) {
	var out []string
	over := func(what string, limit int, offenders []string) {
		if len(offenders) <= limit {
			return
		}
		line := fmt.Sprintf("%s: %d, limit %d", what, len(offenders), limit)
		for _, o := range offenders {
			line += "\n   " + o
		}
		out = append(out, line)
	}
	over(fmt.Sprintf("product functions over %d lines", longFunc), limitLongFuncs, s.longFuncs[product])
	over(fmt.Sprintf("product files over %d lines", longFile), limitLongFiles, s.longFiles[product])
	var klog []string
	for _, calls := range s.klogCalls {
		klog = append(klog, calls...)
	}
	over("global klog logging calls in the product", limitGlobalKlog, klog)
	over("product files importing the module's test/ tree", limitTestImports, s.testImports)
	over("type names defined in more than one package", limitTwins, s.twins())
	design, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		return nil, fmt.Errorf("reading docs/design.md: %w", err)
	}
	if n := bytes.Count(design, []byte("\n")); n > limitDesignLines {
		out = append(out, fmt.Sprintf("docs/design.md: %d lines, limit %d (it says what the project does and why; evidence belongs in docs/benchmarks/, linked)", n, limitDesignLines))
	}
	n, err := countFiles(filepath.Join(root, "docs", "benchmarks"))
	if err != nil {
		return nil, err
	}
	if n > limitBenchmarkFiles {
		out = append(out, fmt.Sprintf("files under docs/benchmarks: %d, limit %d (keep the evidence the docs link and the current figures; git keeps superseded runs)", n, limitBenchmarkFiles))
	}
	return out, nil
}

// countFiles counts the files under dir (none when it does not exist).
func countFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("counting the files under %s: %w", dir, err)
	}
	return n, nil
}
