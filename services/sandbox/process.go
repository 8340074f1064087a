package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Limits of the processes facet.
const (
	defaultProcessRetain = 1 << 20
	maxProcessRetain     = 16 << 20
	maxRunningProcesses  = 64  // per sandbox
	maxKeptProcesses     = 256 // per sandbox, running and ended
	maxLogChunks         = 1 << 14
	attachBatch          = 64 // chunks sent per look at the log
)

// proc is one process of StartProcess. Its log is written by the driver's
// reader; its waiter goroutine ends when the process does.
type proc struct {
	id, sandboxID, owner string
	spec                 *sandboxv1.ProcessSpec
	start                time.Time
	log                  *outLog
	stdinMu              sync.Mutex // one writer at a time, across attachers
	done                 chan struct{}

	mu          sync.Mutex
	cur         driver.Process        // the running one: a service's restart replaces it
	result      *sandboxv1.ExecResult // set once done
	stopping    driver.Termination    // set when the service stops it (timeout, DeleteSandbox)
	userStopped bool                  // SignalProcess sent a stopping signal: no restart
	restarts    int
	ready       bool
	probeMsg    string        // why the probe gave up
	readyWait   chan struct{} // closed when ready, the probe gives up, or the process ends
}

// current is the running driver process.
func (p *proc) current() driver.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// wakeReady closes readyWait; p.mu is held.
func (p *proc) wakeReady() {
	select {
	case <-p.readyWait:
	default:
		close(p.readyWait)
	}
}

// toProto describes the process now.
func (p *proc) toProto() *sandboxv1.Process {
	out, dropped := p.log.counts()
	pp := &sandboxv1.Process{ProcessId: p.id, SandboxId: p.sandboxID, Owner: p.owner, Spec: p.spec,
		State: sandboxv1.ProcessState_PROCESS_STATE_RUNNING, StartTime: timestamppb.New(p.start), OutputBytes: out, DroppedBytes: dropped}
	p.mu.Lock()
	defer p.mu.Unlock()
	pp.Ready, pp.Restarts, pp.ReadinessMessage = p.ready, int32(p.restarts), p.probeMsg
	if p.result != nil {
		pp.State, pp.Result = sandboxv1.ProcessState_PROCESS_STATE_EXITED, p.result
	}
	return pp
}

// procTable is a sandbox's processes; entry.mu guards it.
type procTable struct {
	byID  map[string]*proc
	order []string
}

// logChunk is one retained chunk of output.
type logChunk struct {
	seq, offset int64
	stream      driver.Stream
	data        []byte
}

// outLog is a process's output: the newest chunks up to limit bytes (and
// maxLogChunks chunks); older ones are dropped and counted. Appending
// never blocks on a reader, so a slow client never slows the process.
type outLog struct {
	mu      sync.Mutex
	chunks  []logChunk // oldest first
	bytes   int64      // retained
	limit   int64
	next    int64 // seq of the next chunk
	total   int64 // bytes ever written: the next chunk's offset
	dropped int64
	closed  bool
	wake    chan struct{} // closed and replaced on every change
}

func newOutLog(limit int64) *outLog { return &outLog{limit: limit, next: 1, wake: make(chan struct{})} }

// Started implements driver.Output.
func (l *outLog) Started() error { return nil }

// Chunk implements driver.Output: data is copied, the oldest dropped.
func (l *outLog) Chunk(s driver.Stream, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := logChunk{seq: l.next, offset: l.total, stream: s, data: slices.Clone(data)}
	l.next++
	l.total += int64(len(data))
	l.chunks = append(l.chunks, c)
	l.bytes += int64(len(data))
	drop := 0
	for l.bytes > l.limit || len(l.chunks)-drop > maxLogChunks {
		l.bytes -= int64(len(l.chunks[drop].data))
		l.dropped += int64(len(l.chunks[drop].data))
		drop++
	}
	if drop > 0 {
		clear(l.chunks[:drop])
		l.chunks = l.chunks[drop:]
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return nil
}

// close marks the log complete: readers end after the last chunk.
func (l *outLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *outLog) counts() (total, dropped int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.dropped
}

// read returns the chunks from offset on (the first trimmed to start at
// it), at most attachBatch; gap is the start of the retained output when
// output after offset was dropped (gap > offset). It returns the channel
// that is closed on the next change, and whether the log is complete.
func (l *outLog) read(offset int64) (chunks []logChunk, gapTo int64, wake <-chan struct{}, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.chunks) > 0 && l.chunks[0].offset > offset {
		gapTo, offset = l.chunks[0].offset, l.chunks[0].offset
	} else if len(l.chunks) == 0 && l.total > offset {
		gapTo, offset = l.total, l.total
	}
	i, _ := slices.BinarySearchFunc(l.chunks, offset, func(c logChunk, off int64) int {
		switch {
		case c.offset+int64(len(c.data)) <= off:
			return -1
		case c.offset > off:
			return 1
		}
		return 0
	})
	for ; i < len(l.chunks) && len(chunks) < attachBatch; i++ {
		c := l.chunks[i]
		if skip := offset - c.offset; skip > 0 {
			c.data, c.offset = c.data[skip:], offset
		}
		chunks = append(chunks, c)
	}
	return chunks, gapTo, l.wake, l.closed && i >= len(l.chunks)
}

