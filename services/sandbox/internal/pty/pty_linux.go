// Package pty opens pseudo-terminals for the drivers' terminals facet
// (ProcessSpec.Terminal): local and bwrap give a process the slave and keep
// the master.
package pty

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Open opens a new pseudo-terminal of the given size: the master, and
// the slave the process gets as stdin, stdout and stderr.
func Open(size driver.TerminalSize) (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	// Non-blocking, so that reads go through the poller and take deadlines.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("pty: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	slave = os.NewFile(uintptr(sfd), name)
	if err := SetSize(master, size); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// SetSize sets the terminal's size; its foreground group gets SIGWINCH.
func SetSize(master *os.File, size driver.TerminalSize) error {
	ws := &unix.Winsize{Row: uint16(size.Rows), Col: uint16(size.Cols)}
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("set terminal size: %w", err)
	}
	return nil
}

// Input is the master as a process's stdin: Close sends the end-of-file
// character instead of closing, since the master is also the output.
func Input(master *os.File) io.WriteCloser { return input{master} }

type input struct{ *os.File }

func (w input) Close() error {
	_, err := w.File.Write([]byte{4}) // VEOF, ^D
	return err
}
