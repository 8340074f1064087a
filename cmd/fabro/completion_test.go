package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestBashCompletion loads `fabro completion bash` into bash and asks it
// to complete command lines, as the TAB key does.
func TestBashCompletion(t *testing.T) {
	tests := []struct {
		line string // the words typed; the last one is being completed
		want string // COMPREPLY, space separated
	}{
		{"fabro se", "serve sessions secret"},
		{"fabro secret ", "set list rm"},
		{"fabro sessions re", "resume rewind"},
		{"fabro secret set --no", "--no-probe"},
		{"fabro --server 127.0.0.1:7700 secret l", "list"},
		{"fabro exec --per", "--permissions"},
		{"fabro exec --permissions read-", "read-only read-write"},
		{"fabro token create --role ", "user admin"},
		{"fabro completion ", ""}, // a leaf: no words, files instead
		{"fabro --ver", "--version"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			if got := bashComplete(t, tt.line); got != tt.want {
				t.Errorf("completing %q = %q, want %q", tt.line, got, tt.want)
			}
		})
	}
}

// bashComplete loads `fabro completion bash` into bash and completes line
// (its last word; a trailing space starts a new one) as TAB does.
func bashComplete(t *testing.T, line string) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed: ", err)
	}
	script := `set -e
source <(fabro completion bash)
complete -p fabro >/dev/null
read -ra COMP_WORDS <<< "$LINE"
[[ $LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE=$LINE
_fabro || true # as at a prompt: no errexit inside
echo "${COMPREPLY[*]}"`
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(fabroBin)+":"+os.Getenv("PATH"), "LINE="+line)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestCompletionScripts pins the three scripts (golden files) and checks
// that every command appears in each.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		t.Run(shell, func(t *testing.T) {
			out, errOut, code := runGolden(t, nil, "completion", shell)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			for _, c := range allCommands() {
				if c.path != "" && !strings.Contains(out, c.name) {
					t.Errorf("the %s script lacks %q", shell, c.path)
				}
			}
			checkGolden(t, "completion."+shell, out)
			if sh, err := exec.LookPath(shell); err == nil && shell != "bash" {
				// Where the shell is installed, the script must parse.
				cmd := exec.Command(sh, "-n")
				cmd.Stdin = strings.NewReader(out)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s -n: %v\n%s", shell, err, b)
				}
			}
		})
	}
}

// TestZshAndFishCompletion runs the zsh and fish scripts' logic in those
// shells where they are installed (zsh with its completion builtins
// stubbed to print what they are given; fish with complete -C).
func TestZshAndFishCompletion(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			sh, err := exec.LookPath(shell)
			if err != nil {
				t.Skipf("%s is not installed; its script is pinned by TestCompletionScripts", shell)
			}
			script, _, _ := runGolden(t, nil, "completion", shell)
			path := filepath.Join(t.TempDir(), "fabro."+shell)
			if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			var prog string
			var cases []struct{ line, want string }
			if shell == "zsh" {
				prog = `compdef() { :; }
_describe() { local arr=$4; print -r -- "${(@)${(P)arr}%%:*}"; }
compadd() { shift; print -r -- "$@"; }
_files() { print files; }
source ` + path + `
words=(${(z)LINE}); [[ $LINE == *" " ]] && words+=("")
CURRENT=${#words}
_fabro`
				cases = []struct{ line, want string }{
					{"fabro secret ", "set list rm"},
					{"fabro exec --permissions ", "read-only read-write full"},
					{"fabro secret set --no", "--help --config --data-dir --expected-version --llm-catalog-overlay --no-probe --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file"},
					{"fabro completion ", "files"},
				}
			} else {
				prog = `source ` + path + `; complete -C"$LINE" | string replace -r '\t.*' '' | string join ' '; true`
				cases = []struct{ line, want string }{
					{"fabro secret ", "list rm set"},
					{"fabro se", "secret serve sessions"},
					{"fabro exec --permissions ", "full read-only read-write"},
					{"fabro secret set --no", "--no-probe"},
				}
			}
			for _, c := range cases {
				cmd := exec.Command(sh, "-c", prog)
				cmd.Env = append(os.Environ(), "LINE="+c.line)
				out, err := cmd.CombinedOutput()
				if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
					t.Errorf("completing %q = %q, %v; want %q", c.line, got, err, c.want)
				}
			}
		})
	}
}

// TestCompletionFromServer: the scripts complete session ids, model ids
// and driver names with what the server (--server on the line) answers,
// through the hidden fabro __complete; with no server answering they fall
// back to the built-in words, or to none, and print no error.
func TestCompletionFromServer(t *testing.T) {
	_, overlay := scriptedAnthropic(t)
	ws, data := t.TempDir(), t.TempDir()
	s := startServe(t, data, "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws)
	created, err := agentClient(t, s).CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model:   "anthropic/claude-sonnet-4.5",
		Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: ws}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()

	// __complete itself: one word a line.
	out, errOut, code := fabro(t, "", "__complete", "sessions", "--server", s.grpcAddr)
	if code != 0 || out != id+"\n" {
		t.Fatalf("__complete sessions: exit %d, %q %q; want %q", code, out, errOut, id)
	}
	out, _, _ = fabro(t, "", "__complete", "models", "--server", s.grpcAddr)
	if !strings.Contains(out, "claude-sonnet-4.5\n") {
		t.Errorf("__complete models = %q, want the catalog's models", out)
	}
	if _, errOut, code := fabro(t, "", "__complete", "frobs"); code != exitUsage || !strings.Contains(errOut, `unknown kind "frobs"`) {
		t.Errorf("__complete frobs: exit %d %q", code, errOut)
	}

	down := "127.0.0.1:1" // nothing listens
	tests := []struct{ line, want string }{
		{"fabro sessions show --server " + s.grpcAddr + " ", id},
		{"fabro sessions rm --server " + s.grpcAddr + " " + id[:4], id},
		{"fabro exec --server " + s.grpcAddr + " --sandbox ", "daytona docker local"},
		{"fabro exec --server " + s.grpcAddr + " --model claude-sonnet-4.", "claude-sonnet-4.5"},
		{"fabro sessions show --server " + down + " ", ""},
		{"fabro exec --server " + down + " --sandbox ", "local docker"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			if got := bashComplete(t, tt.line); got != tt.want {
				t.Errorf("completing %q = %q, want %q", tt.line, got, tt.want)
			}
		})
	}
}
