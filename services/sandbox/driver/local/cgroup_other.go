//go:build !linux

package local

import (
	"os/exec"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Never reached off linux: Create refuses to make a sandbox.

type cgroupHost struct {
	limits driver.LimitSupport
	reason string
	swept  int
}

func (h *cgroupHost) enabled() bool { return false }

func hostCgroups() *cgroupHost { return &cgroupHost{reason: "no cgroups off linux"} }

type cmdGroup struct{}

func (h *cgroupHost) newCmdGroup(string, driver.Limits) (*cmdGroup, error) { return nil, nil }
func (g *cmdGroup) start(cmd *exec.Cmd) error                              { return cmd.Start() }
func (g *cmdGroup) kill(int)                                               {}
func (g *cmdGroup) hit() driver.LimitHit                                   { return driver.LimitNone }
func (g *cmdGroup) remove()                                                {}
