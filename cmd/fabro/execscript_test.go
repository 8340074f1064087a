package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// execIn runs `fabro exec` in dir on the scripted provider behind overlay,
// with stdin, and returns stdout, stderr and the exit code.
func execIn(t *testing.T, dir, stdin, overlay string, args ...string) (string, string, int) {
	t.Helper()
	all := append([]string{"exec", "--llm-catalog-overlay", overlay, "--model", "anthropic/claude-sonnet-4.5"}, args...)
	cmd := exec.Command(fabroBin, all...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// volatile are the fields that differ from run to run: ids, clocks, and
// what depends on the temporary directory's name.
var volatile = map[string]bool{
	"session_id": true, "root_session_id": true, "parent_session_id": true, "prompt_id": true,
	"time": true, "start_time": true, "end_time": true, "duration": true, "duration_ms": true,
	"inference_duration": true, "tool_duration": true, "time_to_first_output": true,
	"estimated_tokens": true, "usage_percent": true, "sandbox_id": true, "working_directory": true,
}

// normalize rewrites one JSON document with its volatile fields replaced
// and its keys sorted, for a golden file.
func normalize(t *testing.T, doc []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if volatile[k] {
					v[k] = "<" + k + ">"
				} else {
					v[k] = walk(x)
				}
			}
		case []any:
			for i, x := range v {
				v[i] = walk(x)
			}
		}
		return v
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(walk(v)); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func writeNotes(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("remember the milk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

var readNotes = fakeprovider.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"file_path":"notes.txt"}`}

// TestExecOutputFormats: json prints one object at the end; stream-json
// one line per event, every line of the schema's version and of a type
// the descriptor knows, then the result. Both against golden files.
func TestExecOutputFormats(t *testing.T) {
	for _, format := range []string{"json", "stream-json"} {
		t.Run(format, func(t *testing.T) {
			_, overlay := scriptedAnthropic(t,
				fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{readNotes}, Usage: fakeprovider.Usage{Input: 1000, Output: 50}},
				fakeprovider.Turn{Text: "The notes say remember the milk.", Usage: fakeprovider.Usage{Input: 1200, Output: 20}})
			out, errOut, code := execIn(t, writeNotes(t), "", overlay, "--data-dir", t.TempDir(), "--output-format", format, "Read notes.txt.")
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			var golden strings.Builder
			if format == "json" {
				var res execResult
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
				}
				if res.Status != "COMPLETED" || res.Result != "The notes say remember the milk." || res.Turns != 2 || res.CostUSD <= 0 || !strings.HasPrefix(res.SessionID, "s_") {
					t.Errorf("result = %+v", res)
				}
				var indented bytes.Buffer
				json.Indent(&indented, []byte(normalize(t, []byte(out))), "", "  ")
				golden.WriteString(indented.String() + "\n")
			} else {
				known := eventTypes()
				sc := bufio.NewScanner(strings.NewReader(out))
				sc.Buffer(nil, 1<<20)
				var types []string
				for sc.Scan() {
					var line struct {
						Version int    `json:"version"`
						Type    string `json:"type"`
					}
					if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
						t.Fatalf("line is not JSON: %v\n%s", err, sc.Text())
					}
					if line.Version != streamSchemaVersion || line.Type != "result" && !slices.Contains(known, line.Type) {
						t.Errorf("line of version %d, type %q: %s", line.Version, line.Type, sc.Text())
					}
					types = append(types, line.Type)
					golden.WriteString(normalize(t, sc.Bytes()) + "\n")
				}
				if len(types) == 0 || types[len(types)-1] != "result" || !slices.Contains(types, "tool_call_completed") {
					t.Errorf("types %v: want the events then the result", types)
				}
			}
			checkGolden(t, "exec-"+format+".txt", golden.String())
		})
	}
}

// TestExecStreamSchema: docs/CLI.md documents every event type of the
// AgentEvent descriptor, and each encodes as a line of its own type; a new
// event type fails here until it is documented.
func TestExecStreamSchema(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### stream-json")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("docs/CLI.md has no ### stream-json section")
	}
	types := eventTypes()
	if len(types) < 30 {
		t.Fatalf("only %d event types in the descriptor", len(types))
	}
	for _, typ := range types {
		if !strings.Contains(section, "`"+typ+"`") {
			t.Errorf("docs/CLI.md's stream-json section does not list the event type `%s`", typ)
		}
		ev := &agentv1.AgentEvent{SessionId: "s_1", Sequence: 7}
		f := eventOneof.Fields().ByName(protoreflect.Name(typ))
		ev.ProtoReflect().Set(f, protoreflect.ValueOfMessage(ev.ProtoReflect().NewField(f).Message()))
		b, err := streamLine(ev)
		if err != nil {
			t.Fatal(err)
		}
		var line struct {
			Version int                        `json:"version"`
			Type    string                     `json:"type"`
			Event   map[string]json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(b, &line); err != nil {
			t.Fatal(err)
		}
		if line.Version != streamSchemaVersion || line.Type != typ || line.Event[typ] == nil || string(line.Event["session_id"]) != `"s_1"` {
			t.Errorf("%s encodes as %s", typ, b)
		}
	}
}

// TestExecStdinPrompt: the prompt comes from stdin when the argument is
// "-" or stdin is not a terminal, after the argument when both are given.
func TestExecStdinPrompt(t *testing.T) {
	tests := []struct {
		name, stdin string
		args        []string
		want        string // the prompt the model got; "" for a usage error
	}{
		{name: "argument only", args: []string{"from the argument"}, want: "from the argument"},
		{name: "stdin only", stdin: "from stdin\n", want: "from stdin\n"},
		{name: "dash", stdin: "from stdin via -", args: []string{"-"}, want: "from stdin via -"},
		{name: "argument then stdin", stdin: "the log line", args: []string{"Explain this log:"}, want: "Explain this log:\n\nthe log line"},
		{name: "nothing", stdin: "  \n", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: "ok"})
			out, errOut, code := execIn(t, t.TempDir(), tc.stdin, overlay, append([]string{"--data-dir", t.TempDir()}, tc.args...)...)
			if tc.want == "" {
				if code != exitUsage || !strings.HasPrefix(errOut, "fabro exec: exec needs a prompt") || len(fake.Requests()) != 0 {
					t.Errorf("exit %d, %d model calls, stderr:\n%s\nwant 2, none and the usage", code, len(fake.Requests()), errOut)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d model calls", len(reqs))
			}
			var body struct {
				Messages []struct {
					Content json.RawMessage `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(reqs[0].Body, &body); err != nil || len(body.Messages) == 0 {
				t.Fatalf("request body: %v\n%s", err, reqs[0].Body)
			}
			want, _ := json.Marshal(tc.want)
			if !strings.Contains(string(body.Messages[0].Content), string(want)) {
				t.Errorf("the model got %s, want the text %s", body.Messages[0].Content, want)
			}
		})
	}
}

// TestExecResumeContinue: --continue runs on the latest session started
// in the directory, --resume on the one named, with its history; in
// process and against a server.
func TestExecResumeContinue(t *testing.T) {
	for _, where := range []string{"in process", "server"} {
		t.Run(where, func(t *testing.T) {
			fake, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: "one"}, fakeprovider.Turn{Text: "two"}, fakeprovider.Turn{Text: "three"})
			ws, other := t.TempDir(), t.TempDir()
			var flags []string
			if where == "server" {
				s := startServe(t, t.TempDir(), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws+","+other)
				flags = []string{"--server", s.grpcAddr}
			} else {
				flags = []string{"--data-dir", t.TempDir()}
			}
			run := func(dir string, args ...string) (execResult, string, int) {
				t.Helper()
				out, errOut, code := execIn(t, dir, "", overlay, append(append(slices.Clone(flags), "--output-format", "json"), args...)...)
				var res execResult
				if code == 0 {
					if err := json.Unmarshal([]byte(out), &res); err != nil {
						t.Fatalf("%v\n%s\n%s", err, out, errOut)
					}
				}
				return res, errOut, code
			}
			first, errOut, code := run(ws, "the first prompt")
			if code != 0 {
				t.Fatalf("first: exit %d\n%s", code, errOut)
			}
			second, errOut, code := run(ws, "--continue", "the second prompt")
			if code != 0 || second.SessionID != first.SessionID || second.Result != "two" {
				t.Fatalf("--continue: exit %d, session %s (want %s), result %q\n%s", code, second.SessionID, first.SessionID, second.Result, errOut)
			}
			third, errOut, code := run(other, "--resume", first.SessionID, "the third prompt")
			if code != 0 || third.SessionID != first.SessionID || third.Result != "three" {
				t.Fatalf("--resume: exit %d, session %s, result %q\n%s", code, third.SessionID, third.Result, errOut)
			}
			reqs := fake.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d model calls, want 3", len(reqs))
			}
			// The last call carries the whole conversation.
			for _, want := range []string{"the first prompt", "one", "the second prompt", "two", "the third prompt"} {
				if !strings.Contains(string(reqs[2].Body), want) {
					t.Errorf("the resumed session's model call lacks %q", want)
				}
			}
			empty := t.TempDir()
			if _, errOut, code := run(empty, "--continue", "nothing to continue"); code != exitFailure || !strings.Contains(errOut, "--continue: no session was started in "+empty) {
				t.Errorf("--continue in a fresh directory: exit %d\n%s", code, errOut)
			}
			if _, errOut, code := run(ws, "--resume", "s_0000000000000000000000000000", "x"); code != exitFailure || !strings.Contains(errOut, "resume session s_0000000000000000000000000000") {
				t.Errorf("--resume of an unknown session: exit %d\n%s", code, errOut)
			}
		})
	}
}

