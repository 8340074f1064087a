package daytona

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// execDTO is the helper's answer for a command.
type execDTO struct {
	Term   string `json:"term"` // "exited" or "timedout"
	Exit   *int   `json:"exit"`
	Signal int    `json:"signal"`
	OOM    int    `json:"oom"`
	Pids   int    `json:"pids"`
}

// toolboxMargin is how much longer than the command the toolbox may let
// the helper run: the grace after TERM, the reaping, the answer.
const toolboxMargin = 30 * time.Second

// Exec implements driver.Execer. The command runs to its end under the
// helper's supervisor; then its output is fetched and handed to out.
func (s *sandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	if err := checkPath(spec.Dir); err != nil {
		return driver.ExecResult{}, err
	}
	base := s.dir + "/x-" + randomID()
	req := map[string]any{
		"op": "exec", "dir": spec.Dir, "cmd": spec.Command, "env": spec.Env,
		"out": base + ".out", "err": base + ".err",
		"timeout_ms": spec.Timeout.Milliseconds(), "grace_ms": driver.StopGrace.Milliseconds(),
	}
	if len(spec.Stdin) > 0 {
		if err := s.upload(ctx, base+".in", spec.Stdin); err != nil {
			return driver.ExecResult{}, err
		}
		req["stdin"] = base + ".in"
	}
	if out != nil {
		if err := out.Started(); err != nil {
			out = nil
		}
	}
	start := time.Now()
	var r execDTO
	err := s.helperFor(ctx, req, &r, spec.Timeout+driver.StopGrace+toolboxMargin)
	dur := time.Since(start)
	// Fetched and removed whatever happened, with a context of their own:
	// the command's output files must not be left in the sandbox.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	defer s.removeOwn(fctx, base+".out")
	defer s.removeOwn(fctx, base+".err")
	if err != nil {
		return driver.ExecResult{}, err
	}
	res := driver.ExecResult{Termination: driver.Exited, Duration: dur, StreamsSeparated: true}
	if r.Term == "timedout" {
		res.Termination = driver.TimedOut
	}
	if r.Exit != nil {
		res.ExitCode = r.Exit
	} else {
		res.Signal = signalName(syscall.Signal(r.Signal))
	}
	switch {
	case r.OOM > 0:
		res.LimitHit = driver.LimitMemory
	case r.Pids > 0:
		res.LimitHit = driver.LimitProcesses
	}
	for _, st := range []struct {
		stream driver.Stream
		path   string
		bytes  *[]byte
		stats  *driver.CaptureStats
	}{{driver.Stdout, base + ".out", &res.Stdout, &res.StdoutStats}, {driver.Stderr, base + ".err", &res.Stderr, &res.StderrStats}} {
		c := driver.NewCapture(spec.RetainLimit)
		if err := s.fetch(fctx, st.path, func(p []byte) {
			c.Write(p)
			if out != nil && out.Chunk(st.stream, p) != nil {
				out = nil
			}
		}); err != nil {
			return driver.ExecResult{}, fmt.Errorf("fetch the command's output: %w", err)
		}
		*st.bytes, *st.stats = c.Bytes(), c.Stats()
	}
	return res, nil
}

// fetch downloads a file of the driver's own in chunks.
func (s *sandbox) fetch(ctx context.Context, path string, fn func([]byte)) error {
	var body io.ReadCloser
	if err := s.call(ctx, request{op: "download", method: http.MethodGet, path: s.toolbox("/files/download"),
		query: url.Values{"path": {path}}, raw: &body}); err != nil {
		return err
	}
	defer body.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			fn(buf[:n])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

// signalName names a Linux signal number (the sandbox's, not this host's).
func signalName(sig syscall.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(sig))
}