// processSpec validates spec: the driver's spec, the retain limit, the timeout.
func processSpec(spec *sandboxv1.ProcessSpec) (driver.ProcessSpec, int64, time.Duration, error) {
	command := spec.GetCommand()
	switch {
	case command == "" && len(spec.GetArgs()) == 0:
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.command", "give a command or args")
	case command != "" && len(spec.GetArgs()) > 0:
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.args", "give a command or args, not both")
	case len(spec.GetArgs()) > 0 && spec.GetArgs()[0] == "":
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.args", "the program (args[0]) is empty")
	case spec.GetTimeout().AsDuration() < 0:
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.timeout", "the timeout must not be negative")
	case spec.GetRetainedOutputLimitBytes() < 0:
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.retained_output_limit_bytes", "the output limit must not be negative")
	}
	if spec.GetService() && !serviceNameRe.MatchString(spec.GetName()) {
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.name", "a service needs a name of 1 to 64 characters from ["+execIDAllowedChars+"]")
	}
	if spec.GetName() != "" && !spec.GetService() {
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.name", "only a service (service true) has a name")
	}
	if spec.GetRestart() == sandboxv1.RestartPolicy_RESTART_POLICY_ON_FAILURE && !spec.GetService() {
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.restart", "only a service (service true) is restarted")
	}
	if spec.GetMaxRestarts() < 0 {
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.max_restarts", "max_restarts must not be negative")
	}
	if r := spec.GetReadiness(); r != nil {
		switch {
		case (r.GetPort() != 0) == (r.GetCommand() != ""):
			return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.readiness", "give a port or a command")
		case r.GetPort() < 0 || r.GetPort() > 65535:
			return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.readiness.port", "a port is 1 to 65535")
		case r.GetInterval().AsDuration() < 0 || r.GetTimeout().AsDuration() < 0:
			return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.readiness", "interval and timeout must not be negative")
		case strings.ContainsRune(r.GetCommand(), 0):
			return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.readiness.command", "the command contains NUL")
		}
	}
	var term *driver.TerminalSize
	if t := spec.GetTerminal(); t != nil {
		if t.GetRows() < 1 || t.GetRows() > 1000 || t.GetCols() < 1 || t.GetCols() > 1000 {
			return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.terminal", "rows and cols are 1 to 1,000")
		}
		term = &driver.TerminalSize{Rows: int(t.GetRows()), Cols: int(t.GetCols())}
	}
	if len(spec.GetArgs()) > 0 {
		command = "exec " + shellQuote(spec.GetArgs())
	}
	if strings.ContainsRune(command, 0) {
		return driver.ProcessSpec{}, 0, 0, domain.InvalidField("spec.command", "the command contains NUL")
	}
	if err := validateEnv("spec.env", spec.GetEnv()); err != nil {
		return driver.ProcessSpec{}, 0, 0, err
	}
	limit := spec.GetRetainedOutputLimitBytes()
	if limit == 0 {
		limit = defaultProcessRetain
	}
	return driver.ProcessSpec{Command: command, Dir: spec.GetWorkingDir(), Env: spec.GetEnv(), Terminal: term}, min(limit, maxProcessRetain), spec.GetTimeout().AsDuration(), nil
}

var serviceNameRe = regexp.MustCompile(`^[` + execIDAllowedChars + `]{1,64}$`)

