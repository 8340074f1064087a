package sandbox_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/sandbox"
)

// TestCommandsCannotReachTheServicesSecrets runs commands as a model
// would, in each kind of workspace, against a service that holds a secret
// in its environment and a data directory laid out as `fabro serve` lays
// it out: neither is reachable, while the project stays editable.
func TestCommandsCannotReachTheServicesSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the service is not root: commands run as its own user, and only non-dumpability guards its environment (tested by the root run in CI)")
	}
	const canary = "CANARY-env-8d7e1f"
	t.Setenv("FABRO_VAULT_KEK", canary)
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	for _, path := range []string{
		"vault/kek", "vault/secrets.db", "vault/service-tokens.json",
		"vault/audit.log", "agent/nats-subscriber.nk",
	} {
		p := filepath.Join(dataDir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(canary), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	projects := filepath.Join(base, "projects")
	rootOwned := filepath.Join(projects, "root-owned")
	userOwned := filepath.Join(projects, "user-owned")
	for _, d := range []string{rootOwned, userOwned} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "notes.txt"), []byte("notes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{userOwned, filepath.Join(userOwned, "notes.txt")} {
		if err := os.Chown(p, 54321, 0); err != nil { // a uid without a passwd entry, in root's group
			t.Fatal(err)
		}
	}
	client := startWith(t, sandbox.Config{DataDir: dataDir, Security: sandbox.Security{AllowedRoots: []string{projects}}})
	if fi, err := os.Stat(dataDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v %v, want mode 0700", fi, err)
	}

	for _, tc := range []struct{ name, dir string }{
		{"managed workspace", ""},
		{"designated directory owned by root", rootOwned},
		{"designated directory owned by a user", userOwned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			created, err := client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: tc.dir}})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetSandbox().GetSandboxId()
			t.Cleanup(func() { client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}) })
			run := func(cmd string) (int32, string) {
				t.Helper()
				resp, err := client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: cmd}})
				if err != nil {
					t.Fatalf("Exec(%q): %v", cmd, err)
				}
				r := resp.GetResult()
				return r.GetExitCode(), string(r.GetStdout()) + string(r.GetStderr())
			}
			if code, out := run("id -u"); code != 0 || strings.TrimSpace(out) == "0" {
				t.Errorf("id -u = %d %q: commands must not run as root", code, out)
			}
			if code, out := run("id -G"); code != 0 || slices.Contains(strings.Fields(out), "0") {
				t.Errorf("id -G = %d %q: commands must not run with root's group", code, out)
			}
			for _, attack := range []string{
				"cat /proc/$PPID/environ",
				"tr '\\0' '\\n' < /proc/" + strconv.Itoa(os.Getpid()) + "/environ",
				"cat /proc/" + strconv.Itoa(os.Getpid()) + "/task/*/environ",
				"head -c 64 /proc/" + strconv.Itoa(os.Getpid()) + "/mem",
				"ls " + dataDir,
				"ls " + filepath.Join(dataDir, "vault"),
				"cat " + filepath.Join(dataDir, "vault", "kek"),
				"cat " + filepath.Join(dataDir, "vault", "secrets.db"),
				"cat " + filepath.Join(dataDir, "vault", "service-tokens.json"),
				"cat " + filepath.Join(dataDir, "agent", "nats-subscriber.nk"),
				"grep -r CANARY " + dataDir,
			} {
				code, out := run(attack)
				if code == 0 || strings.Contains(out, canary) {
					t.Errorf("%s: exit %d, output %q; want a failure that reveals nothing", attack, code, out)
				}
			}
			// Search runs as the commands' user too: a directory only root
			// may read (as one a swapped link would lead to) stays closed.
			root := created.GetSandbox().GetRootDirectory()
			closed := filepath.Join(root, "closed-"+strconv.Itoa(len(tc.name)))
			if err := os.Mkdir(closed, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(closed, "k"), []byte(canary+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			g, err := client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "CANARY"})
			if strings.Contains(g.String(), canary) {
				t.Errorf("Grep as root read a directory the commands cannot: %v, %v", g, err)
			}
			os.RemoveAll(closed)
			// The project stays the user's to edit: files that were there,
			// files and directories the service's tools make, new ones.
			if _, err := client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "tools/api.txt", Content: []byte("by the tool\n")}); err != nil {
				t.Fatal(err)
			}
			if _, err := client.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "made/by/tool"}); err != nil {
				t.Fatal(err)
			}
			edit := "echo new > new.txt && mkdir -p sub && echo x > sub/y && echo edited >> tools/api.txt && echo z > made/by/tool/f && mv tools/api.txt tools/moved.txt && rm new.txt"
			if tc.dir != "" {
				edit = "echo more >> notes.txt && " + edit
			}
			if code, out := run(edit); code != 0 {
				t.Errorf("editing the workspace: exit %d: %s", code, out)
			}
		})
	}
}

// TestUnknownSandboxUser: a -sandbox-user that does not exist makes the
// local driver unavailable, rather than running commands as root.
func TestUnknownSandboxUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox user is used only when the service runs as root")
	}
	client := startWith(t, sandbox.Config{DataDir: filepath.Join(t.TempDir(), "data"), Security: sandbox.Security{User: "no-such-user-fabro"}})
	_, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no-such-user-fabro") {
		t.Errorf("CreateSandbox with an unknown sandbox user = %v, want Unavailable naming it", err)
	}
}

// TestGrantsStayInTheWorkspace: links in a root-owned project that lead
// out of it are not followed when the sandbox user is granted the tree.
func TestGrantsStayInTheWorkspace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("grants are made only when the service runs as root")
	}
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	project := filepath.Join(base, "projects", "p")
	for _, d := range []string{outside, project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("CANARY-outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"file-link": secret, "dir-link": outside} {
		if err := os.Symlink(target, filepath.Join(project, name)); err != nil {
			t.Fatal(err)
		}
	}
	client := startWith(t, sandbox.Config{DataDir: filepath.Join(base, "data"), Security: sandbox.Security{AllowedRoots: []string{filepath.Join(base, "projects")}}})
	created, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: project}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{secret, outside} {
		if n, err := syscall.Getxattr(p, "system.posix_acl_access", make([]byte, 256)); err == nil {
			t.Errorf("%s was given an ACL (%d bytes) through a link", p, n)
		}
	}
	resp, err := client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: created.GetSandbox().GetSandboxId(), Spec: &sandboxv1.ExecSpec{Command: "cat file-link dir-link/secret"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResult(); r.GetExitCode() == 0 || strings.Contains(string(r.GetStdout()), "CANARY") {
		t.Errorf("a command read a file outside the project through a link: %s", r.GetStdout())
	}
}
