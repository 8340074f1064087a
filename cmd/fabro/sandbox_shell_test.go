package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSandboxShellInTmux drives `fabro sandbox shell` from a real terminal:
// tmux runs it in a 100x30 window, keys are sent with send-keys and the
// screen read with capture-pane. The shell sees the window's size, runs
// what is typed in the sandbox's workspace, follows a resize, and its exit
// code is fabro's.
func TestSandboxShellInTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux)")
	}
	work := t.TempDir()
	s := startServe(t, t.TempDir(), "FABRO_SANDBOX_ALLOWED_ROOTS="+work)
	code, b := s.rest(t, s.adminToken(t), http.MethodPost, "/v1/sandboxes", `{"spec":{"driver":"local","workingDirectory":"`+work+`"}}`)
	var created struct {
		Sandbox struct {
			ID string `json:"sandboxId"`
		} `json:"sandbox"`
	}
	if code != 200 || json.Unmarshal([]byte(b), &created) != nil {
		t.Fatalf("create sandbox: %d %s", code, b)
	}
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	line := "FABRO_DATA_DIR=" + s.dataDir + " " + fabroBin + " sandbox shell --server " + s.grpcAddr + " --command 'PS1=box$ exec bash --norc -i' " + created.Sandbox.ID + `; echo "fabro-rc=$?"; sleep 60`
	tm("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", line)
	t.Cleanup(func() { exec.Command(tmux, "-S", sock, "kill-server").Run() })
	screen := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := tm("capture-pane", "-p", "-t", "t")
			if strings.Contains(got, want) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("the screen never showed %q:\n%s", want, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	screen("box$")
	tm("send-keys", "-t", "t", "stty size; pwd; echo made > by-shell.txt; echo sum-$((6*7))", "Enter")
	got := screen("sum-42")
	if !strings.Contains(got, "30 100") || !strings.Contains(got, work) {
		t.Errorf("the shell's size or directory:\n%s", got)
	}
	if b, err := os.ReadFile(filepath.Join(work, "by-shell.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("by-shell.txt = %q, %v", b, err)
	}
	tm("resize-window", "-t", "t", "-x", "120", "-y", "40")
	tm("send-keys", "-t", "t", "clear; stty size", "Enter")
	screen("40 120")
	tm("send-keys", "-t", "t", "exit 3", "Enter")
	screen("fabro-rc=3")
}
