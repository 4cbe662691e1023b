package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// machineCPU is the machine's CPU time from /proc/stat, in USER_HZ ticks
// summed over every CPU: what every process, the kernel and interrupts used
// (busy), and what was left (idle, including waiting for I/O).
//
// It is the independent measure behind "what limited each run": summing
// the CPU of the processes the harness started misses the harness itself,
// processes that exited during the run (a killed or restarted replica),
// go's compiler when the run began cold, and the kernel's own work.
type machineCPU struct {
	busy, idle float64
}

// readMachineCPU reads the CPU time of cpus, or of the whole machine when
// cpus is empty.
func readMachineCPU(cpus []int) (machineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, fmt.Errorf("reading machine CPU time: %w", err)
	}
	return parseProcStat(string(data), cpus)
}

// parseProcStat reads the aggregate "cpu" line, or sums the "cpuN" lines of
// cpus: user nice system idle iowait irq softirq steal (guest time is
// already counted in user).
func parseProcStat(data string, cpus []int) (machineCPU, error) {
	want := map[string]bool{}
	for _, cpu := range cpus {
		want["cpu"+strconv.Itoa(cpu)] = true
	}
	if len(want) == 0 {
		want["cpu"] = true
	}
	var sum machineCPU
	found := 0
	for _, line := range strings.Split(data, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 || !want[fields[0]] {
			continue
		}
		var v [8]float64
		for i := 1; i < len(fields) && i <= 8; i++ {
			n, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return machineCPU{}, fmt.Errorf("/proc/stat %s field %d %q: %w", fields[0], i, fields[i], err)
			}
			v[i-1] = n
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		sum.busy += user + nice + system + irq + softirq + steal
		sum.idle += idle + iowait
		found++
	}
	if found < len(want) {
		if len(cpus) == 0 {
			return machineCPU{}, fmt.Errorf("/proc/stat has no aggregate cpu line")
		}
		return machineCPU{}, fmt.Errorf("/proc/stat has %d of the lines of CPUs %v", found, cpus)
	}
	return sum, nil
}

// busyBetween is the share of the machine's CPU time that was busy from a
// to b, and the busy CPU-seconds.
func busyBetween(a, b machineCPU) (share, seconds float64) {
	busy, idle := b.busy-a.busy, b.idle-a.idle
	if busy+idle <= 0 {
		return 0, 0
	}
	return busy / (busy + idle), busy / 100 // USER_HZ
}
