package membership

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

// TestYoungInState: version 5 carries the young namespaces' weights,
// quantized, and a reader gets them back; an older version leaves them
// out (its readers refuse fields they do not know); a state naming an
// invalid namespace, a code of 0 or more than maxYoung namespaces is
// refused; a member publishes its heaviest maxYoung.
func TestYoungInState(t *testing.T) {
	running := []string{"partition/3", "singleton/garbage-collector"}
	tooMany := map[string]uint64{}
	for i := range maxYoung + 1 {
		tooMany[fmt.Sprintf("tenant-%d", i)] = 1
	}
	for _, tc := range []struct {
		name    string
		version int
		young   map[string]uint64
		want    map[string]uint64
		err     string
	}{
		{"version 5 carries the weights", 5, map[string]uint64{"tenant-a": 600, "tenant-b": 3}, map[string]uint64{"tenant-a": Quantized(600), "tenant-b": 3}, ""},
		{"version 4 leaves them out", 4, map[string]uint64{"tenant-a": 600}, nil, ""},
		{"an invalid namespace", 5, map[string]uint64{"Tenant_A": 1}, nil, `invalid young namespace "Tenant_A"`},
		{"too many", 5, tooMany, nil, "more than 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, value, ok := encodeAndRead(t, State{Incarnation: "a1", Seq: 1, Epoch: 1, Running: running, Young: tc.young}, tc.version, tc.err)
			if ok && !maps.Equal(got.Young, tc.want) {
				t.Errorf("read back young %v, want %v (%s)", got.Young, tc.want, value)
			}
		})
	}
	for _, bad := range []struct{ state, says string }{
		{`{"v":4,"inc":"a1","seq":1,"epoch":1,"view":"","young":{"tenant-a":9}}`, "state version 4 with young namespaces"},
		{`{"v":5,"inc":"a1","seq":1,"epoch":1,"view":"","young":{"tenant-a":0}}`, "weight code 0"},
		{`{"v":5,"inc":"a1","seq":1,"epoch":1,"view":"","young":{"tenant-a":256}}`, "decoding state annotation"},
	} {
		if _, err := ParseState(bad.state); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("read %s: %v, want an error saying %q", bad.state, err, bad.says)
		}
	}
	young := map[string]uint64{}
	for i := range maxYoung + 10 {
		young[fmt.Sprintf("tenant-%03d", i)] = uint64(i)
	}
	kept := heaviestYoung(young)
	if len(kept) != maxYoung {
		t.Fatalf("kept %d young namespaces, want %d", len(kept), maxYoung)
	}
	for ns := range kept {
		if young[ns] < 10 {
			t.Errorf("kept %s (weight %d) over a heavier one", ns, young[ns])
		}
	}
}
