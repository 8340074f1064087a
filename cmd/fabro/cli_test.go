package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden")

// goldenEnv is a fixed outside world, so help and messages do not depend
// on the machine.
func goldenEnv(vars map[string]string) (env, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	if vars == nil {
		vars = map[string]string{}
	}
	if _, ok := vars["HOME"]; !ok {
		vars["HOME"] = "/nonexistent/home"
	}
	return env{
		stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
	}, &stdout, &stderr
}

// runGolden runs a command line in process with goldenEnv.
func runGolden(t *testing.T, vars map[string]string, args ...string) (string, string, int) {
	t.Helper()
	e, stdout, stderr := goldenEnv(vars)
	code := run(context.Background(), args, e)
	return stdout.String(), stderr.String(), code
}

// checkGolden compares got with testdata/golden/name, or rewrites it with
// -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// allCommands lists every command path of the tree, fabro itself first.
func allCommands() []*command {
	var out []*command
	var walk func(c *command)
	walk = func(c *command) {
		out = append(out, c)
		for _, s := range c.subs {
			walk(s)
		}
	}
	walk(commands())
	return out
}

// TestHelp: every command's help goes to stdout with exit 0, the same
// for --help, -h and `fabro help PATH`, with examples, and as its golden
// file says.
func TestHelp(t *testing.T) {
	for _, c := range allCommands() {
		name := "help-" + strings.ReplaceAll(c.path, " ", "-") + ".txt"
		if c.path == "" {
			name = "help.txt"
		}
		t.Run(name, func(t *testing.T) {
			path := strings.Fields(c.path)
			out, errOut, code := runGolden(t, nil, append(path, "--help")...)
			if code != 0 || errOut != "" {
				t.Fatalf("%s --help: exit %d, stderr %q; want 0 and nothing", c.title(), code, errOut)
			}
			if _, ex, _ := strings.Cut(out, "\nExamples:\n"); !strings.Contains(ex, "fabro "+c.path) {
				t.Errorf("%s --help has no examples:\n%s", c.title(), out)
			}
			checkGolden(t, name, out)
			for _, args := range [][]string{append(path, "-h"), append([]string{"help"}, path...)} {
				got, errOut, code := runGolden(t, nil, args...)
				if code != 0 || errOut != "" || got != out {
					t.Errorf("fabro %s: exit %d, stderr %q, and stdout differs from --help's: %v", strings.Join(args, " "), code, errOut, got != out)
				}
			}
		})
	}
}

// TestUsageErrors: a command line that is wrong exits 2 with one line
// saying what is wrong, then the usage, on stderr; nothing on stdout.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		first string // the first line of stderr
	}{
		{"no-command", nil, "fabro: missing command"},
		{"unknown-root-flag", []string{"--frob"}, "fabro: unknown flag --frob (flags go after the command)"},
		{"missing-subcommand", []string{"secret"}, "fabro secret: missing subcommand: want set, list, rm"},
		{"flag-without-value", []string{"models", "--provider"}, "fabro models: flag --provider needs a value"},
		{"bad-flag-value", []string{"token", "list", "--timeout", "soon"}, `fabro token list: invalid value "soon" for --timeout: parse error`},
		{"missing-argument", []string{"secret", "rm"}, "fabro secret rm: secret rm needs a secret NAME"},
		{"value-on-the-command-line", []string{"secret", "set", "X_API_KEY", "sk-1"}, "fabro secret set: secret set takes one NAME; the value is read from stdin or a prompt, never from the command line"},
		{"exec-without-prompt", []string{"exec"}, `fabro exec: exec needs a prompt: fabro exec [flags] "PROMPT", or the prompt on stdin (fabro exec - < prompt.txt)`},
		{"exec-two-prompts", []string{"exec", "one", "two"}, `fabro exec: exec takes one prompt: fabro exec [flags] "PROMPT" (or the prompt on stdin)`},
		{"exec-output-format-yaml", []string{"exec", "--output-format", "yaml", "hi"}, `fabro exec: invalid value "yaml" for --output-format: want text, json or stream-json, not "yaml"`},
		{"exec-max-cost-negative", []string{"exec", "--max-cost", "-1", "hi"}, `fabro exec: invalid value "-1" for --max-cost: must not be negative (0: no limit), not -1`},
		{"exec-resume-and-continue", []string{"exec", "--resume", "s_1", "--continue", "hi"}, `fabro exec: give --resume ID or --continue, not both`},
		{"exec-bad-permissions", []string{"exec", "--permissions", "root", "hi"}, `fabro exec: --permissions must be read-only, read-write or full, not "root"`},
		{"token-create-without-name", []string{"token", "create"}, "fabro token create: token create needs --name NAME"},
		{"token-create-bad-budget", []string{"token", "create", "--name", "bot", "--budget", "50eur/month"}, `fabro token create: --budget: budget "50eur/month": the amount must be a positive number of US dollars, e.g. 50usd/month`},
		{"token-create-bad-budget-period", []string{"token", "create", "--name", "bot", "--budget", "5usd/year"}, `fabro token create: --budget: budget "5usd/year": the period must be day, week or month`},
		{"token-create-bad-models", []string{"token", "create", "--name", "bot", "--models", "claude"}, `fabro token create: --models: model pattern "claude": want provider/model, '*' as a wildcard (anthropic/*)`},
		{"token-create-negative-rpm", []string{"token", "create", "--name", "bot", "--rpm", "-1"}, `fabro token create: --rpm must be a number of requests per minute, not -1`},
		{"sessions-show-without-id", []string{"sessions", "show"}, "fabro sessions show: sessions show takes one session ID (see fabro sessions list)"},
		{"sessions-rewind-without-to", []string{"sessions", "rewind", "s_1"}, "fabro sessions rewind: --to is required: the turn to go back to (see fabro sessions checkpoints)"},
		{"completion-unknown-shell", []string{"completion", "tcsh"}, `fabro completion: unknown shell "tcsh": want bash, zsh, fish or powershell`},
		{"help-unknown-command", []string{"help", "frob"}, `fabro help: no command "frob" in fabro`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runGolden(t, nil, tt.args...)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 2 and nothing", code, out)
			}
			first, rest, _ := strings.Cut(errOut, "\n")
			if first != tt.first || !strings.Contains(rest, "\nUsage:\n  fabro") {
				t.Errorf("stderr:\n%s\nwant the line %q, then the usage", errOut, tt.first)
			}
			checkGolden(t, "usage-"+tt.name+".txt", errOut)
		})
	}
}