// Service defaults.
const (
	defaultMaxRestarts = 5
	maxMaxRestarts     = 100
	firstBackoff       = 100 * time.Millisecond
	maxBackoff         = 5 * time.Second
	defaultProbeEvery  = 200 * time.Millisecond
	defaultProbeFor    = 60 * time.Second
	probeExecTimeout   = 5 * time.Second
)

// shellQuote quotes each word for bash, so args run without a shell's reading.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func errProcessesUnsupported(id string) error {
	return domain.New(codes.FailedPrecondition, "CAPABILITY_UNSUPPORTED", "this sandbox's driver does not offer the processes facet (StartProcess, AttachProcess)",
		grpcerr.Meta("capability", "processes"), grpcerr.Meta("sandbox_id", id))
}

func errProcessNotFound(id string) error {
	return domain.New(codes.NotFound, "PROCESS_NOT_FOUND", fmt.Sprintf("no process %q", id), grpcerr.Meta("process_id", id))
}

// StartProcess implements SandboxService.
func (s *Service) StartProcess(ctx context.Context, req *sandboxv1.StartProcessRequest) (*sandboxv1.StartProcessResponse, error) {
	e, sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	starter, ok := sb.(driver.ProcessStarter)
	if !ok || !sb.Info().Capabilities.Processes {
		return nil, errProcessesUnsupported(e.id)
	}
	ds, limit, timeout, err := processSpec(req.GetSpec())
	if err != nil {
		return nil, err
	}
	if ds.Terminal != nil && !sb.Info().Capabilities.Terminals {
		return nil, domain.New(codes.FailedPrecondition, "CAPABILITY_UNSUPPORTED", "this sandbox's driver does not offer the terminals facet (ProcessSpec.terminal)",
			grpcerr.Meta("capability", "terminals"), grpcerr.Meta("sandbox_id", e.id))
	}
	p := &proc{id: newID("proc-"), sandboxID: e.id, owner: auth.Owner(ctx), spec: proto.CloneOf(req.GetSpec()), start: time.Now(),
		log: newOutLog(limit), done: make(chan struct{}), readyWait: make(chan struct{})}
	e.mu.Lock()
	if e.deleting {
		e.mu.Unlock()
		return nil, errSandboxNotFound(e.id)
	}
	if e.paused {
		e.mu.Unlock()
		return nil, errSandboxPaused(e.id)
	}
	running := 0
	for _, q := range e.procs.byID {
		select {
		case <-q.done:
		default:
			running++
		}
	}
	if name := req.GetSpec().GetName(); name != "" {
		if q := e.procs.byName(name); q != nil {
			e.mu.Unlock()
			return nil, domain.New(codes.AlreadyExists, "SERVICE_NAME_IN_USE", fmt.Sprintf("a running service of this sandbox is named %q", name), grpcerr.Meta("name", name))
		}
	}
	if running >= maxRunningProcesses {
		e.mu.Unlock()
		return nil, domain.New(codes.ResourceExhausted, "TOO_MANY_PROCESSES", fmt.Sprintf("the sandbox already runs %d processes", running), grpcerr.Meta("sandbox_id", e.id))
	}
	// Held while starting, so DeleteSandbox (which takes e.mu) either
	// sees the process or comes first and the driver refuses it.
	dp, err := starter.StartProcess(context.WithoutCancel(ctx), ds, p.log)
	if err != nil {
		e.mu.Unlock()
		return nil, s.callErr(ctx, e, err)
	}
	p.cur = dp
	e.procs.add(p)
	e.mu.Unlock()
	go p.supervise(sb, starter, ds, timeout)
	s.logger.InfoContext(ctx, "process started", "sandbox_id", e.id, "process_id", p.id)
	return &sandboxv1.StartProcessResponse{Process: p.toProto()}, nil
}

