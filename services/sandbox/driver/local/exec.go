package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// drainGrace bounds how long output is read after the command's processes
// are gone: only a descendant the sweep could not find (one that left the
// group, cleared its environment and was never recorded) can hold the
// pipes open that long.
const drainGrace = 2 * time.Second

const chunkSize = 32 << 10

// errTooLong is a command (or environment) larger than exec takes: the
// kernel bounds one argument to 128 KiB, and all of them together.
var errTooLong = fmt.Errorf("%w: the command or its environment is longer than exec takes (128 KiB for the command); write a script to a file and run that", driver.ErrInvalid)

// Exec implements driver.Execer.
func (s *sandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	rel, err := s.resolve(spec.Dir)
	if err != nil {
		return driver.ExecResult{}, err
	}
	fi, err := s.root.Stat(rel)
	if err != nil {
		return driver.ExecResult{}, fsErr(spec.Dir, err)
	}
	if !fi.IsDir() {
		return driver.ExecResult{}, fmt.Errorf("%w: working_dir %s", driver.ErrNotDirectory, spec.Dir)
	}
	cmd := exec.Command(s.bash, "-c", spec.Command)
	cmd.Dir = filepath.Join(s.dir, rel)
	marker, err := newMarker()
	if err != nil {
		return driver.ExecResult{}, err
	}
	cmd.Env = withMarker(append(append([]string(nil), s.env...), envList(spec.Env)...), marker)
	cg, err := s.cmdGroup(marker)
	if err != nil {
		return driver.ExecResult{}, err
	}
	defer cg.remove() // deferred first, so it runs after bash is reaped
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.user.apply(cmd)
	cmd.WaitDelay = drainGrace // bounds the stdin copy if a descendant holds stdin
	if len(spec.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(spec.Stdin)
	}
	// Our own pipes, read to EOF by us: exec's would be closed by Wait.
	outR, outW, err := os.Pipe()
	if err != nil {
		return driver.ExecResult{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return driver.ExecResult{}, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	s.mu.Lock()
	if s.deleted {
		s.mu.Unlock()
		return driver.ExecResult{}, fmt.Errorf("%w: the sandbox is deleted", driver.ErrNotFound)
	}
	start := time.Now()
	noStrayDescriptors()
	err = cg.start(cmd)
	if err == nil {
		if s.running == nil {
			s.running = map[*exec.Cmd]struct{}{}
		}
		s.running[cmd] = struct{}{}
	}
	s.mu.Unlock()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if _, serr := os.Stat(s.bash); errors.Is(err, fs.ErrNotExist) && serr != nil {
			return driver.ExecResult{}, fmt.Errorf("%w: %s is gone", driver.ErrBashMissing, s.bash)
		}
		if errors.Is(err, syscall.E2BIG) {
			return driver.ExecResult{}, errTooLong
		}
		return driver.ExecResult{}, fmt.Errorf("start bash: %w", err)
	}
	defer func() {
		s.mu.Lock()
		delete(s.running, cmd)
		s.mu.Unlock()
	}()
	pid := cmd.Process.Pid
	// The command's cgroup holds all it started, dead or alive, unless it
	// may move itself out: it runs as the service's own user (or root),
	// who owns the cgroups. Only then is its process tree tracked and
	// swept (reap_linux.go).
	var tr *tree
	if cg == nil || !s.user.other() {
		tr = newTree(pid, marker)
		defer tr.close()
	}
	kill := func() { killGroup(pid); cg.kill(pid) } // the whole cgroup, if any
	if tr == nil {
		// The cgroup alone: its kill pins each process before it
		// signals it, so it can reap them all.
		kill = func() { cg.kill(pid) }
	}

	var sinkMu sync.Mutex // one chunk at a time, across both streams
	sinkOK := out != nil
	if out != nil && out.Started() != nil {
		sinkOK = false
	}
	stdout, stderr := driver.NewCapture(spec.RetainLimit), driver.NewCapture(spec.RetainLimit)
	var readers sync.WaitGroup
	read := func(r *os.File, c *driver.Capture, stream driver.Stream) {
		buf := make([]byte, chunkSize)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				c.Write(buf[:n])
				sinkMu.Lock()
				if sinkOK {
					// A failed send means the caller is gone; its context
					// stops the command, and we keep draining.
					sinkOK = out.Chunk(stream, buf[:n]) == nil
				}
				sinkMu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	readers.Go(func() { read(outR, stdout, driver.Stdout) })
	readers.Go(func() { read(errR, stderr, driver.Stderr) })

	exited := make(chan struct{})
	go func() {
		waitExit(pid) // does not reap: the group id stays ours until Wait
		close(exited)
	}()
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	term := driver.Exited
	select {
	case <-exited:
	case <-timer.C:
		term = stopGroup(tr, pid, exited, spec.Kill, kill, driver.TimedOut)
	case <-spec.Kill:
		term = driver.Killed
		tr.snapshot()
		kill()
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), driver.ErrKill) {
			term = driver.Killed
			tr.snapshot()
			kill()
		} else {
			term = stopGroup(tr, pid, exited, spec.Kill, kill, driver.Cancelled)
		}
	}
	<-exited
	// Whatever the command left behind in its group dies with it, and so
	// does what left the group (see reap_linux.go). bash is unreaped till
	// Wait, so neither its pid nor its group id can have been reused.
	kill()
	tr.sweep()
	if tr == nil {
		reapGroup(pid)
	}

	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-drained
	}
	outR.Close()
	errR.Close()
	werr := cmd.Wait()
	res := driver.ExecResult{
		Termination: term, Duration: time.Since(start), StreamsSeparated: true,
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), StdoutStats: stdout.Stats(), StderrStats: stderr.Stats(),
		LimitHit: cg.hit(),
	}
	if res.LimitHit == driver.LimitNone && s.disk && diskimage.Full(s.dir) {
		res.LimitHit = driver.LimitDisk
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return res, fmt.Errorf("wait bash: %w", werr)
	case ws.Signaled():
		res.Signal = driver.SignalName(int(ws.Signal()))
	default:
		code := ws.ExitStatus()
		res.ExitCode = &code
	}
	return res, nil
}

// stopGroup sends TERM to the group, gives it driver.StopGrace to exit,
// then KILL (killAll: the group and the command's cgroup). A kill request during the grace period sends KILL at once and
// turns the termination into Killed; otherwise it stays term. The process
// tree is recorded in tr before each signal.
func stopGroup(tr *tree, pid int, exited, kill <-chan struct{}, killAll func(), term driver.Termination) driver.Termination {
	tr.snapshot()
	syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(driver.StopGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		tr.snapshot()
		killAll()
	case <-kill:
		tr.snapshot()
		killAll()
		return driver.Killed
	}
	return term
}

// cmdGroup makes the command's cgroup, named by its marker's id; nil (a
// no-op) when the host gives none.
func (s *sandbox) cmdGroup(marker string) (*cmdGroup, error) {
	if !s.d.cg.enabled() {
		return nil, nil
	}
	_, id, _ := strings.Cut(marker, "=")
	return s.d.cg.newCmdGroup(id, s.limits)
}

// newMarker returns the execMarkerVar=id pair that marks one command's
// processes.
func newMarker() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return execMarkerVar + "=" + hex.EncodeToString(b[:]), nil
}

// withMarker sets the marker in env, replacing any value the spec gave.
func withMarker(env []string, marker string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, execMarkerVar+"=") })
	return append(env, marker)
}

func killGroup(pid int) { syscall.Kill(-pid, syscall.SIGKILL) }
