package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// Exec implements driver.Execer. The command runs under the helper's
// supervisor in one toolbox call; meanwhile its output files are polled
// (the toolbox has no stream) and handed to out, and a stop is asked for
// by writing the stop file the supervisor watches.
func (s *sandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	if err := checkPath(spec.Dir); err != nil {
		return driver.ExecResult{}, err
	}
	base := s.dir + "/x-" + randomID()
	req := map[string]any{
		"op": "exec", "dir": spec.Dir, "cmd": spec.Command, "env": spec.Env,
		"out": base + ".out", "err": base + ".err", "stop": base + ".stop",
		"timeout_ms": spec.Timeout.Milliseconds(), "grace_ms": driver.StopGrace.Milliseconds(),
	}
	if len(spec.Stdin) > 0 {
		if err := s.upload(ctx, base+".in", spec.Stdin); err != nil {
			return driver.ExecResult{}, err
		}
		req["stdin"] = base + ".in"
	}
	// The calls below outlive a cancel: the command must still be
	// stopped, its output read and its files removed.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), spec.Timeout+driver.StopGrace+toolboxMargin+5*time.Minute)
	defer cancel()
	defer s.removeOwn(bg, base+".out")
	defer s.removeOwn(bg, base+".err")
	defer s.removeOwn(bg, base+".stop")

	if out != nil && out.Started() != nil {
		out = nil
	}
	streams := []*stream{
		{s: driver.Stdout, path: base + ".out", c: driver.NewCapture(spec.RetainLimit)},
		{s: driver.Stderr, path: base + ".err", c: driver.NewCapture(spec.RetainLimit)},
	}
	deliver := func(st *stream, p []byte) {
		st.c.Write(p)
		st.off += int64(len(p))
		if out != nil && out.Chunk(st.s, p) != nil {
			out = nil // the caller is gone; its context stops the command
		}
	}

	start := time.Now()
	type answer struct {
		r   execDTO
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var r execDTO
		err := s.helperFor(bg, req, &r, spec.Timeout+driver.StopGrace+toolboxMargin)
		done <- answer{r, err}
	}()
	term := driver.Exited
	stop := func(what string, t driver.Termination) {
		term = t
		s.upload(bg, base+".stop", []byte(what))
	}
	ctxDone, kill := ctx.Done(), spec.Kill
	wait := pollMin
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var a answer
	for running := true; running; {
		select {
		case a = <-done:
			running = false
		case <-timer.C:
			// Back off while nothing comes, so a long quiet command
			// costs few calls.
			if s.poll(bg, streams, deliver) {
				wait = pollMin
			} else {
				wait = min(wait*3/2, pollMax)
			}
			timer.Reset(wait)
		case <-ctxDone:
			ctxDone = nil
			if errors.Is(context.Cause(ctx), driver.ErrKill) {
				stop("kill", driver.Killed)
				kill = nil
			} else {
				stop("term", driver.Cancelled)
			}
		case <-kill:
			kill = nil
			stop("kill", driver.Killed)
		}
	}
	dur := time.Since(start)
	if a.err != nil {
		// The answer is lost, not necessarily the command: make sure it
		// ends (the supervisor watches the stop file).
		s.upload(bg, base+".stop", []byte("kill"))
		return driver.ExecResult{}, a.err
	}
	r := a.r
	res := driver.ExecResult{Termination: term, Duration: dur, StreamsSeparated: true}
	if r.Term == "timedout" && term == driver.Exited {
		res.Termination = driver.TimedOut
	}
	if r.Exit != nil {
		res.ExitCode = r.Exit
	} else {
		res.Signal = driver.SignalName(r.Signal)
	}
	switch {
	case r.OOM > 0:
		res.LimitHit = driver.LimitMemory
	case r.Pids > 0:
		res.LimitHit = driver.LimitProcesses
	}
	// The rest of the output, past what the polls delivered.
	for _, st := range streams {
		skip := st.off
		if err := s.fetch(bg, st.path, func(p []byte) {
			if skip >= int64(len(p)) {
				skip -= int64(len(p))
				return
			}
			p, skip = p[skip:], 0
			deliver(st, p)
		}); err != nil {
			return driver.ExecResult{}, fmt.Errorf("fetch the command's output: %w", err)
		}
	}
	res.Stdout, res.StdoutStats = streams[0].c.Bytes(), streams[0].c.Stats()
	res.Stderr, res.StderrStats = streams[1].c.Bytes(), streams[1].c.Stats()
	return res, nil
}

// Output polling bounds.
const (
	pollMin   = 50 * time.Millisecond
	pollMax   = 2 * time.Second
	pollChunk = 1 << 20
	// redownloadMax bounds the output a poll downloads again to reach its
	// new bytes.
	redownloadMax = 64 << 10
)

// stream is one output stream of a running command.
type stream struct {
	s    driver.Stream
	path string
	c    *driver.Capture
	off  int64 // bytes delivered so far
}

// poll delivers what the streams' files gained and reports whether
// anything came. It asks files/info for each size, which costs the sandbox
// no process; a small file is downloaded whole, a larger one read from
// its offset a chunk at a time by the helper. A failed poll is only a late chunk: the
// rest is fetched at the end.
func (s *sandbox) poll(ctx context.Context, streams []*stream, deliver func(*stream, []byte)) bool {
	got := false
	for _, st := range streams {
		var fi struct {
			Size int64 `json:"size"`
		}
		if s.d.c.do(ctx, request{op: "file info", method: http.MethodGet, path: s.toolbox("/files/info"), query: url.Values{"path": {st.path}}, out: &fi}) != nil || fi.Size <= st.off {
			continue
		}
		// Downloading re-reads what was delivered: only while that is
		// little (the first read of a stream, or a small file); beyond, the
		// helper reads from the offset.
		if fi.Size <= pollChunk && (st.off == 0 || fi.Size <= redownloadMax) {
			skip := st.off
			s.fetch(ctx, st.path, func(p []byte) {
				if skip >= int64(len(p)) {
					skip -= int64(len(p))
					return
				}
				p, skip = p[skip:], 0
				deliver(st, p)
				got = true
			})
			continue
		}
		var r struct {
			Reads []struct {
				Data []byte `json:"data"` // base64 in the JSON
			} `json:"reads"`
		}
		err := s.helper(ctx, map[string]any{"op": "read", "reads": []map[string]any{{"path": st.path, "offset": st.off}}, "max": pollChunk}, &r)
		if err == nil && len(r.Reads) == 1 && len(r.Reads[0].Data) > 0 {
			deliver(st, r.Reads[0].Data)
			got = true
		}
	}
	return got
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
