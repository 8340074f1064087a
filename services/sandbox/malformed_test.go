package sandbox_test

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/paging"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/server/malformedtest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

var sandboxService = sandboxv1.File_fabro_sandbox_v1_sandbox_proto.Services().ByName("SandboxService")

// served runs the service (local driver) in the real server runtime and
// returns a connection to it.
func served(t *testing.T) *grpc.ClientConn {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	svc, err := sandbox.New(sandbox.Config{Drivers: []driver.Driver{local.New(local.Config{WorkspaceRoot: t.TempDir()})}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, logger, svc)
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
	return conn
}

func TestMalformedWire(t *testing.T) {
	conn := served(t)
	malformedtest.Wire(t, func(string) context.Context { return t.Context() }, conn, sandboxService)
}

// TestMalformedInput: every field of every sandbox request with a rule, at
// a zero, unknown or out-of-range value.
func TestMalformedInput(t *testing.T) {
	conn := served(t)
	c := sandboxv1.NewSandboxServiceClient(conn)
	created, err := c.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSandbox().GetSandboxId()
	const (
		invalid  = grpcerr.ReasonInvalidArgument
		notFound = "SANDBOX_NOT_FOUND"
	)
	ia := codes.InvalidArgument
	type call = func(context.Context) error
	create := func(spec *sandboxv1.SandboxSpec) call {
		return func(ctx context.Context) error {
			_, err := c.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: spec})
			return err
		}
	}
	exec := func(spec *sandboxv1.ExecSpec) call {
		return func(ctx context.Context) error {
			_, err := c.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: spec})
			return err
		}
	}
	execStream := func(sid string, spec *sandboxv1.ExecSpec) call {
		return func(ctx context.Context) error {
			st, err := c.ExecStream(ctx, &sandboxv1.ExecStreamRequest{SandboxId: sid, Spec: spec})
			if err != nil {
				return err
			}
			for {
				if _, err := st.Recv(); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		}
	}
	readBytes := func(r *sandboxv1.ReadFileBytesRequest) call {
		return func(ctx context.Context) error {
			st, err := c.ReadFileBytes(ctx, r)
			if err != nil {
				return err
			}
			for {
				if _, err := st.Recv(); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		}
	}
	u := func(f func(context.Context) error) call { return f }
	cases := []malformedtest.Case{
		{Method: "ListDrivers", Name: "zero request", Code: codes.OK, Call: u(func(ctx context.Context) error {
			_, err := c.ListDrivers(ctx, &sandboxv1.ListDriversRequest{})
			return err
		})},
		{Method: "ListDrivers", Name: "forged page token", Code: ia, Reason: invalid, Field: "page_token", Call: u(func(ctx context.Context) error {
			_, err := c.ListDrivers(ctx, &sandboxv1.ListDriversRequest{PageToken: "b2Zmc2V0OjE"}) // base64 "offset:1"
			return err
		})},
		{Method: "ListDrivers", Name: "negative page size", Code: ia, Reason: invalid, Field: "page_size", Call: u(func(ctx context.Context) error {
			_, err := c.ListDrivers(ctx, &sandboxv1.ListDriversRequest{PageSize: -1})
			return err
		})},
		{Method: "GetDriver", Name: "no id", Code: ia, Reason: invalid, Field: "driver_id", Call: u(func(ctx context.Context) error {
			_, err := c.GetDriver(ctx, &sandboxv1.GetDriverRequest{})
			return err
		})},
		{Method: "GetDriver", Name: "unknown id", Code: codes.NotFound, Reason: "DRIVER_NOT_FOUND", Call: u(func(ctx context.Context) error {
			_, err := c.GetDriver(ctx, &sandboxv1.GetDriverRequest{DriverId: "nope"})
			return err
		})},
		{Method: "CreateSandbox", Name: "no spec", Call: create(nil), Code: ia, Reason: invalid, Field: "spec"},
		{Method: "CreateSandbox", Name: "unknown driver", Call: create(&sandboxv1.SandboxSpec{Driver: "nope"}), Code: ia, Reason: invalid, Field: "spec.driver"},
		{Method: "CreateSandbox", Name: "env name with =", Call: create(&sandboxv1.SandboxSpec{Env: map[string]string{"A=B": "x"}}), Code: ia, Reason: invalid, Field: "spec.env"},
		{Method: "CreateSandbox", Name: "env value with NUL", Call: create(&sandboxv1.SandboxSpec{Env: map[string]string{"A": "x\x00"}}), Code: ia, Reason: invalid, Field: "spec.env"},
		{Method: "CreateSandbox", Name: "relative working directory", Call: create(&sandboxv1.SandboxSpec{WorkingDirectory: "rel/dir"}), Code: ia, Reason: invalid}, // the driver judges it: no field
		{Method: "CreateSandbox", Name: "negative memory", Call: create(&sandboxv1.SandboxSpec{Limits: &sandboxv1.ResourceLimits{MemoryBytes: -1}}), Code: ia, Reason: invalid, Field: "spec.limits.memory_bytes"},
		{Method: "CreateSandbox", Name: "negative processes", Call: create(&sandboxv1.SandboxSpec{Limits: &sandboxv1.ResourceLimits{MaxProcesses: -1}}), Code: ia, Reason: invalid, Field: "spec.limits.max_processes"},
		{Method: "CreateSandbox", Name: "NaN cpus", Call: create(&sandboxv1.SandboxSpec{Limits: &sandboxv1.ResourceLimits{Cpus: math.NaN()}}), Code: ia, Reason: invalid, Field: "spec.limits.cpus"},
		{Method: "CreateSandbox", Name: "too many cpus", Call: create(&sandboxv1.SandboxSpec{Limits: &sandboxv1.ResourceLimits{Cpus: 4096}}), Code: ia, Reason: invalid, Field: "spec.limits.cpus"},
		{Method: "CreateSandbox", Name: "unknown network policy", Call: create(&sandboxv1.SandboxSpec{Limits: &sandboxv1.ResourceLimits{Network: 99}}),
			Code: ia, Reason: server.ReasonUnknownEnumValue, Domain: string(server.Domain), Field: "spec.limits.network"},
		{Method: "GetSandbox", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{})
			return err
		})},
		{Method: "GetSandbox", Name: "unknown id", Code: codes.NotFound, Reason: notFound, Call: u(func(ctx context.Context) error {
			_, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: "sbx-nope"})
			return err
		})},
		{Method: "ListSandboxes", Name: "token of other labels", Code: ia, Reason: invalid, Field: "page_token", Call: u(func(ctx context.Context) error {
			first, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{PageSize: 1, Labels: map[string]string{"a": "1"}})
			if err != nil {
				return err
			}
			tok := cmp.Or(first.GetNextPageToken(), paging.Encode(paging.Filter("a", "1"), "0", "x"))
			_, err = c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{PageToken: tok, Labels: map[string]string{"a": "2"}})
			return err
		})},
		{Method: "ListSandboxes", Name: "garbage page token", Code: ia, Reason: invalid, Field: "page_token", Call: u(func(ctx context.Context) error {
			_, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{PageToken: "not a token!"})
			return err
		})},
		{Method: "ListSandboxes", Name: "labels matching nothing", Code: codes.OK, Call: u(func(ctx context.Context) error {
			_, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{Labels: map[string]string{"": ""}})
			return err
		})},
		{Method: "DeleteSandbox", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{})
			return err
		})},
		{Method: "DeleteSandbox", Name: "unknown id", Code: codes.OK, Call: u(func(ctx context.Context) error { // existed: false
			_, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: "sbx-nope"})
			return err
		})},
		{Method: "ReadFile", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{Path: "a"})
			return err
		})},
		{Method: "ReadFile", Name: "negative offset", Code: ia, Reason: invalid, Field: "offset", Call: u(func(ctx context.Context) error {
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "a", Offset: -1})
			return err
		})},
		{Method: "ReadFile", Name: "negative limit", Code: ia, Reason: invalid, Field: "limit", Call: u(func(ctx context.Context) error {
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "a", Limit: -1})
			return err
		})},
		{Method: "ReadFile", Name: "escaping path", Code: codes.PermissionDenied, Reason: "PATH_ESCAPES_ROOT", Call: u(func(ctx context.Context) error {
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "../../etc/passwd"})
			return err
		})},
		{Method: "ReadFile", Name: "name too long", Code: ia, Reason: invalid, Call: u(func(ctx context.Context) error {
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: strings.Repeat("x", 300)})
			return err
		})},
		{Method: "WriteFile", Name: "name too long", Code: ia, Reason: invalid, Call: u(func(ctx context.Context) error {
			_, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "d/" + strings.Repeat("x", 300), Content: []byte("x")})
			return err
		})},
		{Method: "Exec", Name: "command longer than exec takes", Code: ia, Reason: invalid, Call: u(func(ctx context.Context) error {
			_, err := c.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true " + strings.Repeat("x", 256<<10)}})
			return err
		})},
		{Method: "ReadFile", Name: "path with NUL", Code: ia, Reason: invalid, Call: u(func(ctx context.Context) error {
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: id, Path: "a\x00b"})
			return err
		})},
		{Method: "ReadFileBytes", Name: "no id", Call: readBytes(&sandboxv1.ReadFileBytesRequest{Path: "a"}), Code: ia, Reason: invalid, Field: "sandbox_id"},
		{Method: "ReadFileBytes", Name: "negative offset", Call: readBytes(&sandboxv1.ReadFileBytesRequest{SandboxId: id, Path: "a", Offset: -1}), Code: ia, Reason: invalid, Field: "offset"},
		{Method: "ReadFileBytes", Name: "negative length", Call: readBytes(&sandboxv1.ReadFileBytesRequest{SandboxId: id, Path: "a", Length: -1}), Code: ia, Reason: invalid, Field: "length"},
		{Method: "ReadFileBytes", Name: "missing file", Call: readBytes(&sandboxv1.ReadFileBytesRequest{SandboxId: id, Path: "absent"}), Code: codes.NotFound, Reason: "FILE_NOT_FOUND"},
		{Method: "WriteFile", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{Path: "a"})
			return err
		})},
		{Method: "WriteFile", Name: "escaping path", Code: codes.PermissionDenied, Reason: "PATH_ESCAPES_ROOT", Call: u(func(ctx context.Context) error {
			_, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "../x"})
			return err
		})},
		{Method: "DeleteFile", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{Path: "a"})
			return err
		})},
		{Method: "DeleteFile", Name: "escaping path", Code: codes.PermissionDenied, Reason: "PATH_ESCAPES_ROOT", Call: u(func(ctx context.Context) error {
			_, err := c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SandboxId: id, Path: "../x"})
			return err
		})},
		{Method: "StatFile", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.StatFile(ctx, &sandboxv1.StatFileRequest{Path: "a"})
			return err
		})},
		{Method: "StatFile", Name: "missing file", Code: codes.OK, Call: u(func(ctx context.Context) error { // exists: false
			_, err := c.StatFile(ctx, &sandboxv1.StatFileRequest{SandboxId: id, Path: "absent"})
			return err
		})},
		{Method: "ListDirectory", Name: "token of another path", Code: ia, Reason: invalid, Field: "page_token", Call: u(func(ctx context.Context) error {
			tok := paging.Encode(paging.Filter("elsewhere", "1"), "a")
			_, err := c.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{SandboxId: id, PageToken: tok})
			return err
		})},
		{Method: "ListDirectory", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{})
			return err
		})},
		{Method: "ListDirectory", Name: "negative depth", Code: ia, Reason: invalid, Field: "depth", Call: u(func(ctx context.Context) error {
			_, err := c.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{SandboxId: id, Depth: -1})
			return err
		})},
		{Method: "RenameFile", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.RenameFile(ctx, &sandboxv1.RenameFileRequest{FromPath: "a", ToPath: "b"})
			return err
		})},
		{Method: "RenameFile", Name: "missing source", Code: codes.NotFound, Reason: "FILE_NOT_FOUND", Call: u(func(ctx context.Context) error {
			_, err := c.RenameFile(ctx, &sandboxv1.RenameFileRequest{SandboxId: id, FromPath: "absent", ToPath: "b"})
			return err
		})},
		{Method: "MakeDirectory", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{Path: "d"})
			return err
		})},
		{Method: "MakeDirectory", Name: "escaping path", Code: codes.PermissionDenied, Reason: "PATH_ESCAPES_ROOT", Call: u(func(ctx context.Context) error {
			_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "../d"})
			return err
		})},
		{Method: "Exec", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.Exec(ctx, &sandboxv1.ExecRequest{Spec: &sandboxv1.ExecSpec{Command: "true"}})
			return err
		})},
		{Method: "Exec", Name: "no spec", Call: exec(nil), Code: ia, Reason: invalid, Field: "spec.command"},
		{Method: "Exec", Name: "empty command", Call: exec(&sandboxv1.ExecSpec{}), Code: ia, Reason: invalid, Field: "spec.command"},
		{Method: "Exec", Name: "command with NUL", Call: exec(&sandboxv1.ExecSpec{Command: "echo \x00"}), Code: ia, Reason: invalid, Field: "spec.command"},
		{Method: "Exec", Name: "negative output limit", Call: exec(&sandboxv1.ExecSpec{Command: "true", RetainedOutputLimitBytes: -1}), Code: ia, Reason: invalid, Field: "spec.retained_output_limit_bytes"},
		{Method: "Exec", Name: "bad exec id", Call: exec(&sandboxv1.ExecSpec{Command: "true", ExecId: "a b"}), Code: ia, Reason: invalid, Field: "spec.exec_id"},
		{Method: "Exec", Name: "env name empty", Call: exec(&sandboxv1.ExecSpec{Command: "true", Env: map[string]string{"": "x"}}), Code: ia, Reason: invalid, Field: "spec.env"},
		{Method: "ExecStream", Name: "no id", Call: execStream("", &sandboxv1.ExecSpec{Command: "true"}), Code: ia, Reason: invalid, Field: "sandbox_id"},
		{Method: "ExecStream", Name: "empty command", Call: execStream(id, &sandboxv1.ExecSpec{}), Code: ia, Reason: invalid, Field: "spec.command"},
		{Method: "ExecStream", Name: "unknown sandbox", Call: execStream("sbx-nope", &sandboxv1.ExecSpec{Command: "true"}), Code: codes.NotFound, Reason: notFound},
		{Method: "CancelExec", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.CancelExec(ctx, &sandboxv1.CancelExecRequest{ExecId: "x"})
			return err
		})},
		{Method: "CancelExec", Name: "no exec id", Code: ia, Reason: invalid, Field: "exec_id", Call: u(func(ctx context.Context) error {
			_, err := c.CancelExec(ctx, &sandboxv1.CancelExecRequest{SandboxId: id})
			return err
		})},
		{Method: "Grep", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.Grep(ctx, &sandboxv1.GrepRequest{Pattern: "x"})
			return err
		})},
		{Method: "Grep", Name: "empty pattern", Code: ia, Reason: "INVALID_PATTERN", Call: u(func(ctx context.Context) error {
			_, err := c.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id})
			return err
		})},
		{Method: "Grep", Name: "negative max_results", Code: ia, Reason: invalid, Field: "max_results", Call: u(func(ctx context.Context) error {
			_, err := c.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "x", MaxResults: -1})
			return err
		})},
		{Method: "Glob", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.Glob(ctx, &sandboxv1.GlobRequest{Pattern: "*"})
			return err
		})},
		{Method: "Glob", Name: "empty pattern", Code: ia, Reason: "INVALID_PATTERN", Call: u(func(ctx context.Context) error {
			_, err := c.Glob(ctx, &sandboxv1.GlobRequest{SandboxId: id})
			return err
		})},
		{Method: "Walk", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: u(func(ctx context.Context) error {
			_, err := c.Walk(ctx, &sandboxv1.WalkRequest{})
			return err
		})},
		{Method: "Walk", Name: "negative max_depth", Code: ia, Reason: invalid, Field: "max_depth", Call: u(func(ctx context.Context) error {
			_, err := c.Walk(ctx, &sandboxv1.WalkRequest{SandboxId: id, MaxDepth: -1})
			return err
		})},
	}
	cases = append(cases, processMalformedCases(c, id)...)
	malformedtest.Table(t, t.Context(), sandboxService, "sandbox.fabro.dev", cases)
}
