package main

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestFitSlope(t *testing.T) {
	for _, tc := range []struct {
		name string
		x, y []float64
		want float64
	}{
		{"a line", []float64{1, 2, 3}, []float64{5, 7, 9}, 2},
		{"flat", []float64{10, 20, 40}, []float64{3, 3, 3}, 0},
		{"noisy points around slope 1", []float64{0, 1, 2, 3}, []float64{0.1, 0.9, 2.1, 2.9}, 0.96},
		{"one point has no slope", []float64{1}, []float64{1}, math.NaN()},
		{"one x has no slope", []float64{2, 2}, []float64{1, 3}, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fitSlope(tc.x, tc.y)
			if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9) {
				t.Errorf("fitSlope = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSpread(t *testing.T) {
	items := []string{"a", "b", "c", "d", "e", "f"}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{10, items},
		{3, []string{"a", "c", "e"}},
		{1, []string{"a"}},
	} {
		if got := spread(items, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("spread(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{"100,300,900", []int{100, 300, 900}, ""},
		{" 5 , 10", []int{5, 10}, ""},
		{"300,100", nil, "ascend"},
		{"0,10", nil, "positive"},
		{"ten", nil, "positive"},
	} {
		got, err := parseSizes(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseSizes(%q) error %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestLadderCells: the ladder runs every system at each size, smallest
// first, and repeats only the largest size.
func TestLadderCells(t *testing.T) {
	cfg := config{ladder: true, ladderSizes: []int{10, 30, 90}, size: size{Runs: 3},
		systems: []system{{"kube-controller-manager", false, 2}, {"fleet x3", true, 3}}, limits: []limits{{Name: "raised"}}}
	var got []string
	for _, c := range cells(cfg) {
		got = append(got, cellKey(c.system.Name, c.limits.Name, c.namespaces)+"x"+string(rune('0'+c.runs)))
	}
	want := []string{
		"kube-controller-manager|raised|10x1", "fleet x3|raised|10x1",
		"kube-controller-manager|raised|30x1", "fleet x3|raised|30x1",
		"kube-controller-manager|raised|90x3", "fleet x3|raised|90x3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("cells = %v, want %v", got, want)
	}
}

// TestScaleReport: slopes come from the fitted objects, the growth table
// marks a figure growing faster than the objects, and the targets read the
// largest size.
func TestScaleReport(t *testing.T) {
	cell := func(system string, ns int, objects, rss, converge float64) result {
		m := map[string]float64{"s_objects": objects, "s_rss_median_mib": rss, "s_rss_largest_mib": rss, "s_rss_sum_mib": rss, "s_converge_s": converge}
		return result{System: system, Namespaces: ns, Runs: []map[string]float64{m}, Median: m}
	}
	rep := report{Mode: "scale", ScaleShape: &defaultScaleShape, Results: []result{
		cell("kube-controller-manager", 10, 10000, 200, 10), cell("fleet x3", 10, 10000, 150, 10),
		cell("kube-controller-manager", 30, 30000, 400, 20), cell("fleet x3", 30, 30000, 170, 90),
	}}
	if got := slopePer10k(rep, "kube-controller-manager", "s_rss_median_mib"); math.Abs(got-100) > 1e-9 {
		t.Errorf("KCM's slope = %v MiB per 10,000 objects, want 100", got)
	}
	md := scaleMarkdown(rep, nil, 0)
	for _, want := range []string{
		"| RSS, median process | 100 | 10.0 | 0.10 |", // slope 10 / 100
		"| RSS slope, fleet x3 median replica <= 0.36x KCM's | 0.10 | met |",
		"**9.00**", // x3's convergence grew 9x against 3x objects
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestScaleTargetsNeedKCMGrowth: a slope of KCM's that is not positive
// gives the slope targets no ratio ("not measured"), not a negative one
// that reads as met.
func TestScaleTargetsNeedKCMGrowth(t *testing.T) {
	cell := func(system string, ns int, objects, rss float64) result {
		m := map[string]float64{"s_objects": objects, "s_rss_median_mib": rss, "s_rss_largest_mib": rss, "s_rss_sum_mib": rss, "s_converge_s": 10}
		return result{System: system, Namespaces: ns, Runs: []map[string]float64{m}, Median: m}
	}
	for _, tc := range []struct {
		name           string
		kcmFrom, kcmTo float64
		want           string
	}{
		{"KCM grows", 200, 400, "| RSS slope, fleet x3 median replica <= 0.36x KCM's | 0.20 | met |"},
		{"KCM shrinks", 400, 380, "| RSS slope, fleet x3 median replica <= 0.36x KCM's | not measured | |"},
		{"KCM flat", 300, 300, "| RSS slope, fleet x3 median replica <= 0.36x KCM's | not measured | |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := report{Mode: "scale", ScaleShape: &defaultScaleShape, Results: []result{
				cell("kube-controller-manager", 10, 10000, tc.kcmFrom), cell("fleet x3", 10, 10000, 150),
				cell("kube-controller-manager", 30, 30000, tc.kcmTo), cell("fleet x3", 30, 30000, 150+2*(tc.kcmTo-tc.kcmFrom)/10),
			}}
			if md := scaleMarkdown(rep, nil, 0); !strings.Contains(md, tc.want) {
				t.Errorf("report lacks %q:\n%s", tc.want, md)
			}
		})
	}
}
