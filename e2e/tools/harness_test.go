package tools_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/fabro-sh/fabro-go/services/agent/tooltest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// box is a real sandbox service (local driver) over bufconn, with one
// sandbox whose working directory is a temp dir.
type box struct {
	client sandboxv1.SandboxServiceClient
	id     string
	root   string // the working directory, on the host and in the sandbox
}

func newBox(t *testing.T) *box {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox's working directory is an allowed root, as the operator
	// lists it with -sandbox-allowed-roots.
	svc, err := sandbox.New(sandbox.Config{Drivers: []driver.Driver{local.New(local.Config{WorkspaceRoot: t.TempDir()})},
		Security: sandbox.Security{AllowedRoots: []string{dir}}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	svc.RegisterGRPC(srv)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		svc.Close(context.Background())
	})
	client := sandboxv1.NewSandboxServiceClient(conn)
	resp, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: dir}})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	return &box{client: client, id: resp.GetSandbox().GetSandboxId(), root: resp.GetSandbox().GetWorkingDirectory()}
}

func (b *box) env() Env {
	return Env{Sandbox: b.client, SandboxID: b.id, WorkDir: b.root, SessionID: "sess-1"}
}

// set returns a tool set over the box.
func (b *box) set(profile string, level PermissionLevel, edit func(*Env)) *Set {
	env := b.env()
	if edit != nil {
		edit(&env)
	}
	return NewSet(profile, level, env, nil)
}

func (b *box) path(rel string) string { return filepath.Join(b.root, rel) }

func (b *box) write(t *testing.T, rel, content string) {
	t.Helper()
	p := b.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *box) read(t *testing.T, rel string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(b.path(rel))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data), true
}

// args renders a map as JSON arguments.
func args(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func run(t *testing.T, s *Set, name string, a map[string]any) Result {
	t.Helper()
	return s.Run(t.Context(), Call{ID: "call-1", Name: name, Arguments: args(t, a)})
}

// check asserts a result's error state and that its output contains every
// want string.
func check(t *testing.T, r Result, wantKind string, want ...string) {
	t.Helper()
	if wantKind == "" && r.IsError {
		t.Fatalf("unexpected error result (%s): %s", r.ErrorKind, r.Output)
	}
	if wantKind != "" && (!r.IsError || r.ErrorKind != wantKind) {
		t.Fatalf("got IsError=%v kind=%q, want kind %q; output:\n%s", r.IsError, r.ErrorKind, wantKind, r.Output)
	}
	for _, w := range want {
		if !strings.Contains(r.Output, w) {
			t.Fatalf("output does not contain %q:\n%s", w, r.Output)
		}
	}
}