// supervise runs the process to its end: past timeout it stops it (TERM,
// StopGrace, KILL); a service that fails is started again as its restart
// policy says; each start gets its readiness probe. It returns when the
// process has ended for good.
func (p *proc) supervise(sb driver.Sandbox, starter driver.ProcessStarter, ds driver.ProcessSpec, timeout time.Duration) {
	maxRestarts := int(p.spec.GetMaxRestarts())
	if maxRestarts == 0 {
		maxRestarts = defaultMaxRestarts
	}
	maxRestarts = min(maxRestarts, maxMaxRestarts)
	backoff := firstBackoff
	for {
		cur := p.current()
		probeDone := make(chan struct{})
		if p.spec.GetReadiness() != nil {
			go p.probe(sb, cur, probeDone)
		}
		res := p.waitOne(cur, timeout)
		close(probeDone)
		p.mu.Lock()
		failed := res.Signal != "" || res.ExitCode == nil || *res.ExitCode != 0
		again := p.spec.GetRestart() == sandboxv1.RestartPolicy_RESTART_POLICY_ON_FAILURE && failed &&
			p.stopping == driver.TerminationUnknown && !p.userStopped && p.restarts < maxRestarts
		p.mu.Unlock()
		if again {
			time.Sleep(backoff)
			backoff = min(2*backoff, maxBackoff)
			p.mu.Lock()
			stopped := p.stopping != driver.TerminationUnknown || p.userStopped
			p.mu.Unlock()
			if !stopped {
				// A deleted sandbox refuses the start: the process ends.
				if dp, err := starter.StartProcess(context.Background(), ds, p.log); err == nil {
					p.mu.Lock()
					p.cur, p.restarts, p.ready, p.probeMsg = dp, p.restarts+1, false, ""
					p.wakeReady() // waiters look again, then wait on the new run's
					p.readyWait = make(chan struct{})
					p.mu.Unlock()
					continue
				}
			}
		}
		p.log.close()
		p.mu.Lock()
		if p.stopping != driver.TerminationUnknown {
			res.Termination = p.stopping
		}
		p.result = resultToProto(p.id, res)
		p.wakeReady()
		p.mu.Unlock()
		close(p.done)
		return
	}
}

// waitOne waits for one run of the process; past timeout it stops it.
func (p *proc) waitOne(cur driver.Process, timeout time.Duration) driver.ExecResult {
	if timeout <= 0 {
		return cur.Wait()
	}
	ended := make(chan driver.ExecResult, 1)
	go func() { ended <- cur.Wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-ended:
		return res
	case <-t.C:
	}
	p.mu.Lock()
	if p.stopping == driver.TerminationUnknown {
		p.stopping = driver.TimedOut
	}
	p.mu.Unlock()
	cur.Signal(syscall.SIGTERM)
	select {
	case res := <-ended:
		return res
	case <-time.After(driver.StopGrace):
		cur.Signal(syscall.SIGKILL)
		return <-ended
	}
}

// probe runs the readiness probe inside the sandbox (bash's /dev/tcp for
// a port) until it passes, gives up, or this run of the process ends.
func (p *proc) probe(sb driver.Sandbox, cur driver.Process, runDone <-chan struct{}) {
	r := p.spec.GetReadiness()
	command := r.GetCommand()
	if r.GetPort() != 0 {
		command = fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", r.GetPort())
	}
	every, limit := cmpOr(r.GetInterval().AsDuration(), defaultProbeEvery), cmpOr(r.GetTimeout().AsDuration(), defaultProbeFor)
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), min(probeExecTimeout, time.Until(deadline)+time.Millisecond))
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: command, Timeout: probeExecTimeout, RetainLimit: 4096}, nil)
		cancel()
		if err == nil && res.ExitCode != nil && *res.ExitCode == 0 {
			p.mu.Lock()
			if p.cur == cur {
				p.ready = true
				p.wakeReady()
			}
			p.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			p.mu.Lock()
			if p.cur == cur {
				p.probeMsg = fmt.Sprintf("the readiness probe did not pass within %s", limit)
				p.wakeReady()
			}
			p.mu.Unlock()
			return
		}
		select {
		case <-runDone:
			return
		case <-time.After(every):
		}
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// byName is the running service named name, or nil.
func (t *procTable) byName(name string) *proc {
	for i := len(t.order) - 1; i >= 0; i-- {
		q := t.byID[t.order[i]]
		if q.spec.GetName() != name {
			continue
		}
		select {
		case <-q.done:
		default:
			return q
		}
	}
	return nil
}

// byIDOrName is the process with that id, else the newest service with
// that name (running or not).
func (t *procTable) byIDOrName(id string) *proc {
	if p, ok := t.byID[id]; ok {
		return p
	}
	if q := t.byName(id); q != nil {
		return q
	}
	for i := len(t.order) - 1; i >= 0; i-- {
		if q := t.byID[t.order[i]]; q.spec.GetName() == id {
			return q
		}
	}
	return nil
}

// add keeps p, forgetting the oldest ended process past maxKeptProcesses.
func (t *procTable) add(p *proc) {
	if t.byID == nil {
		t.byID = map[string]*proc{}
	}
	t.byID[p.id] = p
	t.order = append(t.order, p.id)
	for i := 0; len(t.order) > maxKeptProcesses && i < len(t.order); {
		q := t.byID[t.order[i]]
		select {
		case <-q.done:
			delete(t.byID, q.id)
			t.order = slices.Delete(t.order, i, i+1)
		default:
			i++
		}
	}
}

// killAll kills every running process (DeleteSandbox); e.mu is held.
func (t *procTable) killAll() {
	for _, p := range t.byID {
		p.mu.Lock()
		if p.stopping == driver.TerminationUnknown {
			p.stopping = driver.Killed
		}
		cur := p.cur
		p.mu.Unlock()
		cur.Signal(syscall.SIGKILL)
	}
}

// process is the caller's process id of sandbox sandboxID: NOT_FOUND for an
// unknown id and for another principal's.
func (s *Service) process(ctx context.Context, sandboxID, id string) (*proc, error) {
	e, err := s.owned(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, domain.InvalidField("process_id", "a process_id is required (StartProcess returns it)")
	}
	e.mu.Lock()
	p := e.procs.byIDOrName(id)
	e.mu.Unlock()
	if p == nil || !auth.Allow(ctx, s.logger, "process", id, p.owner) {
		return nil, errProcessNotFound(id)
	}
	return p, nil
}

// AttachProcess implements SandboxService.
func (s *Service) AttachProcess(stream grpc.BidiStreamingServer[sandboxv1.AttachProcessRequest, sandboxv1.AttachProcessResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return domain.InvalidField("open", "the first message must be open, naming the process")
	}
	p, err := s.process(ctx, open.GetSandboxId(), open.GetProcessId())
	if err != nil {
		return err
	}
	att := p.toProto()
	offset := open.GetFromOffset()
	if open.GetLiveOnly() {
		offset = att.GetOutputBytes()
	}
	if err := stream.Send(&sandboxv1.AttachProcessResponse{Event: &sandboxv1.AttachProcessResponse_Attached{Attached: att}}); err != nil {
		return err
	}
	// stdin: written in the order received, by this goroutine alone; it
	// ends with the client's side of the stream (or the RPC).
	inErr := make(chan error, 1)
	go func() { inErr <- p.copyStdin(stream) }()
	for {
		chunks, gapTo, wake, closed := p.log.read(offset)
		if gapTo > offset {
			if err := stream.Send(&sandboxv1.AttachProcessResponse{Event: &sandboxv1.AttachProcessResponse_Gap{Gap: &sandboxv1.OutputGap{FromOffset: offset, ToOffset: gapTo}}}); err != nil {
				return err
			}
			offset = gapTo
		}
		for _, c := range chunks {
			out := &sandboxv1.ProcessOutput{Seq: c.seq, Stream: streamToProto(c.stream), Offset: c.offset, Data: c.data}
			if err := stream.Send(&sandboxv1.AttachProcessResponse{Event: &sandboxv1.AttachProcessResponse_Output{Output: out}}); err != nil {
				return err
			}
			offset = c.offset + int64(len(c.data))
		}
		if closed {
			<-p.done
			return stream.Send(&sandboxv1.AttachProcessResponse{Event: &sandboxv1.AttachProcessResponse_Exited{Exited: p.toProto()}})
		}
		if len(chunks) > 0 {
			continue
		}
		select {
		case <-wake:
		case err := <-inErr:
			if err != nil {
				return err
			}
			inErr = nil // the client closed its side: keep streaming output
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// copyStdin writes the attach stream's stdin messages to the process. It
// returns nil at the client's end of sending, and an error for a message
// that is not stdin. A process that no longer reads makes writes fail:
// those bytes are lost, as they would be on a pipe, and the stream goes on.
func (p *proc) copyStdin(stream grpc.BidiStreamingServer[sandboxv1.AttachProcessRequest, sandboxv1.AttachProcessResponse]) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch ev := m.GetEvent().(type) {
		case *sandboxv1.AttachProcessRequest_Stdin:
			p.stdinMu.Lock()
			_, _ = p.current().Stdin().Write(ev.Stdin)
			p.stdinMu.Unlock()
		case *sandboxv1.AttachProcessRequest_CloseStdin:
			if ev.CloseStdin {
				p.stdinMu.Lock()
				_ = p.current().Stdin().Close()
				p.stdinMu.Unlock()
			}
		case *sandboxv1.AttachProcessRequest_Resize:
			r, ok := p.current().(driver.Resizer)
			if !ok || p.spec.GetTerminal() == nil {
				return domain.New(codes.FailedPrecondition, "NO_TERMINAL", fmt.Sprintf("process %q has no terminal to resize", p.id), grpcerr.Meta("process_id", p.id))
			}
			rows, cols := ev.Resize.GetRows(), ev.Resize.GetCols()
			if rows < 1 || rows > 1000 || cols < 1 || cols > 1000 {
				return domain.InvalidField("resize", "rows and cols are 1 to 1,000")
			}
			_ = r.Resize(driver.TerminalSize{Rows: int(rows), Cols: int(cols)})
		default:
			return domain.InvalidField("open", "open must be the first message only")
		}
	}
}

func streamToProto(s driver.Stream) sandboxv1.OutputStream {
	if s == driver.Stderr {
		return sandboxv1.OutputStream_OUTPUT_STREAM_STDERR
	}
	return sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT
}

// signals are the signals SignalProcess sends, by name without "SIG".
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
}

// SignalProcess implements SandboxService.
func (s *Service) SignalProcess(ctx context.Context, req *sandboxv1.SignalProcessRequest) (*sandboxv1.SignalProcessResponse, error) {
	p, err := s.process(ctx, req.GetSandboxId(), req.GetProcessId())
	if err != nil {
		return nil, err
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(req.GetSignal()), "SIG")]
	if !ok {
		return nil, domain.InvalidField("signal", fmt.Sprintf("unknown signal %q: one of HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP", req.GetSignal()))
	}
	switch sig {
	case syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT, syscall.SIGQUIT:
		p.mu.Lock()
		p.userStopped = true // a stop asked for is no failure to restart from
		p.mu.Unlock()
	}
	delivered, err := p.current().Signal(sig)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sandboxv1.SignalProcessResponse{Delivered: delivered}, nil
}

// WaitProcess implements SandboxService.
func (s *Service) WaitProcess(ctx context.Context, req *sandboxv1.WaitProcessRequest) (*sandboxv1.WaitProcessResponse, error) {
	p, err := s.process(ctx, req.GetSandboxId(), req.GetProcessId())
	if err != nil {
		return nil, err
	}
	if req.GetUntilReady() {
		if p.spec.GetReadiness() == nil {
			return nil, domain.New(codes.FailedPrecondition, "NO_READINESS_PROBE", fmt.Sprintf("process %q has no readiness probe", p.id), grpcerr.Meta("process_id", p.id))
		}
		for {
			p.mu.Lock()
			settled, wait := p.ready || p.probeMsg != "" || p.result != nil, p.readyWait
			p.mu.Unlock()
			if settled {
				return &sandboxv1.WaitProcessResponse{Process: p.toProto()}, nil
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, s.toStatus(ctx, ctx.Err())
			}
		}
	}
	select {
	case <-p.done:
		return &sandboxv1.WaitProcessResponse{Process: p.toProto()}, nil
	case <-ctx.Done():
		return nil, s.toStatus(ctx, ctx.Err())
	}
}

// ListProcesses implements SandboxService.
func (s *Service) ListProcesses(ctx context.Context, req *sandboxv1.ListProcessesRequest) (*sandboxv1.ListProcessesResponse, error) {
	e, err := s.owned(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	var ps []*proc
	for _, id := range e.procs.order {
		if p := e.procs.byID[id]; auth.Reaches(ctx, p.owner) != auth.Unreachable {
			ps = append(ps, p)
		}
	}
	e.mu.Unlock()
	resp := &sandboxv1.ListProcessesResponse{}
	for _, p := range ps {
		resp.Processes = append(resp.Processes, p.toProto())
	}
	return resp, nil
}
