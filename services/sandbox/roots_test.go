package sandbox_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// startWith runs the service with its default local driver on a data
// directory, as `fabro serve` does.
func startWith(t *testing.T, cfg sandbox.Config) sandboxv1.SandboxServiceClient {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := sandbox.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, logger, svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		svc.Close(context.Background())
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sandboxv1.NewSandboxServiceClient(conn)
}

// TestSandboxRootsAreConfined: a sandbox may be rooted only under the
// allowed roots; "/", the data directory, anything above it or inside it
// (but a workspace) and links leading there are refused.
func TestSandboxRootsAreConfined(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	dataDir := filepath.Join(home, ".local", "share", "fabro")
	project := filepath.Join(home, "project")
	outside := filepath.Join(base, "elsewhere")
	for _, d := range []string{dataDir, filepath.Join(dataDir, "vault"), project, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dataDir, "vault"), filepath.Join(project, "vault-link")); err != nil {
		t.Fatal(err)
	}
	client := startWith(t, sandbox.Config{DataDir: dataDir, Security: sandbox.Security{AllowedRoots: []string{home}}})
	// A managed workspace is always allowed; its directory is a workspace.
	managed, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
	if err != nil {
		t.Fatal(err)
	}
	ws := managed.GetSandbox().GetWorkingDirectory()

	tests := []struct {
		name string
		dir  string
		want codes.Code
	}{
		{"the project, under an allowed root", project, codes.OK},
		{"a managed workspace, again", ws, codes.OK},
		{"the host's root", "/", codes.PermissionDenied},
		{"the data directory", dataDir, codes.PermissionDenied},
		{"inside the data directory", filepath.Join(dataDir, "vault"), codes.PermissionDenied},
		{"the allowed root, which holds the data directory", home, codes.PermissionDenied},
		{"above the data directory", filepath.Join(home, ".local"), codes.PermissionDenied},
		{"the workspaces directory itself", filepath.Dir(ws), codes.PermissionDenied},
		{"a link into the data directory", filepath.Join(project, "vault-link"), codes.PermissionDenied},
		{"a path climbing out", project + "/../../elsewhere", codes.PermissionDenied},
		{"outside every allowed root", outside, codes.PermissionDenied},
		{"/etc", "/etc", codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: tt.dir}})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("CreateSandbox(%s) = %v, want %v", tt.dir, err, tt.want)
			}
			if err == nil {
				client.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()})
				return
			}
			var reason string
			for _, d := range status.Convert(err).Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.GetReason()
				}
			}
			if reason != "ROOT_NOT_ALLOWED" {
				t.Errorf("ErrorInfo reason = %q, want ROOT_NOT_ALLOWED", reason)
			}
		})
	}

	// A container's working directory is a path inside it, not on this
	// host; the host directory it mounts (host_dir) is checked instead.
	t.Run("docker", func(t *testing.T) {
		needsDocker(t)
		if _, err := exec.LookPath("docker"); err != nil || exec.Command("docker", "image", "inspect", "fabro/sandbox-base:dev").Run() != nil {
			t.Skip("no Docker engine with fabro/sandbox-base:dev (make sandbox-image builds it)")
		}
		resp, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "docker", WorkingDirectory: "/src"}})
		if err != nil {
			t.Fatalf("a docker sandbox working in /src: %v", err)
		}
		client.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()})
		_, err = client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "docker", DriverOptions: map[string]string{"host_dir": dataDir}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("a docker sandbox mounting the data directory: %v, want PermissionDenied", err)
		}
		// The engine's bind syntax splits on ':' and ',': a clear refusal,
		// never INTERNAL.
		_, err = client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "docker", WorkingDirectory: "/src:/etc"}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("a docker working directory holding ':': %v, want InvalidArgument", err)
		}
	})

	// Without allowed roots, only managed workspaces are allowed.
	strict := startWith(t, sandbox.Config{DataDir: filepath.Join(base, "data2")})
	if _, err := strict.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: project}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a project without allowed roots: %v, want PermissionDenied", err)
	}
}

// TestNoDataDirExemptsOnlyItsWorkspaces: without a data directory the
// managed workspaces live in a directory of their own; the exemption does
// not reach the rest of the system's temporary directory.
func TestNoDataDirExemptsOnlyItsWorkspaces(t *testing.T) {
	client := startWith(t, sandbox.Config{})
	managed, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
	if err != nil {
		t.Fatal(err)
	}
	ws := managed.GetSandbox().GetWorkingDirectory()
	if filepath.Dir(ws) == filepath.Clean(os.TempDir()) {
		t.Fatalf("managed workspace %s lies directly in the temporary directory", ws)
	}
	_, err = client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: t.TempDir()}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a directory under the temporary directory: %v, want PermissionDenied", err)
	}
}

// swapDriver is the local driver with a link swapped between the
// service's check and the driver's own resolution of the path.
type swapDriver struct {
	driver.Driver
	link, to string
}

func (d swapDriver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	if spec.WorkingDirectory == d.link {
		os.Remove(d.link)
		if err := os.Symlink(d.to, d.link); err != nil {
			return nil, err
		}
	}
	return d.Driver.Create(ctx, spec)
}

// TestSwappedLinkIsRefused: a link that pointed into an allowed root when
// checked, and into the data directory when the driver opened it, is
// refused and the sandbox is not kept.
func TestSwappedLinkIsRefused(t *testing.T) {
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	projects := filepath.Join(base, "projects")
	for _, d := range []string{filepath.Join(dataDir, "vault"), filepath.Join(projects, "real")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(projects, "link")
	if err := os.Symlink(filepath.Join(projects, "real"), link); err != nil {
		t.Fatal(err)
	}
	d := swapDriver{Driver: local.New(local.Config{WorkspaceRoot: filepath.Join(dataDir, "sandbox", "workspaces")}), link: link, to: filepath.Join(dataDir, "vault")}
	client := startWith(t, sandbox.Config{DataDir: dataDir, Drivers: []driver.Driver{d}, Security: sandbox.Security{AllowedRoots: []string{projects}}})
	_, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: link}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a link swapped into the data directory: %v, want PermissionDenied", err)
	}
	list, err := client.ListSandboxes(t.Context(), &sandboxv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 0 {
		t.Fatalf("sandboxes kept: %v %v", list.GetSandboxes(), err)
	}
}

// TestReopenRechecksRoots: a sandbox whose root a narrowed policy no longer
// allows comes back FAILED after a restart, with the reason.
func TestReopenRechecksRoots(t *testing.T) {
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	project := filepath.Join(base, "projects", "p")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := sandbox.New(sandbox.Config{DataDir: dataDir, Security: sandbox.Security{AllowedRoots: []string{filepath.Dir(project)}}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, logger, first)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sandboxv1.NewSandboxServiceClient(conn).CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: project}})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	srv.Shutdown(context.Background())
	first.Close(context.Background())

	client := startWith(t, sandbox.Config{DataDir: dataDir})
	got, err := client.GetSandbox(t.Context(), &sandboxv1.GetSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_FAILED {
		t.Fatalf("state = %v, want FAILED", got.GetSandbox().GetState())
	}
}
