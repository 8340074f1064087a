package sandbox

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/paging"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Limits from the contract.
const (
	defaultReadLines  = 2000
	readChunkBytes    = 1 << 20
	defaultTimeout    = 10 * time.Second
	maxTimeout        = 10 * time.Minute
	maxRetainedBytes  = 1 << 20
	maxGrepResults    = 10000
	defaultListDepth  = 1
	readFileLineWidth = 3
	// A ReadFile line longer than this is no text; content is kept within
	// the other (a client's default receive limit is 4 MiB).
	maxReadLineBytes    = 1 << 20
	maxReadContentBytes = 1 << 20
	execIDAllowedChars  = "A-Za-z0-9._-"
)

// domain is the google.rpc.ErrorInfo domain of every sandbox error.
const domain grpcerr.Domain = "sandbox.fabro.dev"

var execIDRe = regexp.MustCompile(`^[` + execIDAllowedChars + `]{1,128}$`)

// ListDrivers implements SandboxService: sorted by driver id, a page after
// the page token's id.
func (s *Service) ListDrivers(ctx context.Context, req *sandboxv1.ListDriversRequest) (*sandboxv1.ListDriversResponse, error) {
	names := slices.Sorted(maps.Keys(s.drivers))
	key := func(name string) []string { return []string{name} }
	page, next, err := paging.Page(names, req, paging.Filter(), key, paging.Ascending(key))
	if err != nil {
		return nil, pageErr(err)
	}
	resp := &sandboxv1.ListDriversResponse{NextPageToken: next}
	for _, name := range page {
		resp.Drivers = append(resp.Drivers, s.describeDriver(ctx, name))
	}
	return resp, nil
}

// GetDriver implements SandboxService.
func (s *Service) GetDriver(ctx context.Context, req *sandboxv1.GetDriverRequest) (*sandboxv1.GetDriverResponse, error) {
	if req.GetDriverId() == "" {
		return nil, domain.InvalidField("driver_id", "driver_id is required; ListDrivers names the drivers")
	}
	if _, ok := s.drivers[req.GetDriverId()]; !ok {
		return nil, domain.New(codes.NotFound, "DRIVER_NOT_FOUND", fmt.Sprintf("no driver %q; ListDrivers names the drivers", req.GetDriverId()),
			grpcerr.Meta("driver_id", req.GetDriverId()))
	}
	return &sandboxv1.GetDriverResponse{Driver: s.describeDriver(ctx, req.GetDriverId())}, nil
}

// describeDriver is a driver as ListDrivers and GetDriver give it.
func (s *Service) describeDriver(ctx context.Context, name string) *sandboxv1.Driver {
	d := s.drivers[name]
	pd := &sandboxv1.Driver{DriverId: name, Capabilities: capsToProto(d.Capabilities()), Available: true}
	if err := d.Available(ctx); err != nil {
		pd.Available, pd.UnavailableReason = false, err.Error()
	}
	if v, ok := d.(interface{ Version() string }); ok { // plugins
		pd.Version = v.Version()
	}
	return pd
}

// pageErr answers a paging error on the field it is about.
func pageErr(err error) error {
	return domain.InvalidField(paging.Field(err), err.Error())
}

// required refuses an empty required field.
func required(field, value string) error {
	if value == "" {
		return domain.InvalidField(field, field+" is required")
	}
	return nil
}

// CreateSandbox implements SandboxService.
func (s *Service) CreateSandbox(ctx context.Context, req *sandboxv1.CreateSandboxRequest) (*sandboxv1.CreateSandboxResponse, error) {
	spec := req.GetSpec()
	if spec == nil {
		return nil, domain.InvalidField("spec", "a spec is required")
	}
	name := cmp.Or(spec.GetDriver(), s.defaultDriver)
	d, ok := s.drivers[name]
	if !ok {
		return nil, domain.InvalidField("spec.driver", fmt.Sprintf("unknown driver %q; ListDrivers names the drivers", spec.GetDriver()))
	}
	if err := validateEnv("spec.env", spec.GetEnv()); err != nil {
		return nil, err
	}
	if err := s.roots.check(d, spec.GetWorkingDirectory()); err != nil {
		return nil, err
	}
	if iso := d.Capabilities().Isolation; iso != driver.IsolationVM && iso != driver.IsolationContainer {
		if err := s.checkWorkspaceOwner(ctx, spec.GetWorkingDirectory()); err != nil {
			return nil, err
		}
	}
	// A host directory mounted into a container is a root on this host
	// like any other.
	if hostDir, ok := spec.GetDriverOptions()["host_dir"]; ok {
		if err := s.roots.checkHostDir(hostDir); err != nil {
			return nil, err
		}
		if err := s.checkWorkspaceOwner(ctx, hostDir); err != nil {
			return nil, err
		}
	}
	limits, err := limitsFromProto(spec.GetLimits())
	if err != nil {
		return nil, err
	}
	if limits, err = s.diskLimit(d, spec, limits); err != nil {
		return nil, err
	}
	if err := checkLimits(name, d.Capabilities().Limits, limits); err != nil {
		return nil, err
	}
	ds := driver.Spec{
		ID: newID("sbx-"), WorkingDirectory: spec.GetWorkingDirectory(), Env: maps.Clone(spec.GetEnv()),
		Labels: maps.Clone(spec.GetLabels()), Options: maps.Clone(spec.GetDriverOptions()), Limits: limits,
	}
	sb, err := d.Create(ctx, ds)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := s.roots.checkCreated(ds.WorkingDirectory, sb.Info()); err != nil {
		sb.Delete(context.WithoutCancel(ctx))
		return nil, err
	}
	e := &entry{id: ds.ID, driver: d.Name(), spec: ds, sb: sb, info: sb.Info(), created: time.Now(), owner: auth.Owner(ctx)}
	if err := s.add(e); err != nil {
		sb.Delete(context.WithoutCancel(ctx))
		return nil, s.toStatus(ctx, err)
	}
	s.logger.InfoContext(ctx, "sandbox created", "sandbox_id", e.id, "driver", e.driver, "owner", e.owner, "working_directory", sb.Info().WorkingDirectory)
	return &sandboxv1.CreateSandboxResponse{Sandbox: e.toProto()}, nil
}

// GetSandbox implements SandboxService. A sandbox whose backing vanished
// is FAILED, with the reason.
func (s *Service) GetSandbox(ctx context.Context, req *sandboxv1.GetSandboxRequest) (*sandboxv1.GetSandboxResponse, error) {
	e, err := s.owned(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.revive(ctx, e)
	e.check(ctx)
	return &sandboxv1.GetSandboxResponse{Sandbox: e.toProto()}, nil
}

// ListSandboxes implements SandboxService: oldest first, ties by id, a
// page after the page token's (creation time, id).
func (s *Service) ListSandboxes(ctx context.Context, req *sandboxv1.ListSandboxesRequest) (*sandboxv1.ListSandboxesResponse, error) {
	s.mu.Lock()
	var es []*entry
	for _, id := range s.order {
		if e := s.sandboxes[id]; hasLabels(e.spec.Labels, req.GetLabels()) && auth.Reaches(ctx, e.owner) != auth.Unreachable {
			es = append(es, e)
		}
	}
	s.mu.Unlock()
	key := func(e *entry) []string { return []string{fmt.Sprintf("%020d", e.created.UnixNano()), e.id} }
	// The order key gives, compared without formatting it per comparison.
	slices.SortStableFunc(es, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.created.UnixNano(), b.created.UnixNano()), strings.Compare(a.id, b.id))
	})
	var filter []string
	for _, k := range slices.Sorted(maps.Keys(req.GetLabels())) {
		filter = append(filter, k, req.GetLabels()[k])
	}
	page, next, err := paging.Page(es, req, paging.Filter(filter...), key, paging.Ascending(key))
	if err != nil {
		return nil, pageErr(err)
	}
	resp := &sandboxv1.ListSandboxesResponse{NextPageToken: next}
	for _, e := range page {
		s.revive(ctx, e)
		e.check(ctx)
		resp.Sandboxes = append(resp.Sandboxes, e.toProto())
	}
	return resp, nil
}

// DeleteSandbox implements SandboxService.
func (s *Service) DeleteSandbox(ctx context.Context, req *sandboxv1.DeleteSandboxRequest) (*sandboxv1.DeleteSandboxResponse, error) {
	if req.GetSandboxId() == "" {
		return nil, errNoSandboxID()
	}
	// Another principal's is deleted no more than a missing one.
	if _, err := s.owned(ctx, req.GetSandboxId()); err != nil {
		return &sandboxv1.DeleteSandboxResponse{Existed: false}, nil
	}
	existed, err := s.deleteSandbox(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sandboxv1.DeleteSandboxResponse{Existed: existed}, nil
}

// ReadFile implements SandboxService. The whole file is scanned, to count
// its lines and check it is UTF-8, but only the requested lines are kept.
func (s *Service) ReadFile(ctx context.Context, req *sandboxv1.ReadFileRequest) (*sandboxv1.ReadFileResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	if req.GetOffset() < 0 {
		return nil, domain.InvalidField("offset", "offset must not be negative")
	}
	if req.GetLimit() < 0 {
		return nil, domain.InvalidField("limit", "limit must not be negative")
	}
	first := max(req.GetOffset(), 1)
	limit := cmp.Or(req.GetLimit(), defaultReadLines)
	rc, _, err := sb.Open(ctx, req.GetPath(), 0)
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	defer rc.Close()
	// Memory stays bounded whatever the command made the file (a sparse
	// terabyte is one line of zeros): a line longer than maxReadLineBytes
	// is refused, and lines stop being kept once they fill
	// maxReadContentBytes. The scan stops with the call.
	br := bufio.NewReaderSize(rc, 64<<10)
	var lines []string
	var total, kept int64
	full := false
	for {
		line, err := readLine(br)
		if line != "" {
			total++
			if total%4096 == 0 && ctx.Err() != nil {
				return nil, s.toStatus(ctx, ctx.Err())
			}
			if len(line) > maxReadLineBytes {
				return nil, domain.New(codes.FailedPrecondition, "NOT_UTF8", fmt.Sprintf("%s, line %d, is longer than %d bytes: not a text file ReadFile shows; ReadFileBytes reads any file", req.GetPath(), total, maxReadLineBytes))
			}
			if !utf8.ValidString(line) {
				return nil, s.toStatus(ctx, fmt.Errorf("%w: %s, line %d; ReadFileBytes reads any file", driver.ErrNotUTF8, req.GetPath(), total))
			}
			if total >= first && total < first+limit && !full {
				if kept += int64(len(line)) + 16; kept > maxReadContentBytes {
					full = true
				} else {
					line = strings.TrimSuffix(line, "\n")
					lines = append(lines, strings.TrimSuffix(line, "\r"))
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, s.callErr(ctx, e, err)
		}
	}
	resp := &sandboxv1.ReadFileResponse{StartLine: first, LineCount: int64(len(lines)), TotalLines: total,
		Truncated: first+int64(len(lines))-1 < total}
	if len(lines) > 0 {
		width := max(readFileLineWidth, len(strconv.FormatInt(first+int64(len(lines))-1, 10)))
		var b strings.Builder
		for i, l := range lines {
			fmt.Fprintf(&b, "%*d | %s\n", width, first+int64(i), l)
		}
		resp.Content = b.String()
	}
	return resp, nil
}

// readLine is bufio's ReadString('\n') that gives up on a line past
// maxReadLineBytes, returning what it read of it (longer than that).
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		b = append(b, chunk...)
		if err != bufio.ErrBufferFull || len(b) > maxReadLineBytes {
			return string(b), err
		}
	}
}

// ReadFileBytes implements SandboxService.
func (s *Service) ReadFileBytes(req *sandboxv1.ReadFileBytesRequest, stream grpc.ServerStreamingServer[sandboxv1.ReadFileBytesResponse]) error {
	ctx := stream.Context()
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return err
	}
	if err := required("path", req.GetPath()); err != nil {
		return err
	}
	if req.GetOffset() < 0 {
		return domain.InvalidField("offset", "offset must not be negative")
	}
	if req.GetLength() < 0 {
		return domain.InvalidField("length", "length must not be negative")
	}
	rc, size, err := sb.Open(ctx, req.GetPath(), req.GetOffset())
	if err != nil {
		return s.callErr(ctx, e, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if req.GetLength() > 0 {
		r = io.LimitReader(rc, req.GetLength())
	}
	buf := make([]byte, readChunkBytes)
	off, sent := req.GetOffset(), false
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 || !sent {
			if serr := stream.Send(&sandboxv1.ReadFileBytesResponse{Offset: off, Data: buf[:n], SizeBytes: size}); serr != nil {
				return serr
			}
			off += int64(n)
			sent = true
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return s.callErr(ctx, e, err)
		}
	}
}

// WriteFile implements SandboxService.
func (s *Service) WriteFile(ctx context.Context, req *sandboxv1.WriteFileRequest) (*sandboxv1.WriteFileResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	created, err := sb.WriteFile(ctx, req.GetPath(), req.GetContent())
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return &sandboxv1.WriteFileResponse{BytesWritten: int64(len(req.GetContent())), Created: created}, nil
}

// DeleteFile implements SandboxService.
func (s *Service) DeleteFile(ctx context.Context, req *sandboxv1.DeleteFileRequest) (*sandboxv1.DeleteFileResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	if err := sb.Remove(ctx, req.GetPath(), req.GetRecursive()); err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return &sandboxv1.DeleteFileResponse{}, nil
}

// StatFile implements SandboxService.
func (s *Service) StatFile(ctx context.Context, req *sandboxv1.StatFileRequest) (*sandboxv1.StatFileResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	fi, err := sb.Stat(ctx, req.GetPath())
	if errors.Is(err, driver.ErrNotFound) {
		return &sandboxv1.StatFileResponse{}, nil
	}
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return &sandboxv1.StatFileResponse{Exists: true, Info: infoToProto(fi)}, nil
}

// ListDirectory implements SandboxService.
func (s *Service) ListDirectory(ctx context.Context, req *sandboxv1.ListDirectoryRequest) (*sandboxv1.ListDirectoryResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if req.GetDepth() < 0 {
		return nil, domain.InvalidField("depth", "depth must not be negative")
	}
	depth := int(cmp.Or(req.GetDepth(), defaultListDepth))
	filter := paging.Filter(req.GetPath(), strconv.Itoa(depth))
	if _, err := paging.Decode(req.GetPageToken(), filter); err != nil {
		return nil, pageErr(err) // before listing: a bad token costs no walk
	}
	entries, err := sb.ListDir(ctx, req.GetPath(), depth)
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	slices.SortFunc(entries, func(a, b driver.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	key := func(fi driver.FileInfo) []string { return []string{fi.Path} }
	page, next, err := paging.Page(entries, req, filter, key, paging.Ascending(key))
	if err != nil {
		return nil, pageErr(err)
	}
	resp := &sandboxv1.ListDirectoryResponse{NextPageToken: next}
	for _, fi := range page {
		resp.Entries = append(resp.Entries, infoToProto(fi))
	}
	return resp, nil
}

// RenameFile implements SandboxService.
func (s *Service) RenameFile(ctx context.Context, req *sandboxv1.RenameFileRequest) (*sandboxv1.RenameFileResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := required("from_path", req.GetFromPath()); err != nil {
		return nil, err
	}
	if err := required("to_path", req.GetToPath()); err != nil {
		return nil, err
	}
	if err := sb.Rename(ctx, req.GetFromPath(), req.GetToPath()); err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return &sandboxv1.RenameFileResponse{}, nil
}

// MakeDirectory implements SandboxService.
func (s *Service) MakeDirectory(ctx context.Context, req *sandboxv1.MakeDirectoryRequest) (*sandboxv1.MakeDirectoryResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	created, err := sb.Mkdir(ctx, req.GetPath())
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return &sandboxv1.MakeDirectoryResponse{Created: created}, nil
}

// Exec implements SandboxService.
func (s *Service) Exec(ctx context.Context, req *sandboxv1.ExecRequest) (*sandboxv1.ExecResponse, error) {
	res, err := s.exec(ctx, req.GetSandboxId(), req.GetSpec(), nil)
	if err != nil {
		return nil, err
	}
	return &sandboxv1.ExecResponse{Result: res}, nil
}

// ExecStream implements SandboxService.
func (s *Service) ExecStream(req *sandboxv1.ExecStreamRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecStreamResponse]) error {
	out := &streamOutput{stream: stream}
	res, err := s.exec(stream.Context(), req.GetSandboxId(), req.GetSpec(), out)
	if err != nil {
		return err
	}
	return stream.Send(&sandboxv1.ExecStreamResponse{Event: &sandboxv1.ExecStreamResponse_Finished{Finished: res}})
}

// streamOutput sends a command's output down an ExecStream.
type streamOutput struct {
	stream  grpc.ServerStreamingServer[sandboxv1.ExecStreamResponse]
	started *sandboxv1.ExecStarted
}

func (o *streamOutput) Started() error {
	return o.stream.Send(&sandboxv1.ExecStreamResponse{Event: &sandboxv1.ExecStreamResponse_Started{Started: o.started}})
}

func (o *streamOutput) Chunk(st driver.Stream, data []byte) error {
	ps := sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT
	if st == driver.Stderr {
		ps = sandboxv1.OutputStream_OUTPUT_STREAM_STDERR
	}
	// Send marshals before it returns, so data need not be copied.
	return o.stream.Send(&sandboxv1.ExecStreamResponse{Event: &sandboxv1.ExecStreamResponse_Output{Output: &sandboxv1.ExecOutput{Stream: ps, Data: data}}})
}

func (s *Service) exec(ctx context.Context, id string, spec *sandboxv1.ExecSpec, out *streamOutput) (res *sandboxv1.ExecResult, err error) {
	e, sb, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	ctx, span := startExecSpan(ctx, e, spec.GetCommand())
	defer func() { endExecSpan(ctx, span, e.driver, res, err) }()
	ds, execID, err := execSpec(spec)
	if err != nil {
		return nil, err
	}
	caps := sb.Info().Capabilities
	if len(ds.Stdin) > 0 && !caps.Stdin {
		return nil, domain.New(codes.FailedPrecondition, "CAPABILITY_UNSUPPORTED", "this sandbox's driver cannot give a command stdin", grpcerr.Meta("capability", "stdin"))
	}
	ctx, kill, done, err := e.startExec(ctx, execID)
	if err != nil {
		return nil, err
	}
	defer done()
	ds.Kill = kill
	var o driver.Output
	if out != nil {
		out.started = &sandboxv1.ExecStarted{ExecId: execID, StreamsSeparated: caps.StreamsSeparated, LiveStreaming: caps.LiveStreaming}
		o = out
	}
	dres, err := sb.Exec(ctx, ds, o)
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return resultToProto(execID, dres), nil
}

// execSpec validates spec and applies the contract's defaults and caps.
func execSpec(spec *sandboxv1.ExecSpec) (driver.ExecSpec, string, error) {
	switch {
	case spec.GetCommand() == "":
		return driver.ExecSpec{}, "", domain.InvalidField("spec.command", "the command is empty")
	case spec.GetTimeout().AsDuration() < 0:
		return driver.ExecSpec{}, "", domain.InvalidField("spec.timeout", "the timeout must not be negative")
	case spec.GetRetainedOutputLimitBytes() < 0:
		return driver.ExecSpec{}, "", domain.InvalidField("spec.retained_output_limit_bytes", "the output limit must not be negative")
	case spec.GetExecId() != "" && !execIDRe.MatchString(spec.GetExecId()):
		return driver.ExecSpec{}, "", domain.InvalidField("spec.exec_id", "exec_id must be 1 to 128 characters from ["+execIDAllowedChars+"]")
	case strings.ContainsRune(spec.GetCommand(), 0):
		return driver.ExecSpec{}, "", domain.InvalidField("spec.command", "the command contains NUL")
	}
	if err := validateEnv("spec.env", spec.GetEnv()); err != nil {
		return driver.ExecSpec{}, "", err
	}
	timeout := spec.GetTimeout().AsDuration()
	if timeout == 0 {
		timeout = defaultTimeout
	}
	limit := spec.GetRetainedOutputLimitBytes()
	if limit == 0 || limit > maxRetainedBytes {
		limit = maxRetainedBytes
	}
	return driver.ExecSpec{
		Command: spec.GetCommand(), Dir: spec.GetWorkingDir(), Env: spec.GetEnv(), Stdin: spec.GetStdin(),
		Timeout: min(timeout, maxTimeout), RetainLimit: int(limit),
	}, cmp.Or(spec.GetExecId(), newID("exec-")), nil
}

func validateEnv(field string, env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return domain.InvalidField(field, fmt.Sprintf("environment variable name %q must be non-empty without '=' or NUL", k))
		}
		if strings.ContainsRune(v, 0) {
			return domain.InvalidField(field, fmt.Sprintf("the value of %s contains NUL", k))
		}
	}
	return nil
}

// CancelExec implements SandboxService.
func (s *Service) CancelExec(ctx context.Context, req *sandboxv1.CancelExecRequest) (*sandboxv1.CancelExecResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if req.GetExecId() == "" {
		return nil, domain.InvalidField("exec_id", "name the command to stop: the exec_id ExecStream's started event gave")
	}
	if !sb.Info().Capabilities.Cancel {
		return nil, domain.New(codes.FailedPrecondition, "CAPABILITY_UNSUPPORTED", "this sandbox's driver cannot stop a running command", grpcerr.Meta("capability", "cancel"))
	}
	return &sandboxv1.CancelExecResponse{Stopping: e.cancelExec(req.GetExecId(), req.GetKill())}, nil
}

// Grep implements SandboxService.
func (s *Service) Grep(ctx context.Context, req *sandboxv1.GrepRequest) (*sandboxv1.GrepResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := driver.ValidatePattern(req.GetPattern()); err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	if err := driver.ValidateGlobFilter(req.GetGlobFilter()); err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	if req.GetMaxResults() < 0 {
		return nil, domain.InvalidField("max_results", "max_results must not be negative")
	}
	max := int(req.GetMaxResults())
	if max == 0 || max > maxGrepResults {
		max = maxGrepResults
	}
	res, err := sb.Grep(ctx, driver.GrepOptions{
		Pattern: req.GetPattern(), Path: req.GetPath(), GlobFilter: req.GetGlobFilter(),
		CaseInsensitive: req.GetCaseInsensitive(), MaxResults: max,
	})
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	resp := &sandboxv1.GrepResponse{Truncated: res.Truncated, Backend: sandboxv1.GrepBackend_GREP_BACKEND_POSIX_GREP}
	if res.Backend == driver.BackendRipgrep {
		resp.Backend = sandboxv1.GrepBackend_GREP_BACKEND_RIPGREP
	}
	for _, m := range res.Matches {
		resp.Matches = append(resp.Matches, &sandboxv1.GrepMatch{Path: m.Path, LineNumber: m.Line, Line: m.Text, LineTruncated: m.TextTruncated})
	}
	return resp, nil
}

// Glob implements SandboxService.
func (s *Service) Glob(ctx context.Context, req *sandboxv1.GlobRequest) (*sandboxv1.GlobResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := driver.ValidateGlob(req.GetPattern()); err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	paths, err := sb.Glob(ctx, req.GetPattern(), req.GetPath())
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	return &sandboxv1.GlobResponse{Paths: paths}, nil
}

// Walk implements SandboxService.
func (s *Service) Walk(ctx context.Context, req *sandboxv1.WalkRequest) (*sandboxv1.WalkResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if req.GetMaxDepth() < 0 {
		return nil, domain.InvalidField("max_depth", "max_depth must not be negative")
	}
	files, err := sb.Walk(ctx, req.GetPath(), int(req.GetMaxDepth()), req.GetExcludeDirs())
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	resp := &sandboxv1.WalkResponse{}
	for _, f := range files {
		resp.Files = append(resp.Files, &sandboxv1.WalkedFile{Path: f.Path, SizeBytes: f.Size})
	}
	return resp, nil
}

// toStatus maps driver errors to statuses once, at the edge. Driver error
// texts name paths and programs the client gave or may see, never secrets.
func (s *Service) toStatus(ctx context.Context, err error) error {
	// A driver may give its own status (a remote API's 401 or 429, a
	// plugin's own reason): it passes through, details included, and
	// gains an ErrorInfo if it has none.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return domain.Ensure(se.GRPCStatus().Err())
	}
	msg := err.Error()
	switch {
	case errors.Is(err, driver.ErrPathEscapes):
		return domain.New(codes.PermissionDenied, "PATH_ESCAPES_ROOT", msg)
	case errors.Is(err, driver.ErrNotFound):
		return domain.New(codes.NotFound, "FILE_NOT_FOUND", msg)
	case errors.Is(err, driver.ErrInvalidPattern):
		return domain.New(codes.InvalidArgument, "INVALID_PATTERN", msg)
	case errors.Is(err, driver.ErrInvalid):
		return domain.New(codes.InvalidArgument, "INVALID_ARGUMENT", msg)
	case errors.Is(err, driver.ErrBashMissing):
		return domain.New(codes.FailedPrecondition, "BASH_MISSING", msg)
	case errors.Is(err, driver.ErrUnsupported):
		return domain.New(codes.FailedPrecondition, "CAPABILITY_UNSUPPORTED", msg)
	case errors.Is(err, driver.ErrLimitUnsupported):
		return domain.New(codes.FailedPrecondition, "LIMIT_UNSUPPORTED", msg)
	case errors.Is(err, driver.ErrImageMissing):
		return domain.New(codes.FailedPrecondition, "IMAGE_MISSING", msg)
	case errors.Is(err, driver.ErrGone):
		return domain.New(codes.FailedPrecondition, "SANDBOX_GONE", msg)
	case errors.Is(err, driver.ErrIsDirectory):
		return domain.New(codes.FailedPrecondition, "IS_A_DIRECTORY", msg)
	case errors.Is(err, driver.ErrNotDirectory):
		return domain.New(codes.FailedPrecondition, "NOT_A_DIRECTORY", msg)
	case errors.Is(err, driver.ErrNotEmpty):
		return domain.New(codes.FailedPrecondition, "DIRECTORY_NOT_EMPTY", msg)
	case errors.Is(err, driver.ErrNotUTF8):
		return domain.New(codes.FailedPrecondition, "NOT_UTF8", msg)
	case errors.Is(err, driver.ErrExists):
		return domain.New(codes.AlreadyExists, "EXISTS_AS_NON_DIRECTORY", msg)
	case errors.Is(err, driver.ErrUnavailable):
		return domain.New(codes.Unavailable, "DRIVER_UNAVAILABLE", msg)
	case errors.Is(err, context.DeadlineExceeded):
		return domain.New(codes.DeadlineExceeded, grpcerr.ReasonDeadlineExceeded, msg)
	case errors.Is(err, context.Canceled):
		return domain.New(codes.Canceled, grpcerr.ReasonCancelled, msg)
	}
	s.logger.ErrorContext(ctx, "sandbox driver failure", "error", err)
	return domain.Internal("internal error")
}

// errSandboxFailed is a sandbox that cannot be used. One whose driver was
// unavailable when it was reopened (retry) is tried again after
// reviveEvery: RetryInfo says so.
func errSandboxFailed(id, reason string, retry bool) error {
	if retry {
		return domain.New(codes.FailedPrecondition, "SANDBOX_FAILED", fmt.Sprintf("sandbox %q has FAILED: %s; it is reopened on use once its driver is back, or DeleteSandbox removes it", id, reason),
			grpcerr.Meta("sandbox_id", id), grpcerr.RetryAfter(reviveEvery))
	}
	return domain.New(codes.FailedPrecondition, "SANDBOX_FAILED", fmt.Sprintf("sandbox %q has FAILED: %s; only DeleteSandbox works on it", id, reason), grpcerr.Meta("sandbox_id", id))
}

// owned is the sandbox id for a call of the caller of ctx: NOT_FOUND, as
// for an id no sandbox has, when it is another principal's (and an admin's
// reach into another's is audited).
func (s *Service) owned(ctx context.Context, id string) (*entry, error) {
	e, err := s.get(id)
	if err != nil {
		return nil, err
	}
	if !auth.Allow(ctx, s.logger, "sandbox", id, e.owner) {
		return nil, errSandboxNotFound(id)
	}
	return e, nil
}

func errSandboxNotFound(id string) error {
	return domain.New(codes.NotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("no sandbox %q", id), grpcerr.Meta("sandbox_id", id))
}

func errNoSandboxID() error {
	return domain.InvalidField("sandbox_id", "a sandbox_id is required (CreateSandbox returns it)")
}

func errExecIDInUse(id string) error {
	return domain.New(codes.AlreadyExists, "EXEC_ID_IN_USE", fmt.Sprintf("exec id %q names a running command", id), grpcerr.Meta("exec_id", id))
}
