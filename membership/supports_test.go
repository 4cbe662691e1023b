package membership

import (
	"strings"
	"testing"
)

func TestParseSupports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   string
		want    int // placements read
		wantErr string
	}{
		{"absent: a release from before the annotation", "", 0, ""},
		{"placements and versions", `{"placements":["consistent-v0.10.0/xxhash/v3-colocated-share"],"stateVersions":[1]}`, 1, ""},
		{"a field a newer release added is kept out, not refused", `{"placements":["a/b"],"compression":"zstd"}`, 1, ""},
		{"not JSON", `placements=a`, 0, "decoding"},
		{"a placement name that is not one", `{"placements":["A B"]}`, 0, "invalid placement"},
		{"too many", `{"placements":[` + strings.Repeat(`"a",`, 40) + `"a"]}`, 0, "more than"},
		{"too large", `{"placements":["` + strings.Repeat("a", 5000) + `"]}`, 0, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSupports(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got.Placements) != tc.want {
				t.Fatalf("got %+v, %v; want %d placements", got, err, tc.want)
			}
		})
	}
	round, err := Supports{Placements: []string{"x/y"}, StateVersions: []int{1}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseSupports(round); err != nil || back.Placements[0] != "x/y" || back.StateVersions[0] != 1 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}
