//go:build !linux

package pty

import (
	"errors"
	"io"
	"os"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Open fails: terminals need linux.
func Open(driver.TerminalSize) (*os.File, *os.File, error) {
	return nil, nil, errors.New("terminals need linux")
}

// SetSize fails: terminals need linux.
func SetSize(*os.File, driver.TerminalSize) error { return errors.New("terminals need linux") }

// Input is the master as a process's stdin.
func Input(master *os.File) io.WriteCloser { return master }
