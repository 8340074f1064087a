package plugin

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// openChunk is the size of the pieces Open streams.
const openChunk = 64 << 10

// server serves one driver over the plugin protocol. It owns the handles of
// the sandboxes made in this process.
type server struct {
	pluginv1.UnimplementedDriverPluginServiceServer
	d       driver.Driver
	version string
	logger  *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]driver.Sandbox
}

func newServer(d driver.Driver, version string, logger *slog.Logger) *server {
	return &server{d: d, version: version, logger: logger, sandboxes: map[string]driver.Sandbox{}}
}

func (s *server) sandbox(handle string) (driver.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[handle]
	if !ok {
		return nil, toStatus(fmt.Errorf("%w: no sandbox %q in this plugin process", driver.ErrGone, handle))
	}
	return sb, nil
}

func (s *server) adopt(sb driver.Sandbox) string {
	h := "h-" + rand.Text()
	s.mu.Lock()
	s.sandboxes[h] = sb
	s.mu.Unlock()
	return h
}

func (s *server) Describe(context.Context, *pluginv1.DescribeRequest) (*pluginv1.DescribeResponse, error) {
	_, reopen := s.d.(driver.Reopener)
	return &pluginv1.DescribeResponse{Name: s.d.Name(), Version: s.version, Capabilities: capsToProto(s.d.Capabilities()), Reopen: reopen}, nil
}

func (s *server) Available(ctx context.Context, _ *pluginv1.AvailableRequest) (*pluginv1.AvailableResponse, error) {
	if err := s.d.Available(ctx); err != nil {
		return &pluginv1.AvailableResponse{Reason: err.Error()}, nil
	}
	return &pluginv1.AvailableResponse{Available: true}, nil
}

func (s *server) Create(ctx context.Context, req *pluginv1.CreateRequest) (*pluginv1.CreateResponse, error) {
	sb, err := s.d.Create(ctx, specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	_, checkable := sb.(driver.Checker)
	return &pluginv1.CreateResponse{Sandbox: s.adopt(sb), Info: infoToProto(sb.Info()), Checkable: checkable}, nil
}

func (s *server) Reopen(ctx context.Context, req *pluginv1.ReopenRequest) (*pluginv1.ReopenResponse, error) {
	r, ok := s.d.(driver.Reopener)
	if !ok {
		return nil, toStatus(fmt.Errorf("%w: driver %q cannot reopen sandboxes", driver.ErrUnsupported, s.d.Name()))
	}
	sb, err := r.Reopen(ctx, specFromProto(req.GetSpec()), infoFromProto(req.GetInfo()))
	if err != nil {
		return nil, toStatus(err)
	}
	_, checkable := sb.(driver.Checker)
	return &pluginv1.ReopenResponse{Sandbox: s.adopt(sb), Info: infoToProto(sb.Info()), Checkable: checkable}, nil
}

func (s *server) Check(ctx context.Context, req *pluginv1.CheckRequest) (*pluginv1.CheckResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	if c, ok := sb.(driver.Checker); ok {
		if err := c.Check(ctx); err != nil {
			return nil, toStatus(err)
		}
	}
	return &pluginv1.CheckResponse{}, nil
}

func (s *server) Delete(ctx context.Context, req *pluginv1.DeleteRequest) (*pluginv1.DeleteResponse, error) {
	s.mu.Lock()
	sb, ok := s.sandboxes[req.GetSandbox()]
	s.mu.Unlock()
	if !ok {
		return &pluginv1.DeleteResponse{}, nil // idempotent
	}
	if err := sb.Delete(ctx); err != nil {
		return nil, toStatus(err)
	}
	s.mu.Lock()
	delete(s.sandboxes, req.GetSandbox())
	s.mu.Unlock()
	return &pluginv1.DeleteResponse{}, nil
}

func (s *server) Open(req *pluginv1.OpenRequest, stream grpc.ServerStreamingServer[pluginv1.OpenResponse]) error {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return err
	}
	rc, size, err := sb.Open(stream.Context(), req.GetPath(), req.GetOffset())
	if err != nil {
		return toStatus(err)
	}
	defer rc.Close()
	if err := stream.Send(&pluginv1.OpenResponse{Size: size}); err != nil {
		return err
	}
	buf := make([]byte, openChunk)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if serr := stream.Send(&pluginv1.OpenResponse{Size: size, Data: buf[:n]}); serr != nil {
				return serr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return toStatus(err)
		}
	}
}

func (s *server) WriteFile(ctx context.Context, req *pluginv1.WriteFileRequest) (*pluginv1.WriteFileResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	created, err := sb.WriteFile(ctx, req.GetPath(), req.GetData())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.WriteFileResponse{Created: created}, nil
}

func (s *server) Remove(ctx context.Context, req *pluginv1.RemoveRequest) (*pluginv1.RemoveResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	if err := sb.Remove(ctx, req.GetPath(), req.GetRecursive()); err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.RemoveResponse{}, nil
}

func (s *server) Stat(ctx context.Context, req *pluginv1.StatRequest) (*pluginv1.StatResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	fi, err := sb.Stat(ctx, req.GetPath())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.StatResponse{Info: fileInfoToProto(fi)}, nil
}

func (s *server) ListDir(ctx context.Context, req *pluginv1.ListDirRequest) (*pluginv1.ListDirResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	entries, err := sb.ListDir(ctx, req.GetPath(), int(req.GetDepth()))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pluginv1.ListDirResponse{}
	for _, fi := range entries {
		resp.Entries = append(resp.Entries, fileInfoToProto(fi))
	}
	return resp, nil
}

func (s *server) Rename(ctx context.Context, req *pluginv1.RenameRequest) (*pluginv1.RenameResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	if err := sb.Rename(ctx, req.GetFrom(), req.GetTo()); err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.RenameResponse{}, nil
}

func (s *server) Mkdir(ctx context.Context, req *pluginv1.MkdirRequest) (*pluginv1.MkdirResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	created, err := sb.Mkdir(ctx, req.GetPath())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.MkdirResponse{Created: created}, nil
}

func (s *server) Grep(ctx context.Context, req *pluginv1.GrepRequest) (*pluginv1.GrepResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	res, err := sb.Grep(ctx, driver.GrepOptions{
		Pattern: req.GetPattern(), Path: req.GetPath(), GlobFilter: req.GetGlobFilter(),
		CaseInsensitive: req.GetCaseInsensitive(), MaxResults: int(req.GetMaxResults()), Backend: driver.GrepBackend(req.GetBackend()),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pluginv1.GrepResponse{Truncated: res.Truncated, Backend: pluginv1.GrepBackend(res.Backend)}
	for _, m := range res.Matches {
		resp.Matches = append(resp.Matches, &pluginv1.GrepMatch{Path: m.Path, Line: m.Line, Text: m.Text, TextTruncated: m.TextTruncated})
	}
	return resp, nil
}

func (s *server) Glob(ctx context.Context, req *pluginv1.GlobRequest) (*pluginv1.GlobResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	paths, err := sb.Glob(ctx, req.GetPattern(), req.GetDir())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.GlobResponse{Paths: paths}, nil
}

func (s *server) Walk(ctx context.Context, req *pluginv1.WalkRequest) (*pluginv1.WalkResponse, error) {
	sb, err := s.sandbox(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	files, err := sb.Walk(ctx, req.GetDir(), int(req.GetMaxDepth()), req.GetExclude())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pluginv1.WalkResponse{}
	for _, f := range files {
		resp.Files = append(resp.Files, &pluginv1.WalkedFile{Path: f.Path, Size: f.Size})
	}
	return resp, nil
}

// errStoppedByHost is the cancel cause of a graceful stop the host asked for.
var errStoppedByHost = errors.New("stopped by the host")

// Exec runs one command. The host's stop messages become the driver's
// cancel (graceful, or with cause driver.ErrKill) and its kill channel; a
// host that goes away kills the command.
func (s *server) Exec(stream grpc.BidiStreamingServer[pluginv1.ExecRequest, pluginv1.ExecResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first Exec message must be start")
	}
	sb, err := s.sandbox(start.GetSandbox())
	if err != nil {
		return err
	}
	// Not the stream's context: its end must kill, not stop gracefully.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(stream.Context()))
	defer cancel(nil)
	kill := make(chan struct{})
	var killOnce sync.Once
	killNow := func() { cancel(driver.ErrKill); killOnce.Do(func() { close(kill) }) }
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				return // the host sends no more; the command runs on
			}
			if err != nil {
				select {
				case <-done:
				default:
					killNow()
				}
				return
			}
			if st := m.GetStop(); st != nil {
				if st.GetKill() {
					killNow()
				} else {
					cancel(errStoppedByHost)
				}
			}
		}
	}()
	res, err := sb.Exec(ctx, driver.ExecSpec{
		Command: start.GetCommand(), Dir: start.GetDir(), Env: start.GetEnv(), Stdin: start.GetStdin(),
		Timeout: start.GetTimeout().AsDuration(), RetainLimit: int(start.GetRetainLimit()), Kill: kill,
	}, &streamOutput{stream: stream})
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&pluginv1.ExecResponse{Response: &pluginv1.ExecResponse_Result{Result: resultToProto(res)}})
}

// streamOutput sends a command's output to the host; a failed send means
// the host is gone, which the stream's end handles.
type streamOutput struct {
	stream grpc.BidiStreamingServer[pluginv1.ExecRequest, pluginv1.ExecResponse]
}

func (o *streamOutput) Started() error {
	return o.stream.Send(&pluginv1.ExecResponse{Response: &pluginv1.ExecResponse_Started{Started: &pluginv1.ExecStarted{}}})
}

func (o *streamOutput) Chunk(st driver.Stream, data []byte) error {
	return o.stream.Send(&pluginv1.ExecResponse{Response: &pluginv1.ExecResponse_Output{Output: &pluginv1.ExecOutput{Stream: pluginv1.Stream(st), Data: data}}})
}
