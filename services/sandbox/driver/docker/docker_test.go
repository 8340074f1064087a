package docker_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
)

// newDriver returns a driver on the engine of this machine, whose
// containers carry an owner of the test's own.
func newDriver(t *testing.T) *docker.Driver {
	t.Helper()
	d := docker.New(docker.Config{WorkspaceRoot: t.TempDir(), Owner: "fabro-test"})
	t.Cleanup(func() { d.Close() })
	if err := d.Available(t.Context()); err != nil {
		t.Fatalf("the Docker engine is needed: %v", err)
	}
	return d
}

func TestContract(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) driver.Driver { return newDriver(t) })
}

var _ = context.Background
var _ = exec.Command
