package escape

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestBwrapWorkspacesSwept: fabro serve restarted on its data directory
// removes, in its bwrap plugin's workspace directory, the workspaces no
// record names (a dead sandbox's, with its disk image), and nothing else:
// not a live sandbox's, not a link's target, not another instance's.
func TestBwrapWorkspacesSwept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the escape suite runs fabro serve as root, as the isolating drivers need")
	}
	data := t.TempDir()
	s := startServeData(t, data)
	if !s.available(t, "bwrap") {
		t.Fatal("bwrap is not available on a root fabro serve")
	}
	live := s.create(t, &sandboxv1.SandboxSpec{Driver: "bwrap"})
	if r := s.exec(t, live, "echo kept > f && cat f"); string(r.GetStdout()) != "kept\n" {
		t.Fatalf("the live sandbox: %q %q", r.GetStdout(), r.GetStderr())
	}
	root := filepath.Dir(live.GetRootDirectory())
	if !strings.HasPrefix(root, "/tmp/fabro-bwrap/i-") {
		t.Fatalf("the bwrap workspace %s is not in an instance's directory", live.GetRootDirectory())
	}
	// The plants: a dead sandbox's workspace and an image beside it, a
	// link named like a workspace to a victim directory, and another
	// instance's workspace.
	dead := filepath.Join(root, "sandbox-dead1")
	victim := t.TempDir()
	other := filepath.Join("/tmp/fabro-bwrap", "i-other-"+filepath.Base(data), "sandbox-x")
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(other)) })
	for _, err := range []error{
		os.MkdirAll(filepath.Join(dead, "sub"), 0o700), os.WriteFile(filepath.Join(dead, "sub", "f"), []byte("x"), 0o600),
		os.WriteFile(filepath.Join(root, "sandbox-gone1.disk.img"), nil, 0o600),
		os.WriteFile(filepath.Join(victim, "secret"), []byte("v"), 0o600), os.Symlink(victim, filepath.Join(root, "sandbox-link1")),
		os.MkdirAll(other, 0o700),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(filepath.Join(root, "sandbox-link1")) })
	s.stop()
	s = startServeData(t, data)
	if !s.available(t, "bwrap") {
		t.Fatal("bwrap is not available after the restart")
	}
	for _, p := range []string{dead, filepath.Join(root, "sandbox-gone1.disk.img")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left after the restart: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(live.GetRootDirectory(), "f"), filepath.Join(root, "sandbox-link1"), filepath.Join(victim, "secret"), other} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("the sweep removed %s: %v", p, err)
		}
	}
	if r := s.exec(t, live, "cat f"); string(r.GetStdout()) != "kept\n" {
		t.Errorf("the live sandbox after the restart: %q %q", r.GetStdout(), r.GetStderr())
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	if _, err := s.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: live.GetSandboxId()}); err != nil {
		t.Error(err)
	}
}
