package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// cpuSplit confines the control plane and the controller managers to
// separate CPUs (-cpus), so that an experiment can tell what the controller
// managers' own CPU costs the control plane on a shared machine from what
// their requests cost it: on this bench's 2 cores every process competes
// with kube-apiserver, while a cluster runs its controller managers on
// nodes of their own or beside an apiserver among several.
type cpuSplit struct {
	ControlPlane       string `json:"controlPlane"`
	ControllerManagers string `json:"controllerManagers"`
}

// cpuList is taskset's list syntax: CPU numbers and ranges, comma-separated.
var cpuList = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// parseCPUSplit reads CONTROLPLANE:CONTROLLERMANAGERS; empty is no split.
func parseCPUSplit(v string) (cpuSplit, error) {
	if v == "" {
		return cpuSplit{}, nil
	}
	controlPlane, controllerManagers, ok := strings.Cut(v, ":")
	if !ok {
		return cpuSplit{}, fmt.Errorf("%q: want CONTROLPLANE:CONTROLLERMANAGERS, e.g. 0:1", v)
	}
	for _, list := range []string{controlPlane, controllerManagers} {
		if !cpuList.MatchString(list) {
			return cpuSplit{}, fmt.Errorf("%q is not a CPU list (e.g. 0, 1-3 or 0,2)", list)
		}
		for _, part := range strings.Split(list, ",") {
			first, last, isRange := strings.Cut(part, "-")
			lo, _ := strconv.Atoi(first)
			hi, _ := strconv.Atoi(last)
			if isRange && hi < lo {
				return cpuSplit{}, fmt.Errorf("%q: range %s runs backwards", list, part)
			}
		}
	}
	return cpuSplit{ControlPlane: controlPlane, ControllerManagers: controllerManagers}, nil
}

// controlPlaneCPUs lists the control plane's CPUs (nil without a split):
// with a split, a run is limited by CPU when those are busy, whatever the
// controller managers' CPUs do.
func (c cpuSplit) controlPlaneCPUs() []int { return expandCPUList(c.ControlPlane) }

// controllerManagerCPUs lists the controller managers' CPUs (nil without a
// split), whose busy share says whether they could keep up.
func (c cpuSplit) controllerManagerCPUs() []int { return expandCPUList(c.ControllerManagers) }

// expandCPUList lists the CPUs of a list parseCPUSplit accepted.
func expandCPUList(list string) []int {
	var out []int
	for _, part := range strings.Split(list, ",") {
		if part == "" {
			continue
		}
		first, last, isRange := strings.Cut(part, "-")
		lo, _ := strconv.Atoi(first)
		hi := lo
		if isRange {
			hi, _ = strconv.Atoi(last)
		}
		for cpu := lo; cpu <= hi; cpu++ {
			out = append(out, cpu)
		}
	}
	return out
}
