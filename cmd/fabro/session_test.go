package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// scriptedAnthropic serves scripted turns and returns a catalog overlay file
// pointing anthropic at it.
func scriptedAnthropic(t *testing.T, turns ...fakeprovider.Turn) (*fakeprovider.Listening, string) {
	t.Helper()
	fake, err := fakeprovider.Listen("127.0.0.1:0", fakeprovider.New(turns...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	overlay := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return fake, overlay
}

// fabroIn runs the CLI in dir with extra environment variables.
func fabroIn(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(fabroBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

var sessionLine = regexp.MustCompile(`(?m)^session (\S+) \(`)

// TestExecSessionIDAndReplay: exec names its session at the start and at
// the end, and a partial reply the model's replay discards is marked, not
// glued to the answer that replaces it.
func TestExecSessionIDAndReplay(t *testing.T) {
	_, overlay := scriptedAnthropic(t,
		fakeprovider.Turn{Text: "Partial answ", ChunkRunes: 4, Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 4}},
		fakeprovider.Turn{Text: "The whole answer."},
	)
	ws := t.TempDir()
	out, errOut, code := fabroIn(t, ws, []string{"ANTHROPIC_API_KEY=test-key"}, "exec", "--data-dir", t.TempDir(), "--llm-catalog-overlay", overlay,
		"--model", "anthropic/claude-sonnet-4.5", "Answer.")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	want := "Partial \n↺ [the reply above was cut off and is discarded; the model answers again (attempt 2)]\nThe whole answer.\n"
	if out != want {
		t.Errorf("stdout = %q\nwant     %q\nstderr:\n%s", out, want, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	m := sessionLine.FindStringSubmatch(lines[0])
	if m == nil || !strings.HasPrefix(lines[len(lines)-1], "session "+m[1]+" ") {
		t.Errorf("stderr does not name the session first and last:\n%s", errOut)
	}
}

// TestExecMissingKey: without a key, exec names both ways to give one, in
// process and against a server.
func TestExecMissingKey(t *testing.T) {
	_, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: "unused"})
	_, errOut, code := fabroIn(t, t.TempDir(), []string{"ANTHROPIC_API_KEY="}, "exec", "--data-dir", t.TempDir(), "--llm-catalog-overlay", overlay,
		"--model", "anthropic/claude-sonnet-4.5", "Answer.")
	for _, want := range []string{"needs the credential ANTHROPIC_API_KEY; give it one of two ways:", "fabro secret set ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY=... fabro exec"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("in process: exit %d, stderr lacks %q:\n%s", code, want, errOut)
		}
	}
	ws := t.TempDir()
	s := startServe(t, t.TempDir(), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws)
	_, errOut, code = fabroIn(t, ws, nil, "exec", "--server", s.grpcAddr, "--model", "anthropic/claude-sonnet-4.5", "Answer.")
	for _, want := range []string{"fabro secret set ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY=... fabro serve"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("on a server: exit %d, stderr lacks %q:\n%s", code, want, errOut)
		}
	}
}

// cutProxy forwards TCP connections to a target and can cut every open
// one, as a proxy with an idle timeout or a network change does; it keeps
// accepting new ones.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cuts   int
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	go p.serve()
	t.Cleanup(func() { l.Close(); p.cut() })
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.cuts++
}

// TestExecReattaches: the connection to a running server drops in the
// middle of the answer; exec reattaches and prints the answer once, whole.
func TestExecReattaches(t *testing.T) {
	var text strings.Builder
	for i := range 40 {
		text.WriteString("word")
		text.WriteString(strings.Repeat("·", i%3))
		text.WriteString(" ")
	}
	answer := strings.TrimSpace(text.String())
	_, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: answer, ChunkRunes: 5, ChunkDelay: 25 * time.Millisecond})
	ws := t.TempDir()
	s := startServe(t, t.TempDir(), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws)
	proxy := newCutProxy(t, s.grpcAddr)

	cmd := exec.Command(fabroBin, "exec", "--server", proxy.l.Addr().String(), "--model", "anthropic/claude-sonnet-4.5", "Talk.")
	cmd.Dir = ws
	pr, pw, _ := os.Pipe()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var stdout bytes.Buffer
	buf := make([]byte, 4096)
	for _, at := range []int{40, 120} { // cut twice, once a part of the answer has arrived
		for stdout.Len() < at {
			n, err := pr.Read(buf)
			stdout.Write(buf[:n])
			if err != nil {
				cmd.Wait()
				t.Fatalf("exec ended before the cut:\n%s\n%s", stdout.String(), stderr.String())
			}
		}
		proxy.cut()
		cutAt, before := time.Now(), stdout.Len()
		for stdout.Len() == before { // the first text after the cut: reattached
			n, err := pr.Read(buf)
			stdout.Write(buf[:n])
			if err != nil {
				break
			}
		}
		t.Logf("text again %s after cut %d", time.Since(cutAt).Round(time.Millisecond), at)
	}
	rest, _ := io.ReadAll(pr)
	stdout.Write(rest)
	err := cmd.Wait()
	if err != nil || stdout.String() != answer+"\n" {
		t.Errorf("exec: %v\nstdout %q\nwant   %q\nstderr:\n%s", err, stdout.String(), answer+"\n", stderr.String())
	}
	if strings.Count(stderr.String(), "reattached to session") != 2 {
		t.Errorf("stderr does not say it reattached twice:\n%s", stderr.String())
	}
}

// TestSessionsCommands: a session exec ran on a server is listed, shown,
// resumed with another prompt and deleted.
func TestSessionsCommands(t *testing.T) {
	_, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: "First answer."}, fakeprovider.Turn{Text: "Second answer."})
	ws := t.TempDir()
	s := startServe(t, t.TempDir(), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws)
	env := []string{"FABRO_SERVER=" + s.grpcAddr}
	out, errOut, code := fabroIn(t, ws, env, "exec", "--model", "anthropic/claude-sonnet-4.5", "One.")
	m := sessionLine.FindStringSubmatch(errOut)
	if code != 0 || out != "First answer.\n" || m == nil {
		t.Fatalf("exec: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	id := m[1]
	if !strings.Contains(errOut, "fabro sessions resume "+id) {
		t.Errorf("exec's last line does not say how to resume:\n%s", errOut)
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "list")
	if code != 0 || !regexp.MustCompile(`(?m)^`+id+`\s+closed\s+anthropic/claude-sonnet-4.5\s+1\s`).MatchString(out) {
		t.Errorf("sessions list: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "show", id)
	for _, want := range []string{"session      " + id, "state        closed", "model        anthropic/claude-sonnet-4.5", "prompts      1"} {
		if code != 0 || !strings.Contains(out, want+"\n") {
			t.Errorf("sessions show: exit %d, lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "resume", id, "Two.")
	if code != 0 || out != "Second answer.\n" || !strings.Contains(errOut, "session "+id+" resumed") {
		t.Errorf("sessions resume: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "rm", id)
	if code != 0 || out != "deleted "+id+"\n" {
		t.Errorf("sessions rm: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	_, errOut, code = fabroIn(t, ws, env, "sessions", "show", id)
	if code != 1 || !strings.Contains(errOut, "NotFound") {
		t.Errorf("sessions show after rm: exit %d, stderr %q; want 1 and NotFound", code, errOut)
	}
}
