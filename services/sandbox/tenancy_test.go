package sandbox_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// tenancy is the sandbox service with authentication on: two users, an
// admin and the agent's service token, each call's token in its context.
type tenancy struct {
	client                  sandboxv1.SandboxServiceClient
	http                    string
	log                     *authtest.LogBuffer
	alice, bob, root, agent string
	stop                    func()
}

// startTenancy starts the service on dataDir; tokens is an earlier
// tenancy whose tokens to keep (a restart), or nil for new ones.
func startTenancy(t *testing.T, dataDir string, fx *authtest.Fixture, tokens *tenancy) *tenancy {
	t.Helper()
	tn := &tenancy{log: &authtest.LogBuffer{}}
	if tokens != nil {
		tn.alice, tn.bob, tn.root, tn.agent = tokens.alice, tokens.bob, tokens.root, tokens.agent
	} else {
		tn.alice, tn.bob = fx.Token("alice", auth.RoleUser), fx.Token("bob", auth.RoleUser)
		tn.root, tn.agent = fx.Token("root", auth.RoleAdmin), fx.Token(auth.ServiceAgent, auth.RoleService)
	}
	logger := slog.New(slog.NewTextHandler(tn.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc, err := sandbox.New(sandbox.Config{DataDir: dataDir, Drivers: []driver.Driver{local.New(local.Config{WorkspaceRoot: filepath.Join(dataDir, "ws")})},
		Security: sandbox.Security{AllowedRoots: []string{os.TempDir()}}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: fx.Store}, logger, svc)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	tn.stop = func() {
		once.Do(func() {
			conn.Close()
			srv.Shutdown(context.Background())
			svc.Close(context.Background())
		})
	}
	t.Cleanup(tn.stop)
	tn.client, tn.http = sandboxv1.NewSandboxServiceClient(conn), "http://"+srv.HTTPAddr()
	return tn
}

// as is ctx presenting token; forwardFor adds the agent's forwarded principal.
func as(ctx context.Context, token string, forwardFor ...string) context.Context {
	kv := []string{"authorization", "Bearer " + token}
	for _, p := range forwardFor {
		kv = append(kv, auth.ForwardedPrincipalHeader, p)
	}
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...))
}

// create makes a sandbox on a fresh workspace as ctx's caller, with a file.
func (tn *tenancy) create(t *testing.T, ctx context.Context) *sandboxv1.Sandbox {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, err := tn.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: dir}})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	return resp.GetSandbox()
}

// tree is every file under dir and its content: what a call may not change.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			got[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// sandboxCalls calls every SandboxService method that names a sandbox, on
// id, the way a hostile caller would: writes, a command that writes, a
// delete. TestTenancyEveryMethod fails on a method it does not name.
// sandboxCall is one method's call on a sandbox id.
type sandboxCall = func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error

var sandboxCalls = map[string]sandboxCall{
	"GetSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
		return err
	},
	"DeleteSandbox": nil, // answers Existed: false, not NOT_FOUND: its own case below
	"PauseSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: id})
		return err
	},
	"ResumeSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.ResumeSandbox(ctx, &sandboxv1.ResumeSandboxRequest{SandboxId: id})
		return err
	},
	"ReadFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "a.txt"})
		return err
	},
	"ReadFileBytes": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		return authtest.RecvAll(c.ReadFileBytes(ctx, &sandboxv1.ReadFileBytesRequest{SandboxId: id, Path: "a.txt"}))
	},
	"WriteFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "a.txt", Content: []byte("pwned")})
		return err
	},
	"DeleteFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SandboxId: id, Path: "a.txt"})
		return err
	},
	"StatFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.StatFile(ctx, &sandboxv1.StatFileRequest{SandboxId: id, Path: "a.txt"})
		return err
	},
	"ListDirectory": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{SandboxId: id, Path: "."})
		return err
	},
	"RenameFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.RenameFile(ctx, &sandboxv1.RenameFileRequest{SandboxId: id, FromPath: "a.txt", ToPath: "b.txt"})
		return err
	},
	"MakeDirectory": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "d"})
		return err
	},
	"Exec": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "echo pwned > exec.txt"}})
		return err
	},
	"ExecStream": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		return authtest.RecvAll(c.ExecStream(ctx, &sandboxv1.ExecStreamRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "echo pwned > stream.txt"}}))
	},
	"CancelExec": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.CancelExec(ctx, &sandboxv1.CancelExecRequest{SandboxId: id, ExecId: "x1"})
		return err
	},
	"Grep": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "alpha"})
		return err
	},
	"Glob": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.Glob(ctx, &sandboxv1.GlobRequest{SandboxId: id, Pattern: "*.txt"})
		return err
	},
	"Walk": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.Walk(ctx, &sandboxv1.WalkRequest{SandboxId: id})
		return err
	},
	"StartProcess": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: id, Spec: &sandboxv1.ProcessSpec{Command: "echo pwned > proc.txt; : tenancy-marker"}})
		if err != nil {
			return err
		}
		// Every such process is awaited (by Exec, whose audit line its own
		// case has checked; the pattern does not match its own command
		// line), so that none writes while the workspace is removed.
		_, err = c.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "while pgrep -f 'tenancy-marke[r]' > /dev/null; do sleep 0.01; done"}})
		return err
	},
	"AttachProcess": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		st, err := c.AttachProcess(ctx)
		if err != nil {
			return err
		}
		open := &sandboxv1.AttachOpen{SandboxId: id, ProcessId: "proc-x"}
		if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Open{Open: open}}); err != nil {
			return err
		}
		st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: []byte("rm -rf .\n")}})
		st.CloseSend()
		for {
			if _, err := st.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	},
	"SignalProcess": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: id, ProcessId: "proc-x", Signal: "KILL"})
		return err
	},
	"WaitProcess": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: id, ProcessId: "proc-x"})
		return err
	},
	"ListProcesses": func(ctx context.Context, c sandboxv1.SandboxServiceClient, id string) error {
		_, err := c.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SandboxId: id})
		return err
	},
}

