package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// needDisk skips where the driver states no disk limit (a service not
// running as root): TestDiskLimitRefusedUnsupported covers that side.
func needDisk(t *testing.T, d *local.Driver) {
	if !d.Capabilities().Limits.Disk {
		t.Skip("no disk limit here (not root, or no mkfs.ext4 / loop devices)")
	}
}

func TestDiskLimit(t *testing.T) {
	root := t.TempDir()
	d := local.New(local.Config{WorkspaceRoot: root})
	needDisk(t, d)
	sb := drivertest.DiskLimit(t, d, driver.Spec{Limits: driver.Limits{DiskBytes: 16 << 20}}, false)
	dir := sb.Info().RootDirectory
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var line string
	for l := range strings.SplitSeq(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == dir {
			line = l
		}
	}
	if !strings.Contains(line, "nosuid") || !strings.Contains(line, "nodev") {
		t.Errorf("the workspace's mount %q: want nosuid,nodev", line)
	}
	if err := sb.Delete(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mountsNow(), " "+dir+" ") {
		t.Error("the workspace is still mounted after Delete")
	}
	left, _ := filepath.Glob(filepath.Join(root, "*"))
	if len(left) != 0 {
		t.Errorf("Delete left %v", left)
	}
}

func mountsNow() string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return string(b)
}

// A disk limit bounds managed workspaces only: a given directory is
// refused, and best effort runs without it.
func TestDiskLimitGivenDirectory(t *testing.T) {
	d := local.New(local.Config{WorkspaceRoot: t.TempDir()})
	needDisk(t, d)
	dir := t.TempDir()
	_, err := d.Create(t.Context(), driver.Spec{WorkingDirectory: dir, Limits: driver.Limits{DiskBytes: 16 << 20}})
	if !errors.Is(err, driver.ErrLimitUnsupported) {
		t.Fatalf("a disk limit on a given directory: %v; want ErrLimitUnsupported", err)
	}
	sb := drivertest.NewSandbox(t, d, driver.Spec{WorkingDirectory: dir, Limits: driver.Limits{DiskBytes: 16 << 20, BestEffort: true}})
	if got := drivertest.Sh(t, sb, "head -c 20m /dev/zero > f && wc -c < f"); got != "20971520\n" {
		t.Errorf("best effort: %q", got)
	}
}
