//go:build !linux

package local

import (
	"errors"
	"os"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func openPty(driver.TerminalSize) (*os.File, *os.File, error) {
	return nil, nil, errors.New("terminals need linux")
}

func setPtySize(*os.File, driver.TerminalSize) error { return errors.New("terminals need linux") }
