package main

// Sampling the processes of a run from /proc: CPU-seconds, peak RSS, and
// which component limited the run.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// cpuByComponent is the CPU-seconds each live process has used.
func (b *bench) cpuByComponent() map[string]float64 {
	out := map[string]float64{}
	for _, p := range b.cluster.Processes() {
		if exited, _ := p.Exited(); exited {
			continue
		}
		out[p.Name] += cpuSeconds(p.Pid())
	}
	return out
}

// recordPeaks notes the peak RSS of live controller-manager processes
// (before one is stopped).
func (b *bench) recordPeaks() {
	if b.rssPeaks == nil {
		b.rssPeaks = map[string]float64{}
	}
	for _, p := range b.procs {
		if exited, _ := p.Exited(); exited {
			continue
		}
		key := p.Name + "@" + strconv.Itoa(p.Pid())
		b.rssPeaks[key] = max(b.rssPeaks[key], peakRSSMiB(p.Pid()))
	}
}

// peakRSS is the largest peak RSS of one controller-manager process and
// the sum over the processes alive at the end.
func (b *bench) peakRSS() (largest, sum float64) {
	b.recordPeaks()
	for _, p := range b.procs {
		v := b.rssPeaks[p.Name+"@"+strconv.Itoa(p.Pid())]
		sum += v
	}
	for _, v := range b.rssPeaks {
		largest = max(largest, v)
	}
	return largest, sum
}

func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+2:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

func peakRSSMiB(pid int) float64 { return statusMiB(pid, "VmHWM:") }

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

// limiter names what limited a run: the CPU (and its largest consumer)
// when the machine was busy for most of the run, else the controller
// managers' client rate limits. busy is the machine's busy share over the
// run and busySeconds its busy CPU-seconds, both from /proc/stat; cpu is
// what each process the harness started used, so the rest of the busy
// time (the harness, processes that exited, the kernel) is reported too.
// With split (-cpus), busy is the control plane's CPUs' and the controller
// managers, which run elsewhere, are left out.
func limiter(cpu map[string]float64, busy, busySeconds float64, isCM func(string) bool, split bool) string {
	where, whose := "machine", "the machine's"
	if split {
		where, whose = "control plane's CPUs", "the control plane's CPUs'"
		kept := map[string]float64{}
		for n, v := range cpu {
			if !isCM(n) {
				kept[n] = v
			}
		}
		cpu = kept
	}
	total := 0.0
	for _, v := range cpu {
		total += v
	}
	var top string
	topV := 0.0
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	sort.Strings(names)
	byKind := map[string]float64{}
	for _, n := range names {
		kind := n
		if isCM(n) {
			kind = "controller manager"
		}
		byKind[kind] += cpu[n]
	}
	for k, v := range byKind {
		if v > topV {
			top, topV = k, v
		}
	}
	what := "client rate limits"
	if busy >= 0.85 {
		what = "CPU"
	}
	share := func(v float64) float64 {
		if busySeconds <= 0 {
			return 0
		}
		return v / busySeconds * 100
	}
	return fmt.Sprintf("%s: %s %.0f%% busy (/proc/stat), most in %s (%.0f%% of %s busy time); %.0f%% not in the processes started",
		what, where, busy*100, top, share(topV), whose, max(0, share(busySeconds-total)))
}

// limitedSince says what limited the run from the machine's and the
// processes' CPU readings before (see limiter).
func (b *bench) limitedSince(machineBefore machineCPU, cpuBefore map[string]float64) (string, error) {
	machineAfter, err := readMachineCPU(b.busyCPUs)
	if err != nil {
		return "", err
	}
	busy, busySeconds := busyBetween(machineBefore, machineAfter)
	cpu := map[string]float64{}
	for name, after := range b.cpuByComponent() {
		cpu[name] = after - cpuBefore[name]
	}
	return limiter(cpu, busy, busySeconds, b.isControllerManager, b.busyCPUs != nil), nil
}
