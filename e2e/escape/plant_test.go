package escape

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// watcher, run by a local sandbox's command: for every directory made in
// the directory it watches, it plants <dir>.disk.img as a link to the
// victim's image, as fast as inotify lets it. It says "nowatch" when it
// cannot watch that directory at all.
const watcher = `
import ctypes, os, struct, sys, time
parent, target, until = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0o4000)
if libc.inotify_add_watch(fd, parent.encode(), 0x100) < 0:
    print("nowatch", flush=True); sys.exit(0)
print("watching", flush=True)
while time.time() < until:
    try:
        buf = os.read(fd, 65536)
    except BlockingIOError:
        time.sleep(0.0005); continue
    i = 0
    while i < len(buf):
        _, mask, _, ln = struct.unpack_from("iIII", buf, i)
        name = buf[i+16:i+16+ln].rstrip(b"\0").decode()
        i += 16 + ln
        if mask & 0x40000000 and name.startswith("sandbox-"):
            try:
                os.symlink(target, os.path.join(parent, name + ".disk.img")); print("planted", name, flush=True)
            except OSError as e:
                print("missed", name, e, flush=True)
`

// TestNoForeignDiskImage: a local sandbox's command, which shares the
// host's directories, plants the disk image of every bwrap workspace made
// next as a link to another sandbox's image. No bwrap sandbox ever sees
// the victim's files.
func TestNoForeignDiskImage(t *testing.T) {
	s := rootServe(t)
	if !s.available(t, "bwrap") {
		t.Fatal("bwrap is not available on a root fabro serve")
	}
	disk := &sandboxv1.ResourceLimits{DiskBytes: 16 << 20}
	victim := s.create(t, &sandboxv1.SandboxSpec{Driver: "local", Limits: disk})
	if r := s.exec(t, victim, "echo victim-secret > secret && cat secret"); string(r.GetStdout()) != "victim-secret\n" {
		t.Fatalf("the plant: %q %q", r.GetStdout(), r.GetStderr())
	}
	victimImg := victim.GetRootDirectory() + ".disk.img"
	probe := s.create(t, &sandboxv1.SandboxSpec{Driver: "bwrap", Limits: disk})
	parent := filepath.Dir(probe.GetRootDirectory())
	attacker := s.create(t, &sandboxv1.SandboxSpec{Driver: "local"})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	if _, err := s.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: attacker.GetSandboxId(), Path: "w.py", Content: []byte(watcher)}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := s.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: attacker.GetSandboxId(), Spec: &sandboxv1.ExecSpec{
			Timeout: durationpb.New(time.Minute), Command: fmt.Sprintf("/usr/bin/python3 w.py %s %s 25", parent, victimImg)}})
		done <- result{string(resp.GetResult().GetStdout()), err}
	}()
	time.Sleep(2 * time.Second) // the watcher's start; what it printed tells whether it watched
	created, leaked := 0, 0
	for range 12 {
		resp, err := s.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "bwrap", Limits: disk}})
		if err != nil {
			continue // a plant may make the create fail: that is not an escape
		}
		sb := resp.GetSandbox()
		created++
		if r := s.exec(t, sb, "cat secret 2>/dev/null; ls"); strings.Contains(string(r.GetStdout()), "victim") {
			leaked++
		}
		s.client.DeleteSandbox(context.WithoutCancel(ctx), &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()})
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Logf("%d bwrap sandboxes made; the watcher: %s", created, res.out)
	if leaked > 0 {
		t.Errorf("%d of %d new bwrap sandboxes mounted the victim's workspace through a planted image link", leaked, created)
	}
	switch {
	case strings.HasPrefix(res.out, "nowatch"):
		// The workspaces' directory is closed to a sandbox's command.
	case !strings.Contains(res.out, "planted"):
		t.Fatalf("the watcher watched %s but planted nothing: the race proved nothing\n%s", parent, res.out)
	}
}

// rootServe starts fabro serve for a test that needs it as root.
func rootServe(t *testing.T) *serve {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the escape suite runs fabro serve as root, as the isolating drivers need")
	}
	return startServe(t)
}
