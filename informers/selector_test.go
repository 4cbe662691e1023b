package informers

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apiserver/pkg/sharding"
)

// TestNamespaceSelector parses the selectors the owned cache sends with
// kube-apiserver's own parser: each matches exactly its namespaces among
// many others, reads as the apiserver echoes it, and the most terms one
// selector may hold still parse (one more does not).
func TestNamespaceSelector(t *testing.T) {
	random := rand.New(rand.NewPCG(1, 2))
	var others []string
	for i := range 5000 {
		others = append(others, fmt.Sprintf("ns-%d-%x", i, random.Uint64()))
	}
	for _, tc := range []struct {
		name       string
		namespaces []string
	}{
		{"one", []string{"default"}},
		{"similar names", []string{"team-00", "team-01", "team-02", "team-10"}},
		{"duplicates", []string{"a", "b", "a"}},
		{"most terms", others[:MaxSelectorTerms]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			selector := namespaceSelector(tc.namespaces)
			parsed, err := apisharding.Parse(selector)
			if err != nil {
				t.Fatalf("the apiserver's parser refuses %d terms (%d characters): %v", len(tc.namespaces), len(selector), err)
			}
			if parsed.String() != selector {
				t.Fatalf("the apiserver echoes\n%s\nfor\n%s", parsed.String(), selector)
			}
			want := map[string]bool{}
			for _, ns := range tc.namespaces {
				want[ns] = true
			}
			for _, ns := range append(append([]string(nil), tc.namespaces...), others...) {
				got, err := parsed.Matches(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}})
				if err != nil {
					t.Fatal(err)
				}
				if got != want[ns] {
					t.Fatalf("namespace %s: matched %v, want %v", ns, got, want[ns])
				}
			}
		})
	}
	if _, err := apisharding.Parse(namespaceSelector(others[:MaxSelectorTerms+10])); err == nil {
		t.Fatalf("%d terms parse: MaxSelectorTerms is not the apiserver's limit", MaxSelectorTerms+10)
	}
	if s := namespaceSelector([]string{"x"}); !strings.HasPrefix(s, "shardRange(object.metadata.namespace, '0x") {
		t.Fatalf("unexpected selector %s", s)
	}
}
