package controllers

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/controllers.md from the catalog")

// TestCatalogCoversUpstream fails when kube-controller-manager gains or
// loses a controller the catalog does not know about.
func TestCatalogCoversUpstream(t *testing.T) {
	descriptors := Descriptors()
	if err := Check(descriptors); err != nil {
		t.Fatal(err)
	}
	if len(descriptors) < 50 {
		t.Fatalf("only %d upstream descriptors; expected KCM's full list", len(descriptors))
	}
	partitions := 0
	for _, e := range Catalog {
		if e.Kind != Partition && e.Kind != Singleton {
			t.Errorf("unknown kind %q", e.Kind)
		}
		if e.Why == "" {
			t.Errorf("entry without a reason: %+v", e)
		}
		if e.Kind == Partition {
			partitions++
		}
	}
	t.Logf("%d upstream controllers: %d partition, %d singleton", len(descriptors), partitions, len(descriptors)-partitions)
}

// TestCatalogDocMatches keeps docs/controllers.md the same table as the
// code (go test ./controllers -update rewrites it).
func TestCatalogDocMatches(t *testing.T) {
	const path = "../docs/controllers.md"
	table := Markdown(Descriptors())
	data, err := os.ReadFile(path)
	if err != nil && !*update {
		t.Fatal(err)
	}
	const begin, end = "<!-- catalog:begin -->\n", "<!-- catalog:end -->"
	doc := string(data)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the catalog markers", path)
	}
	want := doc[:i+len(begin)] + table + doc[j:]
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != doc {
		t.Fatalf("%s is out of date with the catalog: run go test ./controllers -update", path)
	}
}
