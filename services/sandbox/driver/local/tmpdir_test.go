package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// TestPrivateTmp: a managed workspace's commands get a TMPDIR of its own,
// inside the workspace, whatever the service's TMPDIR: mktemp files land
// there, and with a disk limit filling it hits the limit, not the host's
// /tmp.
func TestPrivateTmp(t *testing.T) {
	d := local.New(local.Config{WorkspaceRoot: t.TempDir(), PrivateTmp: true, Environ: []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp"}})
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	want := filepath.Join(sb.Info().RootDirectory, local.TmpDirName)
	if got := drivertest.Sh(t, sb, `f=$(mktemp) && dirname "$f" && echo x > "$f" && echo "$TMPDIR"`); got != want+"\n"+want+"\n" {
		t.Errorf("mktemp's directory and TMPDIR: %q; want %s twice", got, want)
	}
	if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the temporary directory: %v %v; want mode 0700", fi, err)
	}

	t.Run("disk limit", func(t *testing.T) {
		needDisk(t, d)
		sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{DiskBytes: 16 << 20}})
		res := run(t, sb, `f=$(mktemp) && head -c 64m /dev/zero > "$f"; echo rc=$?`, 30*time.Second)
		if !strings.Contains(string(res.Stdout), "rc=1") || res.LimitHit != driver.LimitDisk {
			t.Errorf("64 MiB into $TMPDIR under a 16 MiB limit: %q %q, limit hit %d; want ENOSPC and the disk limit", res.Stdout, res.Stderr, res.LimitHit)
		}
	})
}