// unscoped are the methods that name no sandbox; list and create have
// their own tests.
var unscoped = map[string]bool{"ListDrivers": true, "GetDriver": true, "CreateSandbox": true, "ListSandboxes": true}

// TestTenancyEveryMethod calls every SandboxService method naming a
// sandbox, from the service descriptor, on alice's sandbox: bob gets the
// NOT_FOUND of an id no sandbox has (same code, reason and message) and
// changes nothing; alice and the admin succeed, the admin's call audited;
// the agent acting for bob is bob, acting for alice is alice.
func TestTenancyEveryMethod(t *testing.T) {
	tn := startTenancy(t, t.TempDir(), authtest.New(t), nil)
	ctx := t.Context()
	svc := sandboxv1.File_fabro_sandbox_v1_sandbox_proto.Services().ByName("SandboxService")
	authtest.EveryMethod(t, svc, sandboxCalls, unscoped, func(t *testing.T, name string, call sandboxCall) {
		if call == nil {
			return
		}
		sb := tn.create(t, as(ctx, tn.alice))
		if sb.GetOwner() != "user:alice" {
			t.Fatalf("owner = %q, want user:alice", sb.GetOwner())
		}
		before := tree(t, sb.GetRootDirectory())
		missing := call(as(ctx, tn.bob), tn.client, "sbx-00000000000000000000000000")
		for _, caller := range []struct {
			name string
			ctx  context.Context
		}{{"bob", as(ctx, tn.bob)}, {"agent for bob", as(ctx, tn.agent, "user:bob")}} {
			err := call(caller.ctx, tn.client, sb.GetSandboxId())
			if ok, want := authtest.SameAsMissing(err, missing, "sbx-00000000000000000000000000", sb.GetSandboxId()); !ok {
				t.Errorf("%s: %v (%s), want the missing id's NOT_FOUND %s", caller.name, err, authtest.Reason(err), want)
			}
			if diff := cmp.Diff(before, tree(t, sb.GetRootDirectory())); diff != "" {
				t.Errorf("%s changed alice's sandbox (-before +after):\n%s", caller.name, diff)
			}
		}
		// The owner's calls reach the sandbox (a file an earlier call
		// removed may be missing: not the sandbox's NOT_FOUND).
		refused := func(err error) bool { return authtest.Refused(err, missing) }
		if err := call(as(ctx, tn.agent, "user:alice"), tn.client, sb.GetSandboxId()); refused(err) {
			t.Errorf("agent for alice: %v", err)
		}
		if err := call(as(ctx, tn.alice), tn.client, sb.GetSandboxId()); refused(err) {
			t.Errorf("alice: %v", err)
		}
		if strings.Contains(tn.log.String(), "audit=true principal=admin:root method=/fabro.sandbox.v1.SandboxService/"+name) {
			t.Fatalf("an audit line before any admin call:\n%s", tn.log.String())
		}
		if err := call(as(ctx, tn.root), tn.client, sb.GetSandboxId()); refused(err) {
			t.Errorf("admin: %v", err)
		}
		if !strings.Contains(tn.log.String(), "audit=true principal=admin:root method=/fabro.sandbox.v1.SandboxService/"+name+" resource=sandbox id="+sb.GetSandboxId()+" owner=user:alice") {
			t.Errorf("the admin's %s is not audited; log:\n%s", name, tn.log.String())
		}
	})
}

