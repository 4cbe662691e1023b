package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeForeground makes this process the terminal's foreground process
// group, when its standard input is the terminal and it is in the
// foreground, and returns what gives the terminal back. Ctrl-C then
// interrupts only this process, which stops everything it started and
// exits 0, and not the go run and make above it: interrupted themselves,
// they would report the clean stop as "make: *** [run] Error 1" (or
// Interrupt). The processes it starts run in groups of their own
// (localcluster.Process) and hear nothing of the terminal either.
func takeForeground() (giveBack func(), err error) {
	tty := int(os.Stdin.Fd())
	foreground, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	if err != nil || foreground != unix.Getpgrp() {
		// Not a terminal, or not in its foreground (a background job, a
		// test): nothing to take.
		return func() {}, nil
	}
	// A process outside the foreground group that sets it is sent
	// SIGTTOU, as this one is when it gives the terminal back.
	signal.Ignore(syscall.SIGTTOU)
	if err := unix.Setpgid(0, 0); err != nil {
		return nil, fmt.Errorf("leading a process group of its own: %w", err)
	}
	if err := unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, unix.Getpgrp()); err != nil {
		return nil, fmt.Errorf("taking the terminal's foreground: %w", err)
	}
	return func() { _ = unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, foreground) }, nil
}
