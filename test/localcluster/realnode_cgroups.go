package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// cgroupMountRoot is where this machine mounts its cgroup v1 hierarchies.
const cgroupMountRoot = "/sys/fs/cgroup"

// cgroupHierarchies are the mounted cgroup v1 hierarchies (cpu, memory,
// pids, ...), the named systemd one among them.
func cgroupHierarchies() []string {
	entries, err := os.ReadDir(cgroupMountRoot)
	if err != nil {
		return nil
	}
	var hierarchies []string
	for _, e := range entries {
		path := filepath.Join(cgroupMountRoot, e.Name())
		// A combined hierarchy (cpu,cpuacct) is also reachable through
		// symbolic links named after each controller: take it once.
		if info, err := os.Lstat(path); err != nil || !info.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(path, "cgroup.procs")); err == nil {
			hierarchies = append(hierarchies, path)
		}
	}
	return hierarchies
}

// createCgroupRoot makes the kubelet's cgroup root in every hierarchy: the
// kubelet refuses a root that is missing from one, and keeping its pods
// under a root of this cluster's name lets two clusters share a machine.
func (n *realNode) createCgroupRoot() error {
	hierarchies := cgroupHierarchies()
	if len(hierarchies) == 0 {
		return fmt.Errorf("no cgroup hierarchies under %s: the real node needs cgroup v1", cgroupMountRoot)
	}
	for _, hierarchy := range hierarchies {
		dir := filepath.Join(hierarchy, n.cgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating the real node's cgroup: %w", err)
		}
		// A new cpuset has no CPUs or memory nodes until given its parent's.
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(hierarchy, file))
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, file), parent, 0o644); err != nil {
				return fmt.Errorf("creating the real node's cpuset: %w", err)
			}
		}
	}
	return nil
}

// removeCgroupTree kills every process left in a cgroup and its children,
// then removes them, deepest first. It fails while a cgroup still holds a
// process that has not exited yet.
func removeCgroupTree(root string) error {
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
		for _, field := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(field); err == nil {
				killPid(pid)
			}
		}
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

func killPid(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }
