package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

type harness struct {
	client sandboxv1.SandboxServiceClient
	http   string // base URL of the REST gateway
	svc    *sandbox.Service
}

// start runs the service behind the shared runtime on port 0, gRPC and
// REST, with the given drivers (default: local).
func start(t testing.TB, drivers ...driver.Driver) *harness {
	t.Helper()
	// The tests root sandboxes in their own temporary directories.
	return startConfig(t, sandbox.Config{Drivers: drivers, Security: sandbox.Security{AllowedRoots: []string{os.TempDir()}}})
}

// startConfig is start with a configuration of the test's.
func startConfig(t testing.TB, cfg sandbox.Config) *harness {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if len(cfg.Drivers) == 0 {
		cfg.Drivers = []driver.Driver{local.New(local.Config{WorkspaceRoot: t.TempDir()})}
	}
	svc, err := sandbox.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, logger, svc) // authentication: platform/auth and cmd/fabro tests
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
	return &harness{client: sandboxv1.NewSandboxServiceClient(conn), http: "http://" + srv.HTTPAddr(), svc: svc}
}

func (h *harness) create(t testing.TB, spec *sandboxv1.SandboxSpec) *sandboxv1.Sandbox {
	t.Helper()
	if spec.Driver == "" {
		spec.Driver = "local"
	}
	resp, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	return resp.GetSandbox()
}

func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetDomain() + "/" + info.GetReason()
		}
	}
	return ""
}

func TestBadInput(t *testing.T) {
	noBash := local.New(local.Config{WorkspaceRoot: t.TempDir(), Environ: []string{"PATH=" + t.TempDir()}})
	h := start(t)
	hNoBash := start(t, noBash)
	sb := h.create(t, &sandboxv1.SandboxSpec{})
	id := sb.GetSandboxId()
	ctx := t.Context()
	os.WriteFile(filepath.Join(sb.GetRootDirectory(), "latin1.txt"), []byte("caf\xe9\n"), 0o644)
	os.Mkdir(filepath.Join(sb.GetRootDirectory(), "dir"), 0o755)

	tests := []struct {
		name    string
		call    func() error
		code    codes.Code
		reason  string
		message string // a part of the message
	}{
		{"unknown sandbox", func() error {
			_, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: "sbx-nope"})
			return err
		}, codes.NotFound, "SANDBOX_NOT_FOUND", "sbx-nope"},
		{"unknown sandbox, exec", func() error {
			_, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: "sbx-nope", Spec: &sandboxv1.ExecSpec{Command: "true"}})
			return err
		}, codes.NotFound, "SANDBOX_NOT_FOUND", ""},
		{"path escapes by ..", func() error {
			_, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "../evil", Content: []byte("x")})
			return err
		}, codes.PermissionDenied, "PATH_ESCAPES_ROOT", "../evil"},
		{"absolute path outside", func() error {
			_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "/etc/passwd"})
			return err
		}, codes.PermissionDenied, "PATH_ESCAPES_ROOT", ""},
		{"missing file", func() error {
			_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "nope.txt"})
			return err
		}, codes.NotFound, "FILE_NOT_FOUND", "nope.txt"},
		{"invalid regex", func() error {
			_, err := h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "func (x"})
			return err
		}, codes.InvalidArgument, "INVALID_PATTERN", "missing closing )"},
		{"invalid glob filter", func() error {
			_, err := h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "x", GlobFilter: "[a"})
			return err
		}, codes.InvalidArgument, "INVALID_PATTERN", "unbalanced brackets"},
		{"glob filter with a slash", func() error {
			_, err := h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "x", GlobFilter: "src/*.go"})
			return err
		}, codes.InvalidArgument, "INVALID_PATTERN", "without '/'"},
		{"glob filter with braces", func() error {
			_, err := h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "x", GlobFilter: "*.{go,rs}"})
			return err
		}, codes.InvalidArgument, "INVALID_PATTERN", "braces"},
		{"regex the back ends read differently", func() error {
			_, err := h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "(?i)todo"})
			return err
		}, codes.InvalidArgument, "INVALID_PATTERN", "case_insensitive"},
		{"invalid glob", func() error {
			_, err := h.client.Glob(ctx, &sandboxv1.GlobRequest{SandboxId: id, Pattern: "../*.go"})
			return err
		}, codes.InvalidArgument, "INVALID_PATTERN", "'..'"},
		{"host without bash", func() error {
			_, err := hNoBash.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
			return err
		}, codes.FailedPrecondition, "BASH_MISSING", "bash"},
		{"unknown driver", func() error {
			_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "vmware"}})
			return err
		}, codes.InvalidArgument, "", "vmware"},
		{"missing designated workspace", func() error {
			_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: filepath.Join(t.TempDir(), "nonexistent")}})
			return err
		}, codes.NotFound, "FILE_NOT_FOUND", ""},
		{"empty command", func() error {
			_, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{}})
			return err
		}, codes.InvalidArgument, "", "empty"},
		{"bad env name", func() error {
			_, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true", Env: map[string]string{"A=B": "x"}}})
			return err
		}, codes.InvalidArgument, "", "A=B"},
		{"bad exec id", func() error {
			_, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true", ExecId: "a b"}})
			return err
		}, codes.InvalidArgument, "", "exec_id"},
		{"working dir escapes", func() error {
			_, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true", WorkingDir: "/"}})
			return err
		}, codes.PermissionDenied, "PATH_ESCAPES_ROOT", ""},
		{"not UTF-8", func() error {
			_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "latin1.txt"})
			return err
		}, codes.FailedPrecondition, "", "UTF-8"},
		{"read a directory", func() error {
			_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "dir"})
			return err
		}, codes.FailedPrecondition, "", "directory"},
		{"negative offset", func() error {
			_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "latin1.txt", Offset: -1})
			return err
		}, codes.InvalidArgument, "", ""},
		{"mkdir over a file", func() error {
			_, err := h.client.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "latin1.txt"})
			return err
		}, codes.AlreadyExists, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v); want %v", status.Code(err), err, tt.code)
			}
			if want := "sandbox.fabro.dev/" + tt.reason; tt.reason != "" && reason(err) != want {
				t.Errorf("reason %q; want %q", reason(err), want)
			}
			if !strings.Contains(status.Convert(err).Message(), tt.message) {
				t.Errorf("message %q does not say %q", status.Convert(err).Message(), tt.message)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(sb.GetRootDirectory()), "evil")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an escaping write touched the parent: %v", err)
	}

	t.Run("command not found is a result", func(t *testing.T) {
		resp, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "no-such-program"}})
		if err != nil || resp.GetResult().GetExitCode() != 127 || resp.GetResult().ExitCode == nil {
			t.Errorf("Exec = %v, %v; want an exit-127 result", resp, err)
		}
	})
}

func TestLifecycle(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	drivers, err := h.client.ListDrivers(ctx, &sandboxv1.ListDriversRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The limits the local driver enforces depend on the host's cgroups.
	lim := local.New(local.Config{}).Capabilities().Limits
	wantDrivers := &sandboxv1.ListDriversResponse{Drivers: []*sandboxv1.Driver{{
		DriverId: "local", Available: true,
		Capabilities: &sandboxv1.Capabilities{Isolation: sandboxv1.Isolation_ISOLATION_NONE, LiveStreaming: true, StreamsSeparated: true, Stdin: true, Cancel: true, Processes: true, Terminals: true,
			Limits: &sandboxv1.LimitSupport{Memory: lim.Memory, Processes: lim.Processes, Cpu: lim.CPU, NetworkNone: lim.NetworkNone, Disk: lim.Disk}},
	}}}
	if diff := cmp.Diff(wantDrivers, drivers, protocmp.Transform()); diff != "" {
		t.Errorf("ListDrivers (-want +got):\n%s", diff)
	}

	a := h.create(t, &sandboxv1.SandboxSpec{Labels: map[string]string{"run_id": "r1", "role": "a"}})
	b := h.create(t, &sandboxv1.SandboxSpec{Labels: map[string]string{"run_id": "r1"}})
	designated := t.TempDir()
	c := h.create(t, &sandboxv1.SandboxSpec{WorkingDirectory: designated, Labels: map[string]string{"run_id": "r2"}})
	if !a.GetManagedWorkspace() || c.GetManagedWorkspace() || a.GetPlatform() != "linux" || a.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_READY {
		t.Errorf("created %v / %v", a, c)
	}
	got, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: a.GetSandboxId()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, got.GetSandbox(), protocmp.Transform()); diff != "" {
		t.Errorf("GetSandbox (-created +got):\n%s", diff)
	}
	ids := func(labels map[string]string) []string {
		resp, err := h.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range resp.GetSandboxes() {
			out = append(out, s.GetSandboxId())
		}
		return out
	}
	tests := []struct {
		labels map[string]string
		want   []string
	}{
		{nil, []string{a.GetSandboxId(), b.GetSandboxId(), c.GetSandboxId()}},
		{map[string]string{"run_id": "r1"}, []string{a.GetSandboxId(), b.GetSandboxId()}},
		{map[string]string{"run_id": "r1", "role": "a"}, []string{a.GetSandboxId()}},
		{map[string]string{"run_id": "r3"}, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, ids(tt.labels)); diff != "" {
			t.Errorf("ListSandboxes(%v) (-want +got):\n%s", tt.labels, diff)
		}
	}
	for _, s := range []*sandboxv1.Sandbox{a, c} {
		for i, want := range []bool{true, false} { // idempotent
			resp, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: s.GetSandboxId()})
			if err != nil || resp.GetExisted() != want {
				t.Errorf("DeleteSandbox #%d = %v, %v; want existed %v", i+1, resp, err, want)
			}
		}
	}
	if _, err := os.Stat(a.GetRootDirectory()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("managed workspace left: %v", err)
	}
	if _, err := os.Stat(designated); err != nil {
		t.Errorf("designated workspace removed: %v", err)
	}
}

func TestFiles(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	id := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	var lines []string
	for i := range 1200 {
		lines = append(lines, strings.Repeat("x", i%7))
	}
	content := strings.Join(lines, "\r\n") + "\n"
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "a/b.txt", Content: []byte(content)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		offset, limit int64
		want          *sandboxv1.ReadFileResponse
	}{
		{998, 3, &sandboxv1.ReadFileResponse{Content: " 998 | xxx\n 999 | xxxx\n1000 | xxxxx\n", StartLine: 998, LineCount: 3, TotalLines: 1200, Truncated: true}},
		{0, 2, &sandboxv1.ReadFileResponse{Content: "  1 | \n  2 | x\n", StartLine: 1, LineCount: 2, TotalLines: 1200, Truncated: true}},
		{1199, 0, &sandboxv1.ReadFileResponse{Content: "1199 | x\n1200 | xx\n", StartLine: 1199, LineCount: 2, TotalLines: 1200}},
		{1300, 0, &sandboxv1.ReadFileResponse{StartLine: 1300, TotalLines: 1200}},
	}
	for _, tt := range tests {
		got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "a/b.txt", Offset: tt.offset, Limit: tt.limit})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("ReadFile(%d, %d) (-want +got):\n%s", tt.offset, tt.limit, diff)
		}
	}
	// Bytes, streamed in 1 MiB chunks, from an offset.
	big := bytes.Repeat([]byte("0123456789"), 300_000)
	os.WriteFile(filepath.Join(h.root(t, id), "big"), big, 0o644)
	stream, err := h.client.ReadFileBytes(ctx, &sandboxv1.ReadFileBytesRequest{SandboxId: id, Path: "big", Offset: 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	var msgs int
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.GetOffset() != int64(5+len(got)) || m.GetSizeBytes() != int64(len(big)) || len(m.GetData()) > 1<<20 {
			t.Fatalf("chunk at %d of %d bytes, size %d", m.GetOffset(), len(m.GetData()), m.GetSizeBytes())
		}
		got = append(got, m.GetData()...)
		msgs++
	}
	if !bytes.Equal(got, big[5:]) || msgs != 3 {
		t.Errorf("read %d bytes in %d messages; want %d in 3", len(got), msgs, len(big)-5)
	}
	st, err := h.client.StatFile(ctx, &sandboxv1.StatFileRequest{SandboxId: id, Path: "nope"})
	if err != nil || st.GetExists() {
		t.Errorf("StatFile(missing) = %v, %v; want exists false", st, err)
	}
}

