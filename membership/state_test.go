package membership

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseState(t *testing.T) {
	valid := State{Version: 1, Incarnation: "a1b2", Seq: 3, Epoch: 2, View: "00ff",
		Acks: map[string]Ack{"replica-1": {Incarnation: "c3", Epoch: 7}}, Running: []string{"singleton/namespace", "partition/3"}}
	encoded, err := valid.Encode()
	if err != nil {
		t.Fatalf("encoding a valid state: %v", err)
	}
	for _, tc := range []struct {
		name    string
		value   string
		wantErr string
	}{
		{"valid", encoded, ""},
		{"empty", "", "decoding"},
		{"not json", "garbage{", "decoding"},
		{"array", "[1,2]", "decoding"},
		{"unknown version", `{"v":99,"inc":"a","seq":1,"epoch":1,"view":""}`, "version"},
		{"version 2", `{"v":2,"inc":"a1b2","seq":3,"epoch":2,"view":"00ff","acks":{"replica-1":{"inc":"c3","epoch":7}},"running":["singleton/namespace"],"parts":"CA"}`, ""},
		{"partition bitmap in version 1", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","parts":"CA"}`, "bitmap"},
		{"bad partition bitmap", `{"v":2,"inc":"a","seq":1,"epoch":1,"view":"","parts":"!!"}`, "bitmap"},
		{"partition by name and in the bitmap", `{"v":2,"inc":"a","seq":1,"epoch":1,"view":"","running":["partition/3"],"parts":"CA"}`, "twice"},
		{"huge bitmap", `{"v":2,"inc":"a","seq":1,"epoch":1,"view":"","parts":"` + strings.Repeat("A", 2000) + `"}`, "more than"},
		{"missing incarnation", `{"v":1,"seq":1,"epoch":1,"view":""}`, "incarnation"},
		{"unknown field", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","extra":1}`, "unknown field"},
		{"trailing data", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":""}{}`, "trailing"},
		{"negative seq", `{"v":1,"inc":"a","seq":-1,"epoch":1,"view":""}`, "decoding"},
		{"bad view", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"XYZ"}`, "view"},
		{"bad piece", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","running":["../etc"]}`, "piece"},
		{"duplicate piece", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","running":["partition/1","partition/1"]}`, "twice"},
		{"bad ack member", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","acks":{"UPPER":{"inc":"b","epoch":1}}}`, "member"},
		{"leaving while running", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","running":["partition/1"],"leaving":true}`, "leaving"},
		{"weights in version 2", `{"v":2,"inc":"a","seq":1,"epoch":1,"view":"","parts":"CA","w":"AQ"}`, "weights"},
		{"a weight too many", `{"v":3,"inc":"a","seq":1,"epoch":1,"view":"","parts":"CA","w":"AQE"}`, "2 partition weights for 1"},
		{"weights and no partition", `{"v":3,"inc":"a","seq":1,"epoch":1,"view":"","w":"AQ"}`, "1 partition weights for 0"},
		{"weight table in version 2", `{"v":2,"inc":"a","seq":1,"epoch":1,"view":"","table":"AQ"}`, "weight table"},
		{"bad weight table", `{"v":3,"inc":"a","seq":1,"epoch":1,"view":"","table":"a+b"}`, "weight table"},
		{"bad weights", `{"v":3,"inc":"a","seq":1,"epoch":1,"view":"","parts":"CA","w":"!"}`, "weights"},
		{"huge", `{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","running":["` + strings.Repeat("a", 70<<10) + `"]}`, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseState(tc.value)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got.Incarnation != valid.Incarnation || got.Seq != valid.Seq || len(got.Running) != 2 || got.Acks["replica-1"].Epoch != 7 {
					t.Fatalf("round trip lost data: %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// TestStateVersions: each version this release reads round-trips a state
// with partitions and other pieces, and a reader of version 1 only (the
// release before version 2) refuses a version 2 state instead of reading
// it as one that runs no partition.
func TestStateVersions(t *testing.T) {
	st := State{Incarnation: "a1", Seq: 1, Epoch: 1, View: "ab", Running: []string{"partition/0", "partition/9", "partition/63", "singleton/gc", "partition/007"}}
	for _, tc := range []struct {
		version  int
		contains string
		lacks    string
	}{
		{1, `"partition/9"`, `"parts"`},
		{2, `"parts":"AQI`, `"partition/9"`},
	} {
		t.Run(fmt.Sprintf("version %d", tc.version), func(t *testing.T) {
			value, err := st.EncodeVersion(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(value, tc.contains) || strings.Contains(value, tc.lacks) {
				t.Errorf("version %d encodes as %s: want %s in it and not %s", tc.version, value, tc.contains, tc.lacks)
			}
			got, err := ParseState(value)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string(nil), st.Running...)
			slices.Sort(want)
			slices.Sort(got.Running)
			if !slices.Equal(got.Running, want) || got.Version != tc.version {
				t.Errorf("round trip: version %d running %v, want version %d running %v", got.Version, got.Running, tc.version, want)
			}
		})
	}
	v2, err := st.EncodeVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseState(v2, []int{1}); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("a reader of version 1 took a version 2 state: %v", err)
	}
}

// FuzzParseLeaseState feeds arbitrary annotation values to the parser: it
// must never panic, and whatever it accepts must encode and parse back to
// the same state.
func FuzzParseLeaseState(f *testing.F) {
	f.Add(`{"v":1,"inc":"a","seq":1,"epoch":1,"view":"ab","running":["partition/1"],"acks":{"m":{"inc":"b","epoch":2}}}`)
	f.Add(`{"v":1,"inc":"a","seq":1,"epoch":1,"view":"","leaving":true}`)
	f.Add(`garbage`)
	f.Add(`{"v":1}`)
	f.Add(`{"v":2,"inc":"a","seq":1,"epoch":1,"view":"","running":["singleton/x"],"parts":"_wE"}`)
	f.Fuzz(func(t *testing.T, value string) {
		s, err := ParseState(value)
		if err != nil {
			return
		}
		encoded, err := s.Encode()
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		again, err := ParseState(encoded)
		if err != nil {
			t.Fatalf("encoded state does not parse: %v", err)
		}
		if again.Seq != s.Seq || again.Epoch != s.Epoch || again.Incarnation != s.Incarnation || len(again.Running) != len(s.Running) || len(again.Acks) != len(s.Acks) || again.Leaving != s.Leaving {
			t.Fatalf("round trip changed the state: %+v -> %+v", s, again)
		}
	})
}

// TestStateWeights: the weights of the running partitions survive a
// round trip through version 3 as their quantized values, an unmeasured
// partition stays unmeasured, an older version drops them, and a weight
// of a partition that is not running is refused.
func TestStateWeights(t *testing.T) {
	st := State{Incarnation: "a", Seq: 1, Epoch: 1, Running: []string{"partition/0", "partition/9", "partition/63", "singleton/gc"},
		Weights: map[int]uint64{0: 0, 9: 1234, 63: 5_000_000}, Table: "AQID"}
	for _, tc := range []struct {
		version int
		want    map[int]uint64
	}{
		{3, map[int]uint64{0: 0, 9: Quantized(1234), 63: Quantized(5_000_000)}},
		{2, nil},
	} {
		value, err := st.EncodeVersion(tc.version)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseState(value)
		if err != nil {
			t.Fatalf("version %d: %v", tc.version, err)
		}
		if !maps.Equal(got.Weights, tc.want) {
			t.Errorf("version %d: weights %v, want %v (%s)", tc.version, got.Weights, tc.want, value)
		}
		if wantTable := map[int]string{3: "AQID", 2: ""}[tc.version]; got.Table != wantTable {
			t.Errorf("version %d: table %q, want %q", tc.version, got.Table, wantTable)
		}
	}
	st.Weights[10] = 1
	if _, err := st.Encode(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("a weight of a partition not running: got %v", err)
	}
	for _, w := range []uint64{0, 1, 2, 7, 100, 1000, 65_536, 1 << 30} {
		q := Quantized(w)
		if d := math.Abs(float64(q)-float64(w)) / math.Max(float64(w), 1); d > 0.045 && w > 10 || w <= 10 && q != w && d > 0.5 {
			t.Errorf("weight %d reads back as %d", w, q)
		}
	}
}
