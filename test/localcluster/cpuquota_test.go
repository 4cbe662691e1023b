package localcluster

import (
	"os"
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
