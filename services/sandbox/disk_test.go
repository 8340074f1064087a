package sandbox_test

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/fake"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// TestDiskLimitRefused: a driver that cannot bound disk (the fake; local
// on a service not running as root) refuses a disk limit with
// FAILED_PRECONDITION naming it, and a negative one is INVALID_ARGUMENT.
func TestDiskLimitRefused(t *testing.T) {
	h := start(t, &fake.Driver{})
	_, err := h.client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "fake",
		Limits: &sandboxv1.ResourceLimits{DiskBytes: 1 << 30}}})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "LIMIT_UNSUPPORTED" || !strings.Contains(status.Convert(err).Message(), "disk_bytes") {
		t.Errorf("an unenforceable disk limit = %v; want FAILED_PRECONDITION LIMIT_UNSUPPORTED naming disk_bytes", err)
	}
	_, err = h.client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "fake",
		Limits: &sandboxv1.ResourceLimits{DiskBytes: -1}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a negative disk limit = %v; want INVALID_ARGUMENT", err)
	}
}

// TestDiskDefaultAndMax: the service's default bounds a managed workspace
// whose spec sets no limit (a write past it is ENOSPC and
// LIMIT_EXCEEDED_DISK), never a directory of the caller's; a limit over
// the maximum is INVALID_ARGUMENT.
func TestDiskDefaultAndMax(t *testing.T) {
	d := local.New(local.Config{WorkspaceRoot: t.TempDir()})
	if !d.Capabilities().Limits.Disk {
		t.Skip("the local driver bounds disk only on a root service")
	}
	h := startConfig(t, sandbox.Config{Drivers: []driver.Driver{d}, Security: sandbox.Security{AllowedRoots: []string{os.TempDir()}, DiskDefault: 16 << 20, DiskMax: 32 << 20}})
	sb := h.create(t, &sandboxv1.SandboxSpec{})
	resp, err := h.client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: sb.GetSandboxId(), Spec: &sandboxv1.ExecSpec{Command: "head -c 40m /dev/zero > f"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResult(); r.GetLimitExceeded() != sandboxv1.LimitExceeded_LIMIT_EXCEEDED_DISK || !strings.Contains(string(r.GetStderr()), "No space left") {
		t.Errorf("40 MiB under the 16 MiB default: %v; want ENOSPC and LIMIT_EXCEEDED_DISK", r)
	}
	if !sb.GetCapabilities().GetLimits().GetDisk() {
		t.Error("the sandbox does not state the disk limit")
	}
	_, err = h.client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Limits: &sandboxv1.ResourceLimits{DiskBytes: 64 << 20}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "maximum") {
		t.Errorf("64 MiB over a 32 MiB maximum = %v; want INVALID_ARGUMENT", err)
	}
	given := h.create(t, &sandboxv1.SandboxSpec{WorkingDirectory: t.TempDir()})
	if out, err := execOut(t, h.client, given.GetSandboxId(), "head -c 20m /dev/zero > f && wc -c < f"); err != nil || out != "20971520\n" {
		t.Errorf("a given directory under the default: %q, %v; want no bound", out, err)
	}
}
