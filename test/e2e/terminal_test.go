//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// TestClusterCommandCtrlCAtATerminal presses Ctrl-C at the terminal the
// localcluster command runs at, under a shell standing for the go run and
// make above it, as `make run` and `make cluster` run it: the command
// stops everything it started and says so in one line, and the shell,
// which the interrupt must not reach, goes on and sees it exit 0. Before
// the command took the terminal's foreground, the interrupt reached the
// shell too, which died of it, and make reported the clean stop as an
// error.
func TestClusterCommandCtrlCAtATerminal(t *testing.T) {
	inLane(t, laneLight)
	bin := filepath.Join(t.TempDir(), "localcluster")
	if out, err := exec.Command("go", "build", "-o", bin, "../localcluster/cmd/localcluster").CombinedOutput(); err != nil {
		t.Fatalf("building localcluster: %v\n%s", err, out)
	}
	dir := t.TempDir()
	stateFile := filepath.Join(dir, "state.json")
	master, slave, err := openPty()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	script := fmt.Sprintf("%q --state-file %q --kubeconfig-out %q; echo \"exit=$?\"", bin, stateFile, filepath.Join(dir, "kubeconfig"))
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "FCM_BIN_DIR="+binDir(t))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// The shell leads a session whose terminal is the pty, as a login
	// shell's make would be.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var mu sync.Mutex
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	var st struct{ Pids []int }
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(stateFile)
		if err != nil {
			return false, nil
		}
		return strings.Contains(output(), "Press Ctrl-C"), json.Unmarshal(data, &st)
	}); err != nil {
		t.Fatalf("waiting for the cluster: %v\n%s", err, output())
	}
	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the shell above the command: %v (the interrupt reached it)", err)
	}
	select {
	case <-read:
	case <-time.After(10 * time.Second):
	}
	got := output()
	if !strings.Contains(got, "exit=0") {
		t.Errorf("the shell did not see the command exit 0 after Ctrl-C:\n%s", got)
	}
	if !strings.Contains(got, "Stopped: every process of the local cluster has exited.") {
		t.Errorf("the command did not say it stopped everything:\n%s", got)
	}
	for _, pid := range st.Pids {
		if localcluster.ProcessAlive(pid) {
			t.Errorf("process %d of the cluster still alive after Ctrl-C", pid)
		}
	}
}

// openPty opens a pseudo-terminal: its master, and its slave for a child.
func openPty() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlocking the pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("naming the pty: %w", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening the pty's slave: %w", err)
	}
	return master, slave, nil
}
