//go:build !linux

package local

import (
	"os"
	"os/exec"
)

// DefaultUser is the sandbox user on Linux; elsewhere commands run as the
// service's user.
const DefaultUser = "fabro-sandbox"

type runAs struct{}

func (d *Driver) commandUser(*os.Root, string, bool) (runAs, error) { return runAs{}, nil }
func (runAs) env() []string                                         { return nil }
func (runAs) apply(*exec.Cmd)                                       {}
func (runAs) adopt(*os.Root, string) error                          { return nil }
func (runAs) other() bool                                           { return false }
func (runAs) release(*UIDs)                                         {}
