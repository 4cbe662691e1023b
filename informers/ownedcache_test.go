package informers

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// TestOwnedCacheRefusesEmptyFieldSelectors: an empty selector would mean
// "every object", which is what leaving the kind out already says; a
// config that narrows a kind by nothing is a mistake, refused at start.
func TestOwnedCacheRefusesEmptyFieldSelectors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		selector fields.Selector
	}{
		{"nil", nil},
		{"everything", fields.Everything()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewOwnedCache(OwnedCacheConfig{MaxTerms: 1, FieldSelectors: map[reflect.Type]fields.Selector{reflect.TypeOf(&corev1.Secret{}): tc.selector}})
			if err == nil || !strings.Contains(err.Error(), "empty") {
				t.Fatalf("got %v, want an error about the empty selector", err)
			}
		})
	}
}

// Sources counts each informer's requests, by resource (tests).
func (o *OwnedCache) Sources() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for _, i := range o.informers {
		if t, err := i.lw.target(); err == nil {
			i.lw.mu.Lock()
			out[t.resource] = len(i.lw.sources)
			i.lw.mu.Unlock()
		}
	}
	return out
}