func (h *harness) root(t *testing.T, id string) string {
	resp, err := h.client.GetSandbox(t.Context(), &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSandbox().GetRootDirectory()
}

func TestExecStreamAndCancel(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	id := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	tests := []struct {
		name   string
		kill   bool
		want   sandboxv1.Termination
		signal string
	}{
		{"cancel", false, sandboxv1.Termination_TERMINATION_CANCELLED, "SIGTERM"},
		{"kill", true, sandboxv1.Termination_TERMINATION_KILLED, "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := h.client.ExecStream(ctx, &sandboxv1.ExecStreamRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{
				Command: "echo ready; echo warn >&2; sleep 60", ExecId: "job-" + tt.name,
			}})
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut string
			var finished *sandboxv1.ExecResult
			for i := 0; ; i++ {
				m, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				switch ev := m.GetEvent().(type) {
				case *sandboxv1.ExecStreamResponse_Started:
					if i != 0 || ev.Started.GetExecId() != "job-"+tt.name {
						t.Errorf("started %v as message %d", ev.Started, i)
					}
					if _, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true", ExecId: "job-" + tt.name}}); status.Code(err) != codes.AlreadyExists {
						t.Errorf("reusing a running exec id: %v; want AlreadyExists", err)
					}
				case *sandboxv1.ExecStreamResponse_Output:
					if ev.Output.GetStream() == sandboxv1.OutputStream_OUTPUT_STREAM_STDERR {
						errOut += string(ev.Output.GetData())
					} else {
						out += string(ev.Output.GetData())
					}
					if out == "ready\n" && errOut == "warn\n" {
						resp, err := h.client.CancelExec(ctx, &sandboxv1.CancelExecRequest{SandboxId: id, ExecId: "job-" + tt.name, Kill: tt.kill})
						if err != nil || !resp.GetStopping() {
							t.Errorf("CancelExec = %v, %v", resp, err)
						}
					}
				case *sandboxv1.ExecStreamResponse_Finished:
					finished = ev.Finished
				}
			}
			if finished.GetTermination() != tt.want || finished.GetSignal() != tt.signal || string(finished.GetStdout()) != "ready\n" {
				t.Errorf("finished %v; want %v by %s", finished, tt.want, tt.signal)
			}
		})
	}
	resp, err := h.client.CancelExec(ctx, &sandboxv1.CancelExecRequest{SandboxId: id, ExecId: "never-ran"})
	if err != nil || resp.GetStopping() {
		t.Errorf("CancelExec(unknown id) = %v, %v; want stopping false", resp, err)
	}
}

// TestREST drives every kind of RPC through the real gateway, the streamed
// exec included.
func TestREST(t *testing.T) {
	h := start(t)
	do := func(method, path string, body any) []byte {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, h.http+path, r)
		req.Header.Set("Content-Type", "application/json") // the REST port takes JSON only
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	var created struct{ Sandbox struct{ SandboxId string } }
	json.Unmarshal(do("POST", "/v1/sandboxes", map[string]any{"spec": map[string]any{"driver": "local", "labels": map[string]string{"run_id": "rest"}}}), &created)
	id := created.Sandbox.SandboxId
	do("POST", "/v1/sandboxes/"+id+"/files:write", map[string]any{"path": "src/a.go", "content": "cGFja2FnZSBhCg=="}) // "package a\n"
	if got := string(do("POST", "/v1/sandboxes/"+id+"/files:read", map[string]any{"path": "src/a.go"})); !strings.Contains(got, `"content":"  1 | package a\n"`) {
		t.Errorf("files:read = %s", got)
	}
	if got := string(do("POST", "/v1/sandboxes/"+id+":grep", map[string]any{"pattern": "pack"})); !strings.Contains(got, `"path":"src/a.go"`) {
		t.Errorf(":grep = %s", got)
	}
	if got := string(do("GET", "/v1/sandboxes?labels[run_id]=rest", nil)); !strings.Contains(got, id) {
		t.Errorf("list by label = %s", got)
	}
	body := do("POST", "/v1/sandboxes/"+id+":execStream", map[string]any{"spec": map[string]any{"command": "echo hi; echo oops >&2; exit 4"}})
	var kinds []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var line struct {
			Result map[string]json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("stream line %q: %v", sc.Bytes(), err)
		}
		for k, v := range line.Result {
			if k == "finished" && !strings.Contains(string(v), `"exitCode":4`) {
				t.Errorf("finished = %s", v)
			}
			if k == "started" || k == "finished" || k == "output" {
				kinds = append(kinds, k)
			}
		}
	}
	if len(kinds) != 4 || kinds[0] != "started" || kinds[3] != "finished" {
		t.Errorf("streamed %v; want started, two outputs, finished", kinds)
	}
	do("DELETE", "/v1/sandboxes/"+id, nil)
}

