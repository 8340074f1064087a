package drivertest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// DiskLimit checks that a sandbox made with sbSpec (its Limits.DiskBytes set,
// at most 64 MiB) bounds its workspace: writing 4× the limit there fails
// with ENOSPC, the result says LimitDisk, and the sandbox works on. With
// tmp, /tmp is bounded the same way. It returns the sandbox, deleted by
// the caller (to check what Delete removes).
func DiskLimit(t *testing.T, d driver.Driver, sbSpec driver.Spec, tmp bool) driver.Sandbox {
	t.Helper()
	lim := sbSpec.Limits.DiskBytes
	if lim <= 0 || lim > 64<<20 {
		t.Fatalf("DiskLimit wants a limit of at most 64 MiB, got %d", lim)
	}
	sb, err := d.Create(t.Context(), sbSpec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	over := (4 * lim) >> 20
	places := []string{"."}
	if tmp {
		places = append(places, "/tmp")
	}
	for _, dir := range places {
		cmd := "cd " + dir + " && head -c " + strconv.FormatInt(over, 10) + "m /dev/zero > fill; echo rc=$?; ls -l fill | awk '{print $5}'"
		res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: cmd, Timeout: 60 * time.Second, RetainLimit: 1 << 16}, nil)
		if err != nil {
			sb.Delete(context.WithoutCancel(t.Context()))
			t.Fatalf("Exec in %s: %v", dir, err)
		}
		out := string(res.Stdout)
		if !strings.Contains(out, "rc=1") || !strings.Contains(strings.ToLower(string(res.Stderr)), "no space left") {
			t.Errorf("writing %d MiB into %s under a %d MiB limit: stdout %q stderr %q; want ENOSPC", over, dir, lim>>20, out, res.Stderr)
		}
		if f := strings.Fields(out); len(f) == 2 {
			if n, _ := strconv.ParseInt(f[1], 10, 64); n > lim {
				t.Errorf("%s took %d bytes, over the %d-byte limit", dir, n, lim)
			}
		}
		if dir == "." && res.LimitHit != driver.LimitDisk {
			t.Errorf("a full workspace: LimitHit %v; want LimitDisk", res.LimitHit)
		}
		Sh(t, sb, "rm -f "+dir+"/fill")
	}
	if got := Sh(t, sb, "echo ok > f && cat f"); got != "ok\n" {
		t.Errorf("after the fill: %q", got)
	}
	if res, err := sb.Exec(t.Context(), spec("echo ok"), nil); err != nil || res.LimitHit != driver.LimitNone {
		t.Errorf("after the fill was removed: hit %v, %v", res.LimitHit, err)
	}
	return sb
}
