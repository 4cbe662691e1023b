package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// selection is the tests chosen from upstream's suites, read from a file
// of sections: "[ci]" (run on every submission, against a fleet),
// "[long]" (run with them in make test-long and make conformance),
// "[real node]" (make conformance-node: they need containers that run),
// and "[left out]" (each line "name | why": not run).
type selection struct {
	ci, long, node []string
	leftOut        map[string]string
}

func readSelection(path string) (*selection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the selection: %w", err)
	}
	defer f.Close()
	s := &selection{leftOut: map[string]string{}}
	section := ""
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "[ci]" || line == "[long]" || line == "[real node]" || line == "[left out]":
			section = line
		case section == "[ci]":
			s.ci = append(s.ci, line)
		case section == "[long]":
			s.long = append(s.long, line)
		case section == "[real node]":
			s.node = append(s.node, line)
		case section == "[left out]":
			name, why, ok := strings.Cut(line, " | ")
			if !ok {
				return nil, fmt.Errorf("%s:%d: a test left out says why after \" | \"", path, n)
			}
			s.leftOut[name] = why
		default:
			return nil, fmt.Errorf("%s:%d: a test outside a section", path, n)
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading the selection: %w", err)
	}
	return s, nil
}

// names are the tests of set: ci, all (ci and long), or node.
func (s *selection) names(set string) ([]string, error) {
	switch set {
	case "ci":
		return s.ci, nil
	case "all":
		return append(append([]string{}, s.ci...), s.long...), nil
	case "node":
		return s.node, nil
	}
	return nil, fmt.Errorf("set %q: want all, ci or node", set)
}

// focusOf makes one ginkgo focus per test: its whole name, quoted (a
// name alone would also select every test whose name it begins).
func focusOf(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		// The spec's text ginkgo matches begins with a space (its
		// top container's empty text), so a name starts after a space.
		out = append(out, `(^|\s)`+regexp.QuoteMeta(n)+"$")
	}
	return out
}
