// Command testplugin is a sandbox driver plugin that misbehaves on demand,
// for the service's plugin-loading tests: it serves the local driver as
// "test", and
//   - the command "__crash__" prints a line, then the plugin exits with
//     status 3 in the middle of the exec;
//   - the command "__hang__" wedges the plugin: that exec and every later
//     call (health checks included) block forever;
//   - TESTPLUGIN_PROTOCOL=N makes it speak only protocol version N.
package main

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

var hung atomic.Bool

type testDriver struct{ *local.Driver }

func (testDriver) Name() string { return "test" }

func (d testDriver) Available(ctx context.Context) error {
	if hung.Load() {
		select {}
	}
	return d.Driver.Available(ctx)
}

func (d testDriver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	if hung.Load() {
		select {}
	}
	sb, err := d.Driver.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return testSandbox{sb}, nil
}

type testSandbox struct{ driver.Sandbox }

func (s testSandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	switch spec.Command {
	case "__crash__":
		if out != nil {
			out.Started()
			out.Chunk(driver.Stdout, []byte("about to crash\n"))
		}
		os.Exit(3)
	case "__hang__":
		hung.Store(true)
		select {}
	}
	return s.Sandbox.Exec(ctx, spec, out)
}

// StartProcess passes the processes facet through to the local sandbox,
// so that the conformance kit checks it across the protocol.
func (s testSandbox) StartProcess(ctx context.Context, spec driver.ProcessSpec, out driver.Output) (driver.Process, error) {
	return s.Sandbox.(driver.ProcessStarter).StartProcess(ctx, spec, out)
}

func main() {
	var opts []plugin.Option
	if v, err := strconv.Atoi(os.Getenv("TESTPLUGIN_PROTOCOL")); err == nil {
		opts = append(opts, plugin.WithProtocolVersions(v))
	}
	plugin.Logger().Info("test plugin up", "marker", "testplugin-log-line")
	plugin.Serve(testDriver{local.New(local.Config{})}, opts...)
}
