package informers

import (
	"maps"
	"reflect"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/runtime"
)

// Partitions lists the loaded partitions.
func (o *OwnedCache) Partitions() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.partitions))
}

// Everywhere lists the resources held everywhere now, sorted (tests, debug).
func (o *OwnedCache) Everywhere() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, i := range o.informers {
		if t, err := i.lw.target(); err == nil && i.everywhere > 0 {
			out = append(out, t.resource)
		}
	}
	sort.Strings(out)
	return out
}

// FieldSelectors gives the selector narrowing each informer made so far
// that has one, by resource (tests, debug).
func (o *OwnedCache) FieldSelectors() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]string{}
	for _, i := range o.informers {
		if t, err := i.lw.target(); err == nil && t.fieldSelector != "" {
			out[t.resource] = t.fieldSelector
		}
	}
	return out
}

// FieldSelectorOf is the selector narrowing obj's kind ("" none).
func (o *OwnedCache) FieldSelectorOf(obj runtime.Object) string {
	if selector, ok := o.config.FieldSelectors[reflect.TypeOf(obj)]; ok {
		return selector.String()
	}
	return ""
}

// Keys lists the keys each informer holds, by resource (tests, debug).
func (o *OwnedCache) Keys() map[string][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]string{}
	for _, i := range o.informers {
		t, err := i.lw.target()
		if err != nil {
			continue
		}
		keys := i.informer.GetStore().ListKeys()
		sort.Strings(keys)
		out[t.resource] = keys
	}
	return out
}
