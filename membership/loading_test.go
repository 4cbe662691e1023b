package membership

import (
	"maps"
	"strings"
	"testing"
)

// TestLoadingInState: version 4 carries the running partitions still
// loading, and a reader gets them back; an older version leaves them out
// (its readers refuse fields they do not know); a state naming a loading
// partition it does not run, or a load with no start, is refused.
func TestLoadingInState(t *testing.T) {
	running := []string{"partition/3", "partition/7", "singleton/garbage-collector"}
	for _, tc := range []struct {
		name    string
		version int
		loading map[int]int64
		want    map[int]int64
		err     string
	}{
		{"version 4 carries the loads", 4, map[int]int64{3: 1_700_000_000}, map[int]int64{3: 1_700_000_000}, ""},
		{"version 3 leaves them out", 3, map[int]int64{3: 1_700_000_000}, nil, ""},
		{"a partition not running", 4, map[int]int64{5: 1_700_000_000}, nil, "partition 5 loading, which is not running"},
		{"a load with no start", 4, map[int]int64{7: 0}, nil, "not a time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, value, ok := encodeAndRead(t, State{Incarnation: "a1", Seq: 1, Epoch: 1, Running: running, Loading: tc.loading}, tc.version, tc.err)
			if ok && !maps.Equal(got.Loading, tc.want) {
				t.Errorf("read back loading %v, want %v (%s)", got.Loading, tc.want, value)
			}
		})
	}
	// A reader refuses loading in a state that says an older version.
	if _, err := ParseState(`{"v":3,"inc":"a1","seq":1,"epoch":1,"view":"","running":["partition/3"],"loading":{"3":1700000000}}`); err == nil {
		t.Error("a version 3 state with loading partitions was read")
	}
}

// encodeAndRead encodes st at version and reads it back (ok); with
// wantErr set, the encoding must fail saying it, and ok is false.
func encodeAndRead(t *testing.T, st State, version int, wantErr string) (State, string, bool) {
	t.Helper()
	value, err := st.EncodeVersion(version)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("encoding: %v, want an error saying %q", err, wantErr)
		}
		return State{}, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseState(value)
	if err != nil {
		t.Fatal(err)
	}
	return got, value, true
}
