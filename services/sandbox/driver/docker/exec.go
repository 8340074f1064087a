package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// timeoutSlack is how long after the wrapper's own timeout and grace the
// driver sends a kill itself, should the wrapper not have acted.
const timeoutSlack = 5 * time.Second

// signalExec bounds one stop request, retries included: a container at its
// process limit refuses new execs until something exits.
const signalExec = 10 * time.Second

// Exec implements driver.Execer.
func (s *sandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	rel, err := s.rel(spec.Dir)
	if err != nil {
		return driver.ExecResult{}, err
	}
	fi, err := s.files.Stat(ctx, rel)
	if err != nil {
		return driver.ExecResult{}, err
	}
	if fi.Type != driver.TypeDirectory {
		return driver.ExecResult{}, fmt.Errorf("%w: working_dir %s", driver.ErrNotDirectory, spec.Dir)
	}
	if err := s.reblock(ctx); err != nil {
		return driver.ExecResult{}, err
	}
	s.mu.Lock()
	deleted := s.deleted
	s.mu.Unlock()
	if deleted {
		return driver.ExecResult{}, fmt.Errorf("%w: the sandbox is deleted", driver.ErrNotFound)
	}
	id, nonce := randHex(12), randHex(12)
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	// The engine must see this through even when ctx ends: a started
	// command is stopped by the wrapper, never abandoned.
	ectx := context.WithoutCancel(ctx)
	cr, err := s.d.cli.ContainerExecCreate(ctx, s.p.name, container.ExecOptions{
		User: s.p.user, WorkingDir: path.Join(s.p.workdir, rel), Env: env,
		Cmd:          []string{"perl", "-e", wrapperScript, s.arch, id, nonce, strconv.FormatInt(spec.Timeout.Milliseconds(), 10), strconv.FormatInt(driver.StopGrace.Milliseconds(), 10), spec.Command},
		AttachStdout: true, AttachStderr: true, AttachStdin: len(spec.Stdin) > 0,
	})
	if err != nil {
		return driver.ExecResult{}, s.engineErr(ctx, "create exec", err)
	}
	start := time.Now()
	hj, err := s.d.cli.ContainerExecAttach(ectx, cr.ID, container.ExecAttachOptions{})
	if err != nil {
		return driver.ExecResult{}, s.engineErr(ctx, "start exec", err)
	}
	defer hj.Close()
	if len(spec.Stdin) > 0 {
		// A command that never reads its stdin must not block us: the
		// write ends with the connection.
		go func() {
			hj.Conn.Write(spec.Stdin)
			hj.CloseWrite()
		}()
	}
	sinkOK := out != nil && out.Started() == nil

	done := make(chan struct{})
	var term driver.Termination
	var stopWG sync.WaitGroup
	stopWG.Go(func() { term = s.watch(ctx, spec, id, done) })

	stdout, stderr := driver.NewCapture(spec.RetainLimit), driver.NewCapture(spec.RetainLimit)
	tr := &trailer{marker: []byte("\x00fabro-" + nonce + ":")}
	emit := func(st driver.Stream, c *driver.Capture, p []byte) {
		if len(p) == 0 {
			return
		}
		c.Write(p)
		if sinkOK {
			// A failed send means the caller is gone; its context stops
			// the command, and we keep draining.
			sinkOK = out.Chunk(st, p) == nil
		}
	}
	rerr := demux(hj.Reader, func(st driver.Stream, p []byte) {
		if st == driver.Stderr {
			p = tr.feed(p)
			emit(driver.Stderr, stderr, p)
			return
		}
		emit(driver.Stdout, stdout, p)
	})
	emit(driver.Stderr, stderr, tr.flush())
	close(done)
	stopWG.Wait()

	res := driver.ExecResult{
		Termination: term, Duration: time.Since(start), StreamsSeparated: true,
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), StdoutStats: stdout.Stats(), StderrStats: stderr.Stats(),
	}
	if tr.status == nil {
		// No trailer: the wrapper itself died (the container stopped, the
		// OOM killer chose it). The engine still knows an exit code.
		ins, err := s.d.cli.ContainerExecInspect(ectx, cr.ID)
		if err != nil || ins.Running {
			if cerr := s.Check(ectx); cerr != nil {
				return driver.ExecResult{}, cerr
			}
			return driver.ExecResult{}, fmt.Errorf("exec %s ended without its status (read: %v, inspect: %v)", cr.ID, rerr, err)
		}
		if cerr := s.Check(ectx); cerr != nil {
			return driver.ExecResult{}, cerr
		}
		code := ins.ExitCode
		res.ExitCode = &code
		return res, nil
	}
	tr.status.apply(&res, s)
	return res, nil
}

// watch stops the command on cancel or kill, until done, and returns the
// termination. The timeout the wrapper keeps itself; the driver's own timer
// only names the termination, and acts if the wrapper did not.
func (s *sandbox) watch(ctx context.Context, spec driver.ExecSpec, id string, done <-chan struct{}) driver.Termination {
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	graceful := func(term driver.Termination) driver.Termination {
		s.signal(done, id, "TERM")
		grace := time.NewTimer(driver.StopGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
			s.signal(done, id, "USR1")
		case <-spec.Kill:
			s.signal(done, id, "USR1")
			return driver.Killed
		}
		return term
	}
	select {
	case <-done:
		return driver.Exited
	case <-timer.C:
		late := time.NewTimer(driver.StopGrace + timeoutSlack)
		defer late.Stop()
		select {
		case <-done:
		case <-late.C:
			s.signal(done, id, "USR1")
		case <-spec.Kill:
			s.signal(done, id, "USR1")
			return driver.Killed
		}
		return driver.TimedOut
	case <-spec.Kill:
		s.signal(done, id, "USR1")
		return driver.Killed
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), driver.ErrKill) {
			s.signal(done, id, "USR1")
			return driver.Killed
		}
		return graceful(driver.Cancelled)
	}
}

// signal sends sig to the wrapper of exec id, by a second exec: TERM
// reaches the command's group, USR1 kills its whole tree. The wrapper
// records its pid first thing; a stop that comes sooner waits for it. A
// refused exec is retried until the command is done.
func (s *sandbox) signal(done <-chan struct{}, id, sig string) {
	ctx, cancel := context.WithTimeout(context.Background(), signalExec)
	defer cancel()
	script := `f=` + pidsDir + `/$1; for i in $(seq 200); do [ -s "$f" ] && break; sleep 0.01; done; read -r p < "$f" 2>/dev/null && kill -s "$2" "$p" 2>/dev/null; true`
	for {
		_, code, err := s.run(ctx, []string{"bash", "-c", script, "fabro-stop", id, sig})
		if err == nil && code == 0 {
			return
		}
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run runs argv in the container to its end, as the container's user, and
// returns its stdout and exit code.
func (s *sandbox) run(ctx context.Context, argv []string) (string, int, error) {
	cr, err := s.d.cli.ContainerExecCreate(ctx, s.p.name, container.ExecOptions{User: s.p.user, Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", 0, s.engineErr(ctx, "create exec", err)
	}
	hj, err := s.d.cli.ContainerExecAttach(ctx, cr.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", 0, s.engineErr(ctx, "start exec", err)
	}
	defer hj.Close()
	var out bytes.Buffer
	demux(hj.Reader, func(st driver.Stream, p []byte) {
		if st == driver.Stdout && out.Len() < 1<<20 {
			out.Write(p)
		}
	})
	for {
		ins, err := s.d.cli.ContainerExecInspect(ctx, cr.ID)
		if err != nil {
			return "", 0, s.engineErr(ctx, "inspect exec", err)
		}
		if !ins.Running {
			return out.String(), ins.ExitCode, nil
		}
		// Even after EOF the engine may say running for a moment.
		select {
		case <-ctx.Done():
			return "", 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// engineErr names a failed engine call, or the sandbox's disappearance.
func (s *sandbox) engineErr(ctx context.Context, what string, err error) error {
	if cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "is not running") {
		if cerr := s.Check(context.WithoutCancel(ctx)); cerr != nil {
			return cerr
		}
	}
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%w: the Docker engine: %v", driver.ErrUnavailable, err)
	}
	return fmt.Errorf("%s in %s: %w", what, s.p.name, err)
}

// demux reads the engine's multiplexed stream (8-byte frame headers: the
// stream, then the length) and hands each frame on as it comes.
func demux(r *bufio.Reader, fn func(driver.Stream, []byte)) error {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		st := driver.Stdout
		switch hdr[0] {
		case 2:
			st = driver.Stderr
		case 3:
			b := make([]byte, n)
			io.ReadFull(r, b)
			return fmt.Errorf("engine: %s", b)
		}
		for n > 0 {
			k, err := io.ReadFull(r, buf[:min(n, len(buf))])
			fn(st, buf[:k])
			if err != nil {
				return err
			}
			n -= k
		}
	}
}

// trailer strips the wrapper's status line from the end of stderr. Bytes
// that could start the marker are held back until the next chunk shows they
// do not; since the marker starts with NUL and a nonce, ordinary output is
// never held.
type trailer struct {
	marker []byte
	hold   []byte
	status *wrapperStatus
}

// maxTrailer bounds the trailer: anything longer after a marker is output.
const maxTrailer = 256

type wrapperStatus struct{ exit, signal, oom, pids int }

// apply sets res's exit code or signal and the limit the command hit, as
// the wrapper reported them, for Exec and for processes alike.
func (st *wrapperStatus) apply(res *driver.ExecResult, s *sandbox) {
	if st.signal != 0 {
		res.Signal = driver.SignalName(st.signal)
	} else {
		code := st.exit
		res.ExitCode = &code
	}
	switch {
	case st.oom > 0:
		res.LimitHit = driver.LimitMemory
	case st.pids > 0:
		res.LimitHit = driver.LimitProcesses
	case s.p.disk > 0 && diskimage.Full(s.p.hostDir):
		res.LimitHit = driver.LimitDisk
	}
}

func (t *trailer) feed(p []byte) []byte {
	if len(t.hold) > 0 {
		p = append(t.hold, p...)
		t.hold = nil
	}
	if i := bytes.LastIndex(p, t.marker); i >= 0 && len(p)-i <= maxTrailer {
		// Keep what may be the trailer until the end of the stream;
		// only one at the very end counts.
		t.hold = append([]byte(nil), p[i:]...)
		return p[:i]
	}
	for k := min(len(t.marker)-1, len(p)); k > 0; k-- {
		if bytes.HasPrefix(t.marker, p[len(p)-k:]) {
			t.hold = append([]byte(nil), p[len(p)-k:]...)
			return p[:len(p)-k]
		}
	}
	return p
}

// flush parses the held trailer at the end of the stream, returning what
// was held that is not the trailer.
func (t *trailer) flush() []byte {
	h := t.hold
	t.hold = nil
	i := bytes.LastIndex(h, t.marker)
	if i < 0 || !bytes.HasSuffix(h, []byte("\n")) {
		return h
	}
	st := &wrapperStatus{}
	for f := range strings.SplitSeq(strings.TrimSpace(string(h[i+len(t.marker):])), ":") {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			return h
		}
		switch k {
		case "exit":
			st.exit = n
		case "signal":
			st.signal = n
		case "oom":
			st.oom = n
		case "pids":
			st.pids = n
		}
	}
	t.status = st
	return h[:i]
}
