package main

import (
	"slices"
	"testing"
)

func TestParseCPUSplit(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    cpuSplit
		wantErr bool
	}{
		{in: "", want: cpuSplit{}},
		{in: "0:1", want: cpuSplit{ControlPlane: "0", ControllerManagers: "1"}},
		{in: "0-2:3,5", want: cpuSplit{ControlPlane: "0-2", ControllerManagers: "3,5"}},
		{in: "0", wantErr: true},
		{in: "0:", wantErr: true},
		{in: ":1", wantErr: true},
		{in: "a:1", wantErr: true},
		{in: "0:1:2", wantErr: true},
		{in: "0-:1", wantErr: true},
		{in: "2-1:0", wantErr: true},
	} {
		got, err := parseCPUSplit(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseCPUSplit(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if got != tc.want {
			t.Errorf("parseCPUSplit(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestSplitCPULists(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []int
	}{
		{list: "", want: nil},
		{list: "0", want: []int{0}},
		{list: "0-2,5", want: []int{0, 1, 2, 5}},
	} {
		if got := (cpuSplit{ControlPlane: tc.list, ControllerManagers: "9"}).controlPlaneCPUs(); !slices.Equal(got, tc.want) {
			t.Errorf("controlPlaneCPUs(%q) = %v, want %v", tc.list, got, tc.want)
		}
		if got := (cpuSplit{ControlPlane: "9", ControllerManagers: tc.list}).controllerManagerCPUs(); !slices.Equal(got, tc.want) {
			t.Errorf("controllerManagerCPUs(%q) = %v, want %v", tc.list, got, tc.want)
		}
	}
}
