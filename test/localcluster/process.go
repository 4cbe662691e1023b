package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is one program the local control plane started. Its output goes to
// a log file in the cluster's directory.
type Process struct {
	Name    string
	LogPath string

	bin  string
	args []string
	env  []string
	// cpus, when set, is the CPU list (taskset's -c syntax) the program
	// and every thread it starts may run on.
	cpus string
	// container, when set, runs the program as a container runtime would:
	// in its root, as its user, with only its environment.
	container *Container
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

func startProcess(dir, name, bin, cpus string, args []string, env []string) (*Process, error) {
	p := &Process{Name: name, bin: bin, args: args, env: env, cpus: cpus, LogPath: filepath.Join(dir, name+".log")}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Process) start() error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	if p.cpus != "" {
		// taskset sets the affinity and execs the program, so the pid is the
		// program's and its threads inherit the set from their first.
		cmd = exec.Command("taskset", append([]string{"--cpu-list", p.cpus, p.bin}, p.args...)...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), p.env...)
	// Own process group so signals from a terminal reach only us; Pdeathsig so
	// that a test binary killed outright (timeout, kill -9) takes its children
	// with it instead of leaving an apiserver behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if ctr := p.container; ctr != nil {
		cmd.Env = ctr.Env
		cmd.Dir = "/"
		cmd.SysProcAttr.Chroot = ctr.Root
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: ctr.UID, Gid: ctr.GID, Groups: ctr.Groups}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s (%s): %w", p.Name, p.bin, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	p.err = nil
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return nil
}

// Pid is the operating system's id of the running program.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the program has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Done is closed when the program ends.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the program (SIGSTOP, SIGCONT and SIGKILL are used by
// failure tests).
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling %s: %w", p.Name, err)
	}
	return nil
}

// Stop asks the program to end with SIGTERM and kills it when it has not
// ended within grace. A stopped program is resumed first so it can see the
// signal.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not end after SIGKILL", p.Name, p.Pid())
	}
}

// Restart stops the program and starts it again with the same arguments.
func (p *Process) Restart(grace time.Duration) error {
	if err := p.Stop(grace); err != nil {
		return err
	}
	return p.start()
}

// LogTail returns the last n lines of the program's log.
func (p *Process) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// failed wraps err with the tail of the program's log, which is nearly always
// where the reason is.
func (p *Process) failed(err error) error {
	return fmt.Errorf("%s: %w\n--- last lines of %s ---\n%s", p.Name, err, p.LogPath, p.LogTail(30))
}

// ProcessAlive reports whether pid names a live (not zombie) process.
func ProcessAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return !errors.Is(err, syscall.ESRCH)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
