package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestExec runs `fabro exec` as a person does, with an in-process stack
// whose gateway talks to a fake Anthropic.
func TestExec(t *testing.T) {
	readCall := fakeprovider.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"file_path":"notes.txt"}`}
	tests := []struct {
		name      string
		flags     []string
		turns     []fakeprovider.Turn
		interrupt bool
		wantCode  int
		wantOut   []string
		wantFiles map[string]string // in the directory afterwards
	}{{
		name:     "done",
		flags:    []string{"--permissions", "full"},
		turns:    []fakeprovider.Turn{{ToolCalls: []fakeprovider.ToolCall{readCall}}, {Text: "The notes say remember the milk."}},
		wantCode: 0,
		wantOut:  []string{"▸ read_file", "✓ read_file done", "The notes say remember the milk."},
	}, {
		name:     "turn limit is an error",
		flags:    []string{"--max-turns", "1"},
		turns:    []fakeprovider.Turn{{ToolCalls: []fakeprovider.ToolCall{readCall}}},
		wantCode: 1,
		wantOut:  []string{"▸ read_file"},
	}, {
		name:     "a denied tool is shown as failed",
		flags:    []string{"--permissions", "read-only", "--max-turns", "2"},
		turns:    []fakeprovider.Turn{{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"true"}`}}}, {Text: "I may not run commands."}},
		wantCode: 0,
		wantOut:  []string{"✗ shell failed", "I may not run commands."},
	}, {
		// The tools run in a container with the directory mounted: the
		// shell sees the container's init, user and mount point.
		name:  "docker sandbox",
		flags: []string{"--permissions", "full", "--sandbox", "docker"},
		turns: []fakeprovider.Turn{{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell",
			Arguments: `{"command":"id -u > who.txt; tr '\\0' ' ' < /proc/1/cmdline > init.txt; pwd > pwd.txt; cat notes.txt > copy.txt"}`}}}, {Text: "Done in the container."}},
		wantCode:  0,
		wantOut:   []string{"✓ shell done", "Done in the container."},
		wantFiles: map[string]string{"who.txt": "1000\n", "init.txt": "sleep infinity ", "pwd.txt": "/workspace\n", "copy.txt": "remember the milk\n"},
	}, {
		name:      "interrupted",
		turns:     []fakeprovider.Turn{{Text: strings.Repeat("slowly ", 40), ChunkRunes: 4, ChunkDelay: 20 * time.Millisecond}},
		interrupt: true,
		wantCode:  130,
		wantOut:   []string{"slow"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if slices.Contains(tc.flags, "docker") && testing.Short() {
				t.Skip("runs a container: make test runs it, -short does not")
			}
			fake := fakeprovider.New(tc.turns...)
			hs := httptest.NewServer(fake)
			defer hs.Close()
			tmp := t.TempDir()
			ws := filepath.Join(tmp, "ws")
			if err := os.MkdirAll(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("remember the milk\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.wantFiles != nil && os.Geteuid() == 0 {
				// Commands in a container work as the directory's owner,
				// never root.
				os.Chown(ws, 1000, 1000)
			}
			overlay, _ := json.Marshal(map[string]any{"providers": map[string]any{"anthropic": map[string]any{"baseUrl": hs.URL}}})
			overlayPath := filepath.Join(tmp, "catalog.json")
			if err := os.WriteFile(overlayPath, overlay, 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"exec", "--model", "anthropic/claude-sonnet-4.5", "-data-dir", filepath.Join(tmp, "data"),
				"-llm-catalog-overlay", overlayPath}, tc.flags...)
			cmd := exec.Command(fabroBin, append(args, "Read notes.txt and tell me what it says.")...)
			cmd.Dir = ws
			cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if tc.interrupt {
				pr, pw, _ := os.Pipe()
				cmd.Stdout = pw
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				pw.Close()
				buf := make([]byte, 4096)
				n, _ := pr.Read(buf) // the first text has arrived
				stdout.Write(buf[:n])
				cmd.Process.Signal(syscall.SIGINT)
				for {
					n, err := pr.Read(buf)
					stdout.Write(buf[:n])
					if err != nil {
						break
					}
				}
			} else if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			for name, want := range tc.wantFiles {
				if got, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(got) != want {
					t.Errorf("%s = %q, %v; want %q", name, got, err, want)
				}
			}
		})
	}
}
