package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestSessionsRewind: a session exec ran on a server changed a file; the
// CLI lists its checkpoints (-o json too), shows the turn's diff, refuses
// a rewind over the user's change naming the file, and rewinds with
// --force.
func TestSessionsRewind(t *testing.T) {
	_, overlay := scriptedAnthropic(t,
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"echo changed > notes.txt"}`}}},
		fakeprovider.Turn{Text: "Done."})
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, t.TempDir(), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws)
	env := []string{"FABRO_SERVER=" + s.grpcAddr}
	out, errOut, code := fabroIn(t, ws, env, "exec", "--model", "anthropic/claude-sonnet-4.5", "--permissions", "full", "Change the notes.")
	m := sessionLine.FindStringSubmatch(errOut)
	if code != 0 || m == nil {
		t.Fatalf("exec: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	id := m[1]
	// exec's session deleted its sandbox when it closed.
	_, errOut, code = fabroIn(t, ws, env, "sessions", "diff", id)
	if code != 1 || !strings.Contains(errOut, "fabro sessions resume "+id) {
		t.Errorf("diff of a session whose sandbox is gone: exit %d, stderr %q; want 1 saying to resume it", code, errOut)
	}
	if _, errOut, code = fabroIn(t, ws, env, "sessions", "resume", id); code != 0 {
		t.Fatalf("sessions resume: exit %d\n%s", code, errOut)
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "checkpoints", id, "-o", "json")
	var list struct {
		Checkpoints []struct {
			Turn int `json:"turn"`
		} `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Checkpoints) != 2 || list.Checkpoints[1].Turn != 1 {
		t.Fatalf("sessions checkpoints -o json: exit %d (%v)\n%s%s", code, err, out, errOut)
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "diff", id, "--turn", "1")
	if code != 0 || !strings.Contains(out, "-original\n+changed\n") {
		t.Errorf("sessions diff --turn 1: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("the user's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = fabroIn(t, ws, env, "sessions", "rewind", id, "--to", "0")
	if code != 1 || !strings.Contains(errOut, "notes.txt") || strings.Contains(errOut, "rpc error") {
		t.Errorf("rewind over the user's change: exit %d, stderr %q; want 1 naming notes.txt", code, errOut)
	}
	out, errOut, code = fabroIn(t, ws, env, "sessions", "rewind", id, "--to", "0", "--force")
	if code != 0 || !strings.Contains(out, "rewound "+id+" to turn 0: 1 files changed (notes.txt)") {
		t.Errorf("rewind --force: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); string(b) != "original\n" {
		t.Errorf("notes.txt after the rewind: %q", b)
	}
	_, errOut, code = fabroIn(t, ws, env, "sessions", "rewind", id, "--to", "5")
	if code != 1 || !strings.Contains(errOut, "NotFound") {
		t.Errorf("rewind to a missing turn: exit %d, stderr %q; want 1 and NotFound", code, errOut)
	}
}