// TestCancelExecEscalates checks that CancelExec with kill ends a graceful
// stop already under way at once, instead of after the 2 s grace.
func TestCancelExecEscalates(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	id := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	stream, err := h.client.ExecStream(ctx, &sandboxv1.ExecStreamRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{
		Command: `trap "" TERM; echo ready; sleep 60 & wait; wait`, ExecId: "stubborn",
	}})
	if err != nil {
		t.Fatal(err)
	}
	var finished *sandboxv1.ExecResult
	var killed time.Time
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev := m.GetEvent().(type) {
		case *sandboxv1.ExecStreamResponse_Output:
			for _, kill := range []bool{false, true} {
				resp, err := h.client.CancelExec(ctx, &sandboxv1.CancelExecRequest{SandboxId: id, ExecId: "stubborn", Kill: kill})
				if err != nil || !resp.GetStopping() {
					t.Fatalf("CancelExec(kill %v) = %v, %v; want stopping", kill, resp, err)
				}
				killed = time.Now()
			}
		case *sandboxv1.ExecStreamResponse_Finished:
			finished = ev.Finished
		}
	}
	if finished.GetTermination() != sandboxv1.Termination_TERMINATION_KILLED || finished.GetSignal() != "SIGKILL" {
		t.Errorf("finished %v; want KILLED by SIGKILL", finished)
	}
	if since := time.Since(killed); killed.IsZero() || since > time.Second {
		t.Errorf("the command ended %v after the kill; want at once, not after the 2 s grace", since)
	}
}

// TestRestartSweepsOrphanedWorkspaces checks that a service started on a
// data directory keeps the managed workspaces of the sandboxes in its
// registry and removes the ones no sandbox names.
func TestRestartSweepsOrphanedWorkspaces(t *testing.T) {
	dataDir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := sandbox.New(sandbox.Config{DataDir: dataDir, Drivers: []driver.Driver{local.New(local.Config{WorkspaceRoot: filepath.Join(dataDir, "sandbox", "workspaces")})}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := first.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
	if err != nil {
		t.Fatal(err)
	}
	kept := resp.GetSandbox().GetRootDirectory()
	if filepath.Dir(kept) != filepath.Join(dataDir, "sandbox", "workspaces") {
		t.Fatalf("managed workspace %s is not under the data dir", kept)
	}
	orphan := filepath.Join(dataDir, "sandbox", "workspaces", "sandbox-orphan")
	if err := os.Mkdir(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.New(sandbox.Config{DataDir: dataDir}, logger); err == nil {
		t.Error("a second service started on a data directory in use")
	}
	// The first service "crashes": no Close, but its lock goes with the
	// process; here the lock is given up by hand.
	first.ReleaseForTest()

	second, err := sandbox.New(sandbox.Config{DataDir: dataDir, Drivers: []driver.Driver{local.New(local.Config{WorkspaceRoot: filepath.Join(dataDir, "sandbox", "workspaces")})}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(t.Context())
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphaned workspace %s survived the restart: %v", orphan, err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the registered sandbox's workspace %s is gone after the restart: %v", kept, err)
	}
	got, err := second.GetSandbox(t.Context(), &sandboxv1.GetSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()})
	if err != nil || got.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_READY {
		t.Fatalf("GetSandbox after the restart = %v, %v; want READY", got, err)
	}
	if _, err := second.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kept); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the managed workspace %s survived DeleteSandbox after the restart: %v", kept, err)
	}
}
