package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// modeTurns: an allowed call, a call asked about twice (the second time
// covered by the first answer's "for this session"), another call.
func modeTurns() []fakeprovider.Turn {
	return []fakeprovider.Turn{
		{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"touch allowed.txt"}`}}},
		{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "shell", Arguments: `{"command":"touch session.txt"}`}}},
		{ToolCalls: []fakeprovider.ToolCall{{ID: "c3", Name: "shell", Arguments: `{"command":"touch session.txt"}`}}},
		{ToolCalls: []fakeprovider.ToolCall{{ID: "c4", Name: "shell", Arguments: `{"command":"touch other.txt"}`}}},
		{Text: "All done."},
	}
}

// modeSetup is execSetup with the settings file given; it also leaves an
// unapproved project settings file in the workspace.
func modeSetup(t *testing.T, settings string) (ws string, args []string) {
	t.Helper()
	ws, args = execSetup(t, fakeprovider.New(modeTurns()...))
	if err := os.WriteFile(args[len(args)-1], []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".claude", "settings.json"), []byte(`{"permissions": {"allow": ["Bash"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return ws, args
}

// runOnTerminal runs fabro exec on a pty, answering each question with the
// next answer (a denial "n" is followed by an empty reason), and returns everything it printed and how many questions
// it asked.
func runOnTerminal(t *testing.T, ws string, args []string, answers ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(fabroBin, append(args, "Touch the files.")...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
	ptmx, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	r := bufio.NewReader(io.TeeReader(ptmx, &out))
	// A read blocked on the terminal is not woken by Close: kill fabro too.
	deadline := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill(); ptmx.Close() })
	defer deadline.Stop()
	asked := 0
	var seen strings.Builder
	for !strings.Contains(seen.String(), "All done.") {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("fabro exec: %v; output so far:\n%s", err, out.String())
		}
		seen.WriteByte(b)
		if strings.HasSuffix(seen.String(), "[n] deny: ") {
			if asked == len(answers) {
				t.Fatalf("asked more than %d times:\n%s", len(answers), out.String())
			}
			answer := answers[asked] + "\n"
			if answers[asked] == "n" {
				answer += "\n"
			}
			if _, err := ptmx.WriteString(answer); err != nil {
				t.Fatal(err)
			}
			asked++
		}
	}
	copied := make(chan struct{})
	go func() { io.Copy(io.Discard, r); close(copied) }()
	err = cmd.Wait()
	ptmx.Close()
	<-copied
	if err != nil {
		t.Fatalf("fabro exec: %v\n%s", err, out.String())
	}
	return out.String(), asked
}

func runWithoutTerminal(t *testing.T, ws string, args []string) string {
	t.Helper()
	cmd := exec.Command(fabroBin, append(args, "Touch the files.")...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
	cmd.Stdin = strings.NewReader("y\ny\ny\n") // not a terminal: never read
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("fabro exec: %v\n%s", err, out.String())
	}
	return out.String()
}

func checkFiles(t *testing.T, ws string, want map[string]bool) {
	t.Helper()
	for name, exists := range want {
		if _, err := os.Stat(filepath.Join(ws, name)); (err == nil) != exists {
			t.Errorf("%s exists = %v, want %v", name, err == nil, exists)
		}
	}
}

// TestExecAskUnlessAllowed: default_mode ask runs what an allow rule
// names and asks for the rest; "for this session" covers the call that
// asked (asked once for two identical calls), not the whole tool (another
// call asks again). Without a terminal the asks are denied. Either way exec
// says that the unapproved project file and an unknown field were ignored.
func TestExecAskUnlessAllowed(t *testing.T) {
	settings := `{"permissions": {"default_mode": "ask", "allow": ["shell(touch allowed.txt)"]}, "model": "sonnet"}`
	t.Run("terminal", func(t *testing.T) {
		ws, args := modeSetup(t, settings)
		out, asked := runOnTerminal(t, ws, args, "a", "n")
		if asked != 2 {
			t.Errorf("asked %d times, want 2:\n%s", asked, out)
		}
		checkFiles(t, ws, map[string]bool{"allowed.txt": true, "session.txt": true, "other.txt": false})
		for _, want := range []string{"default_mode ask", "is not approved and was ignored", `fabro does not know the field "model"`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		ws, args := modeSetup(t, settings)
		out := runWithoutTerminal(t, ws, args)
		checkFiles(t, ws, map[string]bool{"allowed.txt": true, "session.txt": false, "other.txt": false})
		for _, want := range []string{"no terminal to ask on, so it is denied", "is not approved and was ignored", `fabro does not know the field "model"`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}

// TestExecDenyUnlessAllowed: default_mode deny_unless_allowed runs what an
// allow rule names and refuses the rest without asking, terminal or not,
// naming the mode and where it was set.
func TestExecDenyUnlessAllowed(t *testing.T) {
	settings := "{\"permissions\": {\n \"default_mode\": \"deny_unless_allowed\", \"allow\": [\"Bash(touch allowed.txt)\"]}}"
	check := func(t *testing.T, ws, out string) {
		t.Helper()
		checkFiles(t, ws, map[string]bool{"allowed.txt": true, "session.txt": false, "other.txt": false})
		if n := strings.Count(out, "✗ shell failed: Permission denied: this call of shell is forbidden by default_mode deny_unless_allowed ("); n != 3 {
			t.Errorf("%d refusals naming the mode, want 3:\n%s", n, out)
		}
		if !strings.Contains(out, "settings.json:2): no allow rule matches this call") {
			t.Errorf("the refusal does not name where the mode was set:\n%s", out)
		}
	}
	t.Run("terminal", func(t *testing.T) {
		ws, args := modeSetup(t, settings)
		out, asked := runOnTerminal(t, ws, args)
		if asked != 0 {
			t.Errorf("asked %d times", asked)
		}
		check(t, ws, out)
	})
	t.Run("no terminal", func(t *testing.T) {
		ws, args := modeSetup(t, settings)
		check(t, ws, runWithoutTerminal(t, ws, args))
	})
}
