package localcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcessCPUs checks that a program started with a CPU list runs on
// those CPUs only, with the pid the cluster tracks (taskset execs it).
func TestProcessCPUs(t *testing.T) {
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		t.Fatalf("reading this process's affinity: %v", err)
	}
	first := -1
	for cpu := 0; cpu < 1024; cpu++ {
		if own.IsSet(cpu) {
			first = cpu
			break
		}
	}
	if first < 0 {
		t.Fatal("this process may run on no CPU")
	}
	for _, tc := range []struct {
		name string
		cpus string
		want int // CPUs the program may run on
	}{
		{name: "unpinned", cpus: "", want: own.Count()},
		{name: "one CPU", cpus: strconv.Itoa(first), want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := startProcess(dir, "sleeper", "/bin/sleep", tc.cpus, []string{"30"}, nil)
			if err != nil {
				t.Fatalf("starting: %v", err)
			}
			defer func() {
				_ = p.cmd.Process.Kill()
				<-p.Done()
			}()
			var got unix.CPUSet
			deadline := time.Now().Add(5 * time.Second)
			for {
				// Until taskset has exec'd, the pid is taskset's own with
				// the parent's affinity; the command line says which.
				cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid()), "cmdline"))
				if strings.HasPrefix(string(cmdline), "/bin/sleep\x00") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pid %d never became /bin/sleep: %q", p.Pid(), cmdline)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := unix.SchedGetaffinity(p.Pid(), &got); err != nil {
				t.Fatalf("reading the program's affinity: %v", err)
			}
			if got.Count() != tc.want {
				t.Errorf("the program may run on %d CPUs, want %d", got.Count(), tc.want)
			}
			if tc.cpus != "" && !got.IsSet(first) {
				t.Errorf("the program may not run on CPU %d, the one asked for", first)
			}
		})
	}
}
