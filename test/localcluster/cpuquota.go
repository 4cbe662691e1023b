package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPUQuota gives controller-manager processes a CPU budget with cgroup
// v1's cpu controller (cpu.cfs_quota_us over cpu.cfs_period_us), as if
// each ran on a node of its own (per process) or all of them shared one
// (Shared). A controller manager short of CPU is the regime large clusters
// are in; on a shared bench machine only a quota reproduces it.
type CPUQuota struct {
	// Cores is the budget: 0.5 is half a core's time every period.
	Cores float64
	// Shared puts every controller manager in one cgroup with one budget;
	// otherwise each process gets Cores of its own.
	Shared bool
}

// String says what the quota is, for reports.
func (q CPUQuota) String() string {
	if q.Shared {
		return fmt.Sprintf("%g cores shared by every controller manager", q.Cores)
	}
	return fmt.Sprintf("%g cores per controller-manager process", q.Cores)
}

// cgroupCPURoot is where cgroup v1's cpu controller is mounted.
var cgroupCPURoot = "/sys/fs/cgroup/cpu"

// cfsPeriod is the period the quotas are set over (the kernel's default).
const cfsPeriod = 100 * time.Millisecond

// cpuCgroups places processes into the cgroups of one cluster's quota.
type cpuCgroups struct {
	quota CPUQuota
	dir   string // this cluster's cgroup, under cgroupCPURoot

	mu       sync.Mutex
	children []string
}

// newCPUCgroups makes the cluster's cgroup, and checks that it can be
// written: a bench that asked for a quota must not run without one.
func newCPUCgroups(quota CPUQuota) (*cpuCgroups, error) {
	if quota.Cores <= 0 {
		return nil, fmt.Errorf("a CPU quota of %g cores: must be above 0", quota.Cores)
	}
	dir := filepath.Join(cgroupCPURoot, fmt.Sprintf("fleet-localcluster-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating a cgroup under %s for the controller managers' CPU quota (cgroup v1's cpu controller, writable by this user?): %w", cgroupCPURoot, err)
	}
	g := &cpuCgroups{quota: quota, dir: dir}
	if quota.Shared {
		if err := g.limit(dir); err != nil {
			g.remove()
			return nil, err
		}
	}
	return g, nil
}

// limit sets the quota on cgroup dir.
func (g *cpuCgroups) limit(dir string) error { return g.limitOver(dir, cfsPeriod) }

// limitOver sets the quota on cgroup dir over period (the kernel allows
// 1 ms to 1 s).
func (g *cpuCgroups) limitOver(dir string, over time.Duration) error {
	period := over.Microseconds()
	quota := int64(g.quota.Cores * float64(period))
	if quota < 1000 {
		return fmt.Errorf("a CPU quota of %g cores is under the kernel's minimum of 1 ms per %v", g.quota.Cores, over)
	}
	for file, value := range map[string]int64{"cpu.cfs_period_us": period, "cpu.cfs_quota_us": quota} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(value, 10)), 0o644); err != nil {
			return fmt.Errorf("setting the controller managers' CPU quota: %w", err)
		}
	}
	return nil
}

// place moves process pid (every thread of it) into its quota: the shared
// cgroup, or a cgroup of its own named after name.
func (g *cpuCgroups) place(name string, pid int) error {
	dir := g.dir
	if !g.quota.Shared {
		dir = filepath.Join(g.dir, fmt.Sprintf("%s-%d", name, pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("creating the CPU cgroup of %s: %w", name, err)
		}
		g.mu.Lock()
		g.children = append(g.children, dir)
		g.mu.Unlock()
		if err := g.limit(dir); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("placing %s (pid %d) under its CPU quota: %w", name, pid, err)
	}
	return nil
}

// Throttling is what a CPU quota's cgroups report (cpu.stat), summed.
type Throttling struct {
	// Periods: enforcement periods in which a process could run;
	// Throttled: those in which it ran out of its quota.
	Periods, Throttled int64
	// Time: how long its processes waited for the next period.
	Time time.Duration
}

// throttling sums cpu.stat over the quota's cgroups.
func (g *cpuCgroups) throttling() (Throttling, error) {
	g.mu.Lock()
	dirs := append([]string{g.dir}, g.children...)
	g.mu.Unlock()
	if !g.quota.Shared {
		dirs = dirs[1:]
	}
	var out Throttling
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return out, fmt.Errorf("reading CPU throttling: %w", err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			key, value, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(value, 10, 64)
			switch key {
			case "nr_periods":
				out.Periods += n
			case "nr_throttled":
				out.Throttled += n
			case "throttled_time":
				out.Time += time.Duration(n)
			}
		}
	}
	return out, nil
}

// remove deletes the cgroups once their processes have ended (a cgroup
// holding a process cannot be removed; what is left is logged by the
// caller's error).
func (g *cpuCgroups) remove() error {
	g.mu.Lock()
	dirs := append(append([]string(nil), g.children...), g.dir)
	g.mu.Unlock()
	var errs []error
	for _, dir := range dirs {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
