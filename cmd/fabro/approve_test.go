package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// execSetup writes a workspace, a catalog overlay pointing at fake, and a
// settings file asking before every shell call.
func execSetup(t *testing.T, fake *fakeprovider.Server) (ws string, args []string) {
	t.Helper()
	hs := httptest.NewServer(fake)
	t.Cleanup(hs.Close)
	tmp := t.TempDir()
	ws = filepath.Join(tmp, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"providers": map[string]any{"anthropic": map[string]any{"baseUrl": hs.URL}}})
	overlayPath := filepath.Join(tmp, "catalog.json")
	settings := filepath.Join(tmp, "settings.json")
	if err := os.WriteFile(overlayPath, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(settings, []byte(`{"permissions": {"ask": ["shell"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return ws, []string{"exec", "--model", "anthropic/claude-sonnet-4.5", "-data-dir", filepath.Join(tmp, "data"),
		"-llm-catalog-overlay", overlayPath, "--permissions", "full", "--settings", settings}
}

func shellTurns() []fakeprovider.Turn {
	return []fakeprovider.Turn{
		{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"echo approved > out.txt"}`}}},
		{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "shell", Arguments: `{"command":"echo second > second.txt"}`}}},
		{Text: "All done."},
	}
}

// TestExecApprovalOnTerminal: with a terminal, fabro exec asks; "y" runs
// the first call, "n" with a reason denies the second.
func TestExecApprovalOnTerminal(t *testing.T) {
	ws, args := execSetup(t, fakeprovider.New(shellTurns()...))
	cmd := exec.Command(fabroBin, append(args, "Write the files.")...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
	ptmx, err := pty.Start(cmd) // stdin, stdout and stderr on the terminal
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	r := bufio.NewReader(io.TeeReader(ptmx, &out))
	waitFor := func(s string) {
		t.Helper()
		deadline := time.AfterFunc(time.Minute, func() { ptmx.Close() })
		defer deadline.Stop()
		var seen strings.Builder
		for !strings.Contains(seen.String(), s) {
			b, err := r.ReadByte()
			if err != nil {
				t.Fatalf("waiting for %q: %v; output so far:\n%s", s, err, out.String())
			}
			seen.WriteByte(b)
		}
	}
	waitFor("[n] deny: ")
	if _, err := ptmx.WriteString("y\n"); err != nil {
		t.Fatal(err)
	}
	waitFor("[n] deny: ")
	if _, err := ptmx.WriteString("n\nnot that one\n"); err != nil {
		t.Fatal(err)
	}
	waitFor("All done.")
	copied := make(chan struct{})
	go func() { // drain the terminal until fabro exits and it is closed
		io.Copy(io.Discard, r)
		close(copied)
	}()
	err = cmd.Wait()
	ptmx.Close()
	<-copied
	if err != nil {
		t.Fatalf("fabro exec: %v\n%s", err, out.String())
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "approved\n" {
		t.Errorf("out.txt = %q, %v (the approved call)", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "second.txt")); err == nil {
		t.Errorf("the denied call ran")
	}
	if !strings.Contains(out.String(), "✗ shell failed: The user denied this call of shell. They said: not that one") {
		t.Errorf("output lacks the denial:\n%s", out.String())
	}
}

// TestExecApprovalWithoutTerminal: without a terminal every ask is denied
// with a message.
func TestExecApprovalWithoutTerminal(t *testing.T) {
	ws, args := execSetup(t, fakeprovider.New(shellTurns()...))
	cmd := exec.Command(fabroBin, append(args, "Write the files.")...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
	cmd.Stdin = strings.NewReader("y\ny\n") // not a terminal: never read
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fabro exec: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ws, "out.txt")); err == nil {
		t.Errorf("a call ran without approval")
	}
	if !strings.Contains(stderr.String(), "no terminal to ask on, so it is denied") || !strings.Contains(stdout.String(), "runs without a terminal") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}