// TestTypos: a word that names no command or flag exits 2 with one line
// naming it and the nearest word that would have meant something, then a
// one-line hint; not the 35 lines of every flag.
func TestTypos(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // the whole of stderr
	}{
		{"unknown-command", []string{"frobnicate"}, "fabro: unknown command \"frobnicate\"\nRun \"fabro help\" for usage.\n"},
		{"command-typo", []string{"sesions", "list"}, "fabro: unknown command \"sesions\" (did you mean sessions?)\nRun \"fabro help\" for usage.\n"},
		{"command-abbreviated", []string{"sess"}, "fabro: unknown command \"sess\" (did you mean sessions?)\nRun \"fabro help\" for usage.\n"},
		{"unknown-subcommand", []string{"sessions", "frob"}, "fabro sessions: unknown subcommand \"frob\": want list, show, resume, rm, checkpoints, diff, rewind\nRun \"fabro sessions --help\" for usage.\n"},
		{"subcommand-typo", []string{"secret", "lst"}, "fabro secret: unknown subcommand \"lst\": want set, list, rm (did you mean list?)\nRun \"fabro secret --help\" for usage.\n"},
		{"unknown-flag", []string{"secret", "list", "--frob"}, "fabro secret list: unknown flag --frob\nRun \"fabro secret list --help\" for usage.\n"},
		{"flag-typo", []string{"exec", "--sever", "127.0.0.1:7700", "hi"}, "fabro exec: unknown flag --sever (did you mean --server?)\nRun \"fabro exec --help\" for usage.\n"},
		{"flag-typo-one-dash", []string{"sessions", "list", "-servr=x"}, "fabro sessions list: unknown flag --servr (did you mean --server?)\nRun \"fabro sessions list --help\" for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runGolden(t, nil, tt.args...)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 2 and nothing", code, out)
			}
			if diff := cmp.Diff(tt.want, errOut); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			checkGolden(t, "typo-"+tt.name+".txt", errOut)
		})
	}
}

// TestServerWithoutPort: --server without a port is named as such, with
// the fix, before any token is read or any connection made.
func TestServerWithoutPort(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "localhost", "fabro.example.com", "[::1]"} {
		t.Run(addr, func(t *testing.T) {
			out, errOut, code := runGolden(t, nil, "sessions", "list", "--server", addr)
			want := "missing port in --server " + addr + ": use "
			if code != exitUsage || out != "" || !strings.Contains(errOut, want) || strings.Contains(errOut, "plaintext") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
			}
			if addr == "127.0.0.1" {
				checkGolden(t, "usage-server-without-port.txt", errOut)
			}
		})
	}
}

// TestExitCodesDocumented: fabro help and docs/CLI.md list every exit code.
func TestExitCodesDocumented(t *testing.T) {
	out, _, _ := runGolden(t, nil, "help")
	readme, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"0    done", "1    the command failed", "2    usage", "130  interrupted"} {
		if !strings.Contains(out, "\n  "+code) {
			t.Errorf("fabro help lacks the exit code line %q", code)
		}
	}
	for _, code := range []string{"| 0 |", "| 1 |", "| 2 |", "| 130 |"} {
		if !strings.Contains(string(readme), code) {
			t.Errorf("docs/CLI.md lacks the exit code row %q", code)
		}
	}
}

// TestParseArgs: flags go before, between or after the positional
// arguments; after "--" everything is positional.
func TestParseArgs(t *testing.T) {
	tests := []struct {
		args      []string
		wantPos   []string
		wantModel string
	}{
		{[]string{"--model", "m", "NAME"}, []string{"NAME"}, "m"},
		{[]string{"NAME", "--model", "m"}, []string{"NAME"}, "m"},
		{[]string{"A", "--model=m", "B"}, []string{"A", "B"}, "m"},
		{[]string{"--", "--model", "x"}, []string{"--model", "x"}, ""},
		{[]string{"A", "--", "-v"}, []string{"A", "-v"}, ""},
		{nil, nil, ""},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		model := fs.String("model", "", "")
		pos, err := parseArgs(fs, tt.args)
		if err != nil || !cmp.Equal(pos, tt.wantPos) || *model != tt.wantModel {
			t.Errorf("parseArgs(%q) = %q, model %q, %v; want %q, %q", tt.args, pos, *model, err, tt.wantPos, tt.wantModel)
		}
	}
}