// TestTenancyDeleteListRESTRestart: bob's delete of alice's sandbox is
// Existed false and leaves it; lists hold only the caller's (the admin's
// and the agent's own: all); REST answers alike; the owner survives a
// restart of the service on its data directory.
func TestTenancyDeleteListRESTRestart(t *testing.T) {
	dataDir, fx := t.TempDir(), authtest.New(t)
	tn := startTenancy(t, dataDir, fx, nil)
	ctx := t.Context()
	a, b := tn.create(t, as(ctx, tn.alice)), tn.create(t, as(ctx, tn.bob))
	viaAgent := tn.create(t, as(ctx, tn.agent, "user:alice"))
	if viaAgent.GetOwner() != "user:alice" {
		t.Errorf("created by the agent for alice: owner %q", viaAgent.GetOwner())
	}
	resp, err := tn.client.DeleteSandbox(as(ctx, tn.bob), &sandboxv1.DeleteSandboxRequest{SandboxId: a.GetSandboxId()})
	if err != nil || resp.GetExisted() {
		t.Fatalf("bob deleting alice's: %v, existed %v", err, resp.GetExisted())
	}
	list := func(ctx context.Context) []string {
		t.Helper()
		resp, err := tn.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range resp.GetSandboxes() {
			ids = append(ids, sb.GetSandboxId())
		}
		return ids
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		want []string
	}{
		{"alice", as(ctx, tn.alice), []string{a.GetSandboxId(), viaAgent.GetSandboxId()}},
		{"bob", as(ctx, tn.bob), []string{b.GetSandboxId()}},
		{"agent for bob", as(ctx, tn.agent, "user:bob"), []string{b.GetSandboxId()}},
		{"admin", as(ctx, tn.root), []string{a.GetSandboxId(), b.GetSandboxId(), viaAgent.GetSandboxId()}},
		{"agent alone", as(ctx, tn.agent), []string{a.GetSandboxId(), b.GetSandboxId(), viaAgent.GetSandboxId()}},
	} {
		if diff := cmp.Diff(c.want, list(c.ctx)); diff != "" {
			t.Errorf("%s lists (-want +got):\n%s", c.name, diff)
		}
	}
	rest := func(method, path, token string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, tn.http+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/v1/sandboxes/" + a.GetSandboxId(), tn.bob, 404},
		{"GET", "/v1/sandboxes/sbx-00000000000000000000000000", tn.bob, 404},
		{"GET", "/v1/sandboxes/" + a.GetSandboxId(), tn.alice, 200},
		{"GET", "/v1/sandboxes/" + a.GetSandboxId(), tn.root, 200},
		{"DELETE", "/v1/sandboxes/" + a.GetSandboxId(), tn.bob, 200}, // existed: false
		{"GET", "/v1/sandboxes/" + a.GetSandboxId(), tn.alice, 200},
	} {
		if got := rest(c.method, c.path, c.token); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
		}
	}
	if _, err := tn.client.DeleteSandbox(as(ctx, tn.alice), &sandboxv1.DeleteSandboxRequest{SandboxId: viaAgent.GetSandboxId()}); err != nil {
		t.Fatal(err)
	}
	// The owner is in the registry: a new service on the data directory
	// keeps it.
	tn.stop()
	tn2 := startTenancy(t, dataDir, fx, tn)
	if got, err := tn2.client.GetSandbox(as(ctx, tn.bob), &sandboxv1.GetSandboxRequest{SandboxId: a.GetSandboxId()}); status.Code(err) != codes.NotFound {
		t.Errorf("bob after a restart: %v, %v", got, err)
	}
	got, err := tn2.client.GetSandbox(as(ctx, tn.alice), &sandboxv1.GetSandboxRequest{SandboxId: a.GetSandboxId()})
	if err != nil || got.GetSandbox().GetOwner() != "user:alice" {
		t.Errorf("alice after a restart: %v, owner %q", err, got.GetSandbox().GetOwner())
	}
}