// TestExecBudgetStop: --max-cost stops the prompt before a turn that would
// go past it (exit 3, BUDGET_EXCEEDED); a limit above the prompt's cost
// lets it finish.
func TestExecBudgetStop(t *testing.T) {
	// Each tool turn costs $0.30 (100k input tokens at $3/M); the shell
	// call is slow enough that the stop lands before the next turn.
	slowTool := fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"sleep 3"}`}}, Usage: fakeprovider.Usage{Input: 100000}}
	tests := []struct {
		name, limit string
		wantCode    int
		wantStatus  string
		wantTurns   int32
	}{
		{"stopped", "0.5", exitBudget, statusBudgetExceeded, 1},
		{"within", "5", exitOK, "COMPLETED", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake, overlay := scriptedAnthropic(t, slowTool, slowTool, fakeprovider.Turn{Text: "done", Usage: fakeprovider.Usage{Input: 1000}})
			out, errOut, code := execIn(t, t.TempDir(), "", overlay, "--data-dir", t.TempDir(), "--permissions", "full", "--output-format", "json", "--max-cost", tc.limit, "run it")
			var res execResult
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("exit %d: %v\n%s\n%s", code, err, out, errOut)
			}
			if code != tc.wantCode || res.Status != tc.wantStatus || res.ExitCode != tc.wantCode || res.Turns != tc.wantTurns || len(fake.Requests()) != int(tc.wantTurns) {
				t.Errorf("exit %d, status %s, turns %d, %d model calls; want %d, %s, %d\n%s", code, res.Status, res.Turns, len(fake.Requests()), tc.wantCode, tc.wantStatus, tc.wantTurns, errOut)
			}
			if tc.wantCode == exitBudget && !strings.Contains(errOut, "stopped by --max-cost 0.5") {
				t.Errorf("stderr does not say why:\n%s", errOut)
			}
		})
	}
}

// TestConfigProfiles: --profile applies a [profile.NAME] section over the
// top-level keys; a profile the file lacks is an error naming it.
func TestConfigProfiles(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("model = \"top/model\"\npermissions = \"full\"\n\n[profile.ci]\nmodel = \"ci/model\"\npermissions = \"read-only\"\n\n[profile.fast]\nmodel = \"fast/model\"\n"), 0o644)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    map[string]string
		wantErr string
	}{
		{name: "no profile", want: map[string]string{"model": "top/model", "permissions": "full"}},
		{name: "ci", args: []string{"--profile", "ci"}, want: map[string]string{"model": "ci/model", "permissions": "read-only"}},
		{name: "a partial profile keeps the rest", args: []string{"--profile", "fast"}, want: map[string]string{"model": "fast/model", "permissions": "full"}},
		{name: "from the environment", env: map[string]string{"FABRO_PROFILE": "ci"}, want: map[string]string{"model": "ci/model", "permissions": "read-only"}},
		{name: "a flag beats the profile", args: []string{"--profile", "ci", "--model", "flag/model"}, want: map[string]string{"model": "flag/model", "permissions": "read-only"}},
		{name: "unknown", args: []string{"--profile", "nope"}, wantErr: `--profile "nope": ` + cfg + ` has no [profile.nope] section`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"FABRO_CONFIG": cfg}
			for k, v := range tt.env {
				vars[k] = v
			}
			e, _, _ := goldenEnv(vars)
			fs, _ := commands().find("exec").flagSet(e)
			if _, err := parseArgs(fs, append(tt.args, "PROMPT")); err != nil {
				t.Fatal(err)
			}
			err := applyDefaults(fs, e)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{"model": fs.Lookup("model").Value.String(), "permissions": fs.Lookup("permissions").Value.String()}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// The whole command: exit 2, one line naming the profile.
	_, errOut, code := runGolden(t, map[string]string{"FABRO_CONFIG": cfg}, "exec", "--profile", "nope", "hi")
	if code != exitUsage || errOut != `fabro exec: --profile "nope": `+cfg+" has no [profile.nope] section\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestToolErrorText(t *testing.T) {
	got := toolErrorText("Permission denied: rpc error: code = PermissionDenied desc = write outside the workspace\nline two: the rule deny(write:/etc/**)\n")
	want := "Permission denied: write outside the workspace\nline two: the rule deny(write:/etc/**)"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestExecMemoryChain: run in a subdirectory of a repository, exec loads
// AGENTS.md and the profile's CLAUDE.md of every directory from the root
// down, root first, a file identical to one loaded before once, within the
// 32 KiB budget with the truncation marker; outside a repository only the
// working directory's own.
func TestExecMemoryChain(t *testing.T) {
	big := "A-CLAUDE " + strings.Repeat("x", 40<<10)
	tests := []struct {
		name      string
		repo      bool
		files     map[string]string
		want      []string // in the system prompt, in this order
		wantNot   []string
		wantPaths []string // the memory_loaded event's files
		marker    bool
	}{{
		name: "chain", repo: true,
		files:     map[string]string{"AGENTS.md": "ROOT-AGENTS", "CLAUDE.md": "ROOT-CLAUDE", "a/AGENTS.md": "ROOT-AGENTS", "a/b/AGENTS.md": "B-AGENTS", "a/b/GEMINI.md": "NOT-MY-PROFILE"},
		want:      []string{"ROOT-AGENTS", "ROOT-CLAUDE", "B-AGENTS"},
		wantNot:   []string{"NOT-MY-PROFILE"},
		wantPaths: []string{"../../AGENTS.md", "../../CLAUDE.md", "AGENTS.md"},
	}, {
		name: "budget", repo: true,
		files:     map[string]string{"AGENTS.md": "ROOT-AGENTS", "a/CLAUDE.md": big, "a/b/AGENTS.md": "B-AGENTS"},
		want:      []string{"ROOT-AGENTS", "A-CLAUDE", "[Project instructions truncated at 32KB]"},
		wantNot:   []string{"B-AGENTS"},
		wantPaths: []string{"../../AGENTS.md", "../CLAUDE.md", "AGENTS.md"},
		marker:    true,
	}, {
		name:      "not a repository",
		files:     map[string]string{"AGENTS.md": "ROOT-AGENTS", "a/b/AGENTS.md": "B-AGENTS"},
		want:      []string{"B-AGENTS"},
		wantNot:   []string{"ROOT-AGENTS"},
		wantPaths: []string{"AGENTS.md"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: "ok"})
			root := t.TempDir()
			// The sandbox's commands run as another user when the test runs as
			// root: the tree must be readable, as a repository usually is.
			os.Chmod(filepath.Dir(root), 0o755)
			os.Chmod(root, 0o755)
			if tc.repo {
				os.Mkdir(filepath.Join(root, ".git"), 0o755)
			}
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			os.MkdirAll(filepath.Join(root, "a", "b"), 0o755)
			out, errOut, code := execIn(t, filepath.Join(root, "a", "b"), "", overlay, "--data-dir", t.TempDir(), "--output-format", "stream-json", "hi")
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			body := string(fake.Requests()[0].Body)
			at := 0
			for _, w := range tc.want {
				i := strings.Index(body[at:], w)
				if i < 0 {
					t.Fatalf("the system prompt lacks %q after offset %d", w, at)
				}
				at += i + len(w)
			}
			if n := strings.Count(body, "ROOT-AGENTS"); tc.repo && n != 1 {
				t.Errorf("ROOT-AGENTS is in the prompt %d times, want once", n)
			}
			for _, w := range tc.wantNot {
				if strings.Contains(body, w) {
					t.Errorf("the system prompt holds %q", w)
				}
			}
			var mem struct {
				Event struct {
					MemoryLoaded struct {
						Memory struct {
							Files []struct {
								Path      string `json:"path"`
								Truncated bool   `json:"truncated"`
							} `json:"files"`
							Total string `json:"total_loaded_bytes"`
						} `json:"memory"`
					} `json:"memory_loaded"`
				} `json:"event"`
			}
			for line := range strings.SplitSeq(out, "\n") {
				if strings.Contains(line, `"type":"memory_loaded"`) {
					json.Unmarshal([]byte(line), &mem)
				}
			}
			var paths []string
			truncated := false
			for _, f := range mem.Event.MemoryLoaded.Memory.Files {
				paths = append(paths, f.Path)
				truncated = truncated || f.Truncated
			}
			if diff := cmp.Diff(tc.wantPaths, paths); diff != "" {
				t.Errorf("memory files (-want +got):\n%s", diff)
			}
			if total, _ := strconv.Atoi(mem.Event.MemoryLoaded.Memory.Total); total > 32<<10 || truncated != tc.marker {
				t.Errorf("loaded %d bytes (budget 32768), truncated %v", total, truncated)
			}
		})
	}
}

// TestExecSubagents: --subagents N offers the model the subagent tools;
// without it they are not offered.
func TestExecSubagents(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  bool
	}{{nil, false}, {[]string{"--subagents", "2"}, true}} {
		fake, overlay := scriptedAnthropic(t, fakeprovider.Turn{Text: "ok"})
		out, errOut, code := execIn(t, t.TempDir(), "", overlay, append([]string{"--data-dir", t.TempDir()}, append(tc.flags, "hi")...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", tc.flags, code, out, errOut)
		}
		if got := strings.Contains(string(fake.Requests()[0].Body), `"spawn_agent"`); got != tc.want {
			t.Errorf("%v: spawn_agent offered %v, want %v", tc.flags, got, tc.want)
		}
	}
	if _, errOut, code := fabro(t, "", "exec", "--subagents", "-1", "hi"); code != exitUsage || !strings.HasPrefix(errOut, "fabro exec: --subagents must not be negative") {
		t.Errorf("--subagents -1: exit %d, %q", code, errOut)
	}
}
