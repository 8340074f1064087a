package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// sandbox is a sandbox that lives in a plugin process. It is bound to the
// process that made it: once that process is gone, so is the sandbox.
type sandbox struct {
	d         *Driver
	p         *process
	handle    string
	info      driver.Info
	checkable bool
}

var (
	_ driver.Sandbox = (*sandbox)(nil)
	_ driver.Checker = (*sandbox)(nil)
)

func (d *Driver) newSandbox(p *process, handle string, info *pluginv1.Info, checkable bool) *sandbox {
	return &sandbox{d: d, p: p, handle: handle, info: infoFromProto(info), checkable: checkable}
}

// call prepares a call: the process must still run, and the context gets
// the driver's call timeout.
func (s *sandbox) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := s.goneErr(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.d.callContext(ctx)
	return ctx, cancel, nil
}

func (s *sandbox) goneErr() error {
	if reason := s.p.gone(); reason != nil {
		return fmt.Errorf("%w: %w: plugin %q %v", driver.ErrUnavailable, driver.ErrGone, s.d.cfg.Name, reason)
	}
	return nil
}

func (s *sandbox) client() pluginv1.DriverPluginServiceClient { return s.p.conn.client }

// Info implements driver.Sandbox.
func (s *sandbox) Info() driver.Info { return s.info }

// Check implements driver.Checker: the plugin process that made the
// sandbox still runs, and the plugin's own check (when it has one) passes.
func (s *sandbox) Check(ctx context.Context) error {
	if err := s.goneErr(); err != nil {
		return err
	}
	if !s.checkable {
		return nil
	}
	ctx, cancel := s.d.callContext(ctx)
	defer cancel()
	_, err := s.client().Check(ctx, &pluginv1.CheckRequest{Sandbox: s.handle})
	if err != nil {
		return s.d.callErr(ctx, s.p, err)
	}
	return nil
}

// Delete implements driver.Sandbox. A sandbox whose plugin is gone has
// nothing left to delete in it.
func (s *sandbox) Delete(ctx context.Context) error {
	if s.p.gone() != nil {
		return nil
	}
	ctx, cancel := s.d.callContext(ctx)
	defer cancel()
	if _, err := s.client().Delete(ctx, &pluginv1.DeleteRequest{Sandbox: s.handle}); err != nil {
		if err := s.d.callErr(ctx, s.p, err); !errors.Is(err, driver.ErrGone) {
			return err
		}
	}
	return nil
}

// Open implements driver.Files; the file streams from the plugin as it is
// read.
func (s *sandbox) Open(ctx context.Context, path string, offset int64) (io.ReadCloser, int64, error) {
	if err := s.goneErr(); err != nil {
		return nil, 0, err
	}
	// The stream outlives this call: it is bounded by Close, not by the
	// call timeout.
	sctx, cancel := context.WithCancel(ctx)
	stream, err := s.client().Open(sctx, &pluginv1.OpenRequest{Sandbox: s.handle, Path: path, Offset: offset})
	if err != nil {
		cancel()
		return nil, 0, s.d.callErr(ctx, s.p, err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, 0, s.d.callErr(ctx, s.p, err)
	}
	return &fileReader{s: s, ctx: sctx, cancel: cancel, recv: stream.Recv}, first.GetSize(), nil
}

type fileReader struct {
	s      *sandbox
	ctx    context.Context
	cancel context.CancelFunc
	recv   func() (*pluginv1.OpenResponse, error)
	buf    []byte
	err    error
}

func (r *fileReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.recv()
		if err == io.EOF {
			r.err = io.EOF
			continue
		}
		if err != nil {
			r.err = r.s.d.callErr(r.ctx, r.s.p, err)
			continue
		}
		r.buf = m.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *fileReader) Close() error { r.cancel(); return nil }

// WriteFile implements driver.Files.
func (s *sandbox) WriteFile(ctx context.Context, path string, data []byte) (bool, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	resp, err := s.client().WriteFile(ctx, &pluginv1.WriteFileRequest{Sandbox: s.handle, Path: path, Data: data})
	if err != nil {
		return false, s.d.callErr(ctx, s.p, err)
	}
	return resp.GetCreated(), nil
}

// Remove implements driver.Files.
func (s *sandbox) Remove(ctx context.Context, path string, recursive bool) error {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.client().Remove(ctx, &pluginv1.RemoveRequest{Sandbox: s.handle, Path: path, Recursive: recursive}); err != nil {
		return s.d.callErr(ctx, s.p, err)
	}
	return nil
}

// Stat implements driver.Files.
func (s *sandbox) Stat(ctx context.Context, path string) (driver.FileInfo, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return driver.FileInfo{}, err
	}
	defer cancel()
	resp, err := s.client().Stat(ctx, &pluginv1.StatRequest{Sandbox: s.handle, Path: path})
	if err != nil {
		return driver.FileInfo{}, s.d.callErr(ctx, s.p, err)
	}
	return fileInfoFromProto(resp.GetInfo()), nil
}

// ListDir implements driver.Files.
func (s *sandbox) ListDir(ctx context.Context, path string, depth int) ([]driver.FileInfo, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := s.client().ListDir(ctx, &pluginv1.ListDirRequest{Sandbox: s.handle, Path: path, Depth: int32(depth)})
	if err != nil {
		return nil, s.d.callErr(ctx, s.p, err)
	}
	out := make([]driver.FileInfo, 0, len(resp.GetEntries()))
	for _, fi := range resp.GetEntries() {
		out = append(out, fileInfoFromProto(fi))
	}
	return out, nil
}

// Rename implements driver.Files.
func (s *sandbox) Rename(ctx context.Context, from, to string) error {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.client().Rename(ctx, &pluginv1.RenameRequest{Sandbox: s.handle, From: from, To: to}); err != nil {
		return s.d.callErr(ctx, s.p, err)
	}
	return nil
}

// Mkdir implements driver.Files.
func (s *sandbox) Mkdir(ctx context.Context, path string) (bool, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	resp, err := s.client().Mkdir(ctx, &pluginv1.MkdirRequest{Sandbox: s.handle, Path: path})
	if err != nil {
		return false, s.d.callErr(ctx, s.p, err)
	}
	return resp.GetCreated(), nil
}

// Grep implements driver.Searcher.
func (s *sandbox) Grep(ctx context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return driver.GrepResult{}, err
	}
	defer cancel()
	resp, err := s.client().Grep(ctx, &pluginv1.GrepRequest{
		Sandbox: s.handle, Pattern: o.Pattern, Path: o.Path, GlobFilter: o.GlobFilter, CaseInsensitive: o.CaseInsensitive,
		MaxResults: int32(o.MaxResults), Backend: pluginv1.GrepBackend(o.Backend),
	})
	if err != nil {
		return driver.GrepResult{}, s.d.callErr(ctx, s.p, err)
	}
	res := driver.GrepResult{Truncated: resp.GetTruncated(), Backend: driver.GrepBackend(resp.GetBackend())}
	for _, m := range resp.GetMatches() {
		res.Matches = append(res.Matches, driver.GrepMatch{Path: m.GetPath(), Line: m.GetLine(), Text: m.GetText(), TextTruncated: m.GetTextTruncated()})
	}
	return res, nil
}

// Glob implements driver.Searcher.
func (s *sandbox) Glob(ctx context.Context, pattern, dir string) ([]string, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := s.client().Glob(ctx, &pluginv1.GlobRequest{Sandbox: s.handle, Pattern: pattern, Dir: dir})
	if err != nil {
		return nil, s.d.callErr(ctx, s.p, err)
	}
	return resp.GetPaths(), nil
}

// Walk implements driver.Searcher.
func (s *sandbox) Walk(ctx context.Context, dir string, maxDepth int, exclude []string) ([]driver.WalkedFile, error) {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := s.client().Walk(ctx, &pluginv1.WalkRequest{Sandbox: s.handle, Dir: dir, MaxDepth: int32(maxDepth), Exclude: exclude})
	if err != nil {
		return nil, s.d.callErr(ctx, s.p, err)
	}
	var out []driver.WalkedFile
	for _, f := range resp.GetFiles() {
		out = append(out, driver.WalkedFile{Path: f.GetPath(), Size: f.GetSize()})
	}
	return out, nil
}

// Exec implements driver.Execer over the bidirectional Exec stream. The
// caller's cancel and kill become stop messages, so the plugin stops the
// command as the contract says and the result still comes back; a plugin
// that does not end the command in time, or exits, fails the exec.
func (s *sandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	if err := s.goneErr(); err != nil {
		return driver.ExecResult{}, err
	}
	sctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	stream, err := s.client().Exec(sctx)
	if err != nil {
		return driver.ExecResult{}, s.d.callErr(sctx, s.p, err)
	}
	start := &pluginv1.ExecStart{
		Sandbox: s.handle, Command: spec.Command, Dir: spec.Dir, Env: spec.Env, Stdin: spec.Stdin,
		Timeout: durationpb.New(spec.Timeout), RetainLimit: int64(spec.RetainLimit),
	}
	if err := stream.Send(&pluginv1.ExecRequest{Request: &pluginv1.ExecRequest_Start{Start: start}}); err != nil {
		_, rerr := stream.Recv() // the send error hides the status
		return driver.ExecResult{}, s.d.callErr(sctx, s.p, rerr)
	}

	// The watcher is the only sender from here on. It also bounds the
	// wait for a hung plugin: the command's timeout, or a stop, plus the
	// grace and some slack.
	done := make(chan struct{})
	defer close(done)
	hung := make(chan struct{})
	go func() {
		deadline := time.NewTimer(spec.Timeout + driver.StopGrace + stopSlack)
		defer deadline.Stop()
		ctxDone, kill := ctx.Done(), spec.Kill
		var after <-chan time.Time
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				k := errors.Is(context.Cause(ctx), driver.ErrKill)
				stream.Send(&pluginv1.ExecRequest{Request: &pluginv1.ExecRequest_Stop{Stop: &pluginv1.ExecStop{Kill: k}}})
				after = time.After(driver.StopGrace + stopSlack)
			case <-kill:
				kill = nil
				stream.Send(&pluginv1.ExecRequest{Request: &pluginv1.ExecRequest_Stop{Stop: &pluginv1.ExecStop{Kill: true}}})
				after = time.After(stopSlack)
			case <-deadline.C:
				close(hung)
				abort()
				return
			case <-after:
				close(hung)
				abort()
				return
			}
		}
	}()

	sinkOK := out != nil
	for {
		m, err := stream.Recv()
		if err != nil {
			select {
			case <-hung:
				return driver.ExecResult{}, fmt.Errorf("%w: plugin %q did not end the command in time: %w", driver.ErrUnavailable, s.d.cfg.Name, context.DeadlineExceeded)
			default:
			}
			if err == io.EOF {
				return driver.ExecResult{}, fmt.Errorf("%w: plugin %q ended the exec without a result", driver.ErrUnavailable, s.d.cfg.Name)
			}
			return driver.ExecResult{}, s.d.callErr(sctx, s.p, err)
		}
		switch r := m.GetResponse().(type) {
		case *pluginv1.ExecResponse_Started:
			if sinkOK {
				sinkOK = out.Started() == nil
			}
		case *pluginv1.ExecResponse_Output:
			if sinkOK {
				sinkOK = out.Chunk(driver.Stream(r.Output.GetStream()), r.Output.GetData()) == nil
			}
		case *pluginv1.ExecResponse_Result:
			return resultFromProto(r.Result), nil
		}
	}
}