// TestRevocationCutsExecStream: a command's stream, opened with a token
// then revoked, ends UNAUTHENTICATED at once (the command runs 60 s).
func TestRevocationCutsExecStream(t *testing.T) {
	fx := authtest.New(t)
	tn := startTenancy(t, t.TempDir(), fx, nil)
	watcher, e, err := fx.Store.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	sb := tn.create(t, as(t.Context(), tn.alice))
	stream, err := tn.client.ExecStream(as(t.Context(), watcher), &sandboxv1.ExecStreamRequest{SandboxId: sb.GetSandboxId(),
		Spec: &sandboxv1.ExecSpec{Command: "echo started; sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the started event
		t.Fatal(err)
	}
	if err := fx.Store.Revoke(e.ID); err != nil {
		t.Fatal(err)
	}
	if err := authtest.RecvAll(stream, nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("after revocation: %v, want UNAUTHENTICATED", err)
	}
}

// TestTenancyConcurrentIntruders: 64 concurrent calls of bob's, every
// kind, on alice's sandbox while she writes to it: none reaches it.
func TestTenancyConcurrentIntruders(t *testing.T) {
	tn := startTenancy(t, t.TempDir(), authtest.New(t), nil)
	ctx := t.Context()
	sb := tn.create(t, as(ctx, tn.alice))
	var calls []func(context.Context, sandboxv1.SandboxServiceClient, string) error
	for _, c := range sandboxCalls {
		if c != nil {
			calls = append(calls, c)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			if err := calls[i%len(calls)](as(ctx, tn.bob), tn.client, sb.GetSandboxId()); status.Code(err) != codes.NotFound {
				errs <- err
			}
		})
	}
	for range 8 {
		if _, err := tn.client.WriteFile(as(ctx, tn.alice), &sandboxv1.WriteFileRequest{SandboxId: sb.GetSandboxId(), Path: "a.txt", Content: []byte("alpha\n")}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("bob reached alice's sandbox: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"./": "", "a.txt": "alpha\n"}, tree(t, sb.GetRootDirectory())); diff != "" {
		t.Errorf("alice's sandbox (-want +got):\n%s", diff)
	}
}

// TestTenancyAnotherManagedWorkspace: a working directory inside the
// managed workspaces lies in some sandbox's workspace; only a caller who
// reaches that sandbox may root a new one there. Otherwise bob, knowing
// the path of alice's managed workspace, opens a local sandbox on it and
// reads and writes her files (and on a root service runs as the uid that
// owns them). The refusal is the same for another's workspace and for a
// path in no sandbox's, so it says nothing of whether the path is in use.
func TestTenancyAnotherManagedWorkspace(t *testing.T) {
	fx := authtest.New(t)
	dataDir := t.TempDir()
	alice, bob, root := fx.Token("alice", auth.RoleUser), fx.Token("bob", auth.RoleUser), fx.Token("root", auth.RoleAdmin)
	svc, err := sandbox.New(sandbox.Config{DataDir: dataDir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", Auth: fx.Store}, slog.New(slog.DiscardHandler), svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := sandboxv1.NewSandboxServiceClient(conn)
	ctx := t.Context()

	made, err := client.CreateSandbox(as(ctx, alice), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
	if err != nil {
		t.Fatal(err)
	}
	id, ws := made.GetSandbox().GetSandboxId(), made.GetSandbox().GetWorkingDirectory()
	if _, err := client.MakeDirectory(as(ctx, alice), &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "sub"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.WriteFile(as(ctx, alice), &sandboxv1.WriteFileRequest{SandboxId: id, Path: "sub/secret.txt", Content: []byte("alice's\n")}); err != nil {
		t.Fatal(err)
	}
	nobodys := filepath.Join(filepath.Dir(ws), "no-such-workspace")
	if err := os.MkdirAll(nobodys, 0o755); err != nil {
		t.Fatal(err)
	}
	var refusal string
	for _, tt := range []struct {
		name, token, dir string
		ok               bool
	}{
		{"bob on alice's workspace", bob, ws, false},
		{"bob on a directory in it", bob, filepath.Join(ws, "sub"), false},
		{"bob on a directory in no sandbox's workspace", bob, nobodys, false},
		{"alice on a directory of her own workspace", alice, filepath.Join(ws, "sub"), true},
		{"an admin on alice's workspace", root, ws, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.CreateSandbox(as(ctx, tt.token), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: tt.dir}})
			if tt.ok {
				if err != nil {
					t.Fatalf("CreateSandbox: %v", err)
				}
				client.DeleteSandbox(as(ctx, tt.token), &sandboxv1.DeleteSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()})
				return
			}
			if err == nil {
				rf, _ := client.ReadFile(as(ctx, tt.token), &sandboxv1.ReadFileRequest{SandboxId: resp.GetSandbox().GetSandboxId(), Path: "sub/secret.txt"})
				t.Fatalf("CreateSandbox succeeded (read %q)", rf.GetContent())
			}
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("CreateSandbox: %v, want PERMISSION_DENIED", err)
			}
			// The same refusal whether or not the path is a sandbox's.
			msg := strings.ReplaceAll(status.Convert(err).Message(), tt.dir, "DIR")
			if refusal == "" {
				refusal = msg
			} else if msg != refusal {
				t.Errorf("refusal %q differs from %q", msg, refusal)
			}
		})
	}
}
