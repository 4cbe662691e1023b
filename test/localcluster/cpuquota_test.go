package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCPUCgroups: a quota per process makes a cgroup per process with the
// budget; a shared quota puts every process in one cgroup with it;
// throttling sums cpu.stat; a budget under the kernel's minimum is refused.
// The cgroup filesystem is a folder here (the kernel's files are written as
// plain files).
func TestCPUCgroups(t *testing.T) {
	defer func(root string) { cgroupCPURoot = root }(cgroupCPURoot)
	for _, tc := range []struct {
		name  string
		quota CPUQuota
		// dirs: where each of the two processes lands, relative to the
		// cluster's cgroup.
		dirs [2]string
	}{
		{"per process", CPUQuota{Cores: 0.25}, [2]string{"kcm-11", "fcm-0-12"}},
		{"shared", CPUQuota{Cores: 1.5, Shared: true}, [2]string{".", "."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cgroupCPURoot = t.TempDir()
			g, err := newCPUCgroups(tc.quota)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range []struct {
				name string
				pid  int
			}{{"kcm", 11}, {"fcm-0", 12}} {
				if err := g.place(p.name, p.pid); err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join(g.dir, tc.dirs[i])
				for file, want := range map[string]string{"cgroup.procs": strconv.Itoa(p.pid), "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": strconv.Itoa(int(tc.quota.Cores * 100000))} {
					got, err := os.ReadFile(filepath.Join(dir, file))
					if err != nil || strings.TrimSpace(string(got)) != want {
						t.Errorf("%s/%s = %q (%v), want %q", tc.dirs[i], file, got, err, want)
					}
				}
				stat := "nr_periods 10\nnr_throttled 4\nthrottled_time 2000000\n"
				if err := os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(stat), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := g.throttling()
			if err != nil {
				t.Fatal(err)
			}
			cgroups := int64(2)
			if tc.quota.Shared {
				cgroups = 1
			}
			if want := (Throttling{Periods: 10 * cgroups, Throttled: 4 * cgroups, Time: time.Duration(cgroups) * 2 * time.Millisecond}); got != want {
				t.Errorf("throttling %+v, want %+v", got, want)
			}
		})
	}
	cgroupCPURoot = t.TempDir()
	if _, err := newCPUCgroups(CPUQuota{Cores: 0.005, Shared: true}); err == nil {
		t.Error("a quota of 0.5 ms per period was accepted")
	}
	if _, err := newCPUCgroups(CPUQuota{Cores: 0}); err == nil {
		t.Error("a quota of 0 cores was accepted")
	}
}

// TestCapCPU caps a busy process for real (cgroup v1's cpu controller, as
// the chaos soak's slow replica does): the kernel throttles it, and
// release moves it back to the root cgroup and removes the cgroup.
func TestCapCPU(t *testing.T) {
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	release, err := CapCPU("busy", busy.Process.Pid, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(cgroupCPURoot, "fleet-cap-busy-*"))
	if len(dirs) != 1 {
		t.Fatalf("cgroups made: %v, want one", dirs)
	}
	time.Sleep(500 * time.Millisecond)
	throttled, err := release()
	if err != nil {
		t.Fatal(err)
	}
	if throttled.Throttled == 0 || throttled.Time == 0 {
		t.Errorf("a busy process capped at 0.05 cores for 0.5 s was not throttled: %+v", throttled)
	}
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Errorf("the cgroup %s is still there after release (%v)", dirs[0], err)
	}
	cgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", busy.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(cgroup), "\n") {
		if strings.Contains(line, ":cpu") && !strings.HasSuffix(line, ":/") {
			t.Errorf("after release the process is in %q, want the root cpu cgroup", line)
		}
	}
}
