package tools_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/fabro-sh/fabro-go/services/agent/tooltest"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

func TestRunRefusals(t *testing.T) {
	b := newBox(t)
	b.write(t, "a.txt", "hello\n")
	tests := []struct {
		name    string
		profile string
		level   PermissionLevel
		call    Call
		kind    string
		want    []string
	}{
		{"unknown tool", "openai", Full, Call{Name: "rm_rf", Arguments: `{}`}, KindUnknownTool, []string{`Unknown tool: "rm_rf"`, "apply_patch"}},
		{"tool of another profile", "anthropic", Full, Call{Name: "apply_patch", Arguments: `{"patch":"x"}`}, KindUnknownTool, []string{"Unknown tool"}},
		{"shell at read-write", "openai", ReadWrite, Call{Name: "shell", Arguments: `{"command":"true"}`}, KindDenied, []string{"not allowed at permission level read-write"}},
		{"write at read-only", "openai", ReadOnly, Call{Name: "write_file", Arguments: `{"file_path":"x","content":""}`}, KindDenied, []string{"read-only"}},
		{"web at read-write", "gemini", ReadWrite, Call{Name: "web_fetch", Arguments: `{"url":"https://example.com"}`}, KindDenied, nil},
		{"tasks at read-only", "anthropic", ReadOnly, Call{Name: "TaskList", Arguments: `{}`}, KindDenied, nil},
		{"plan at read-only", "openai", ReadOnly, Call{Name: "update_plan", Arguments: `{"plan":[]}`}, KindDenied, nil},
		{"malformed JSON", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path": "a.txt"`}, KindInvalidArguments, []string{"not valid JSON"}},
		{"trailing garbage", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":"a.txt"} x`}, KindInvalidArguments, []string{"not valid JSON"}},
		{"not an object", "openai", Full, Call{Name: "read_file", Arguments: `["a.txt"]`}, KindInvalidArguments, []string{"arguments: expected object, got array"}},
		{"missing required", "openai", Full, Call{Name: "read_file", Arguments: `{}`}, KindInvalidArguments, []string{`missing required property "file_path"`}},
		{"empty arguments are {}", "openai", Full, Call{Name: "read_file", Arguments: ``}, KindInvalidArguments, []string{`missing required property "file_path"`}},
		{"wrong type", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":3}`}, KindInvalidArguments, []string{"arguments.file_path: expected string, got number"}},
		{"not an integer", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":"a.txt","limit":1.5}`}, KindInvalidArguments, []string{"arguments.limit: expected integer"}},
		{"below minimum", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":"a.txt","limit":0}`}, KindInvalidArguments, []string{"arguments.limit: must be at least 1"}},
		{"negative offset", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":"a.txt","offset":-1}`}, KindInvalidArguments, []string{"arguments.offset: must be at least 0"}},
		{"unknown property", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":"a.txt","bogus":1}`}, KindInvalidArguments, []string{`unknown property "bogus"`}},
		{"enum", "openai", Full, Call{Name: "update_plan", Arguments: `{"plan":[{"step":"a","status":"done"}]}`}, KindInvalidArguments, []string{`arguments.plan[0].status: "done" is not one of pending, in_progress, completed`}},
		{"array item type", "gemini", Full, Call{Name: "read_many_files", Arguments: `{"paths":["a",2]}`}, KindInvalidArguments, []string{"arguments.paths[1]: expected string"}},
		{"boolean", "anthropic", Full, Call{Name: "edit_file", Arguments: `{"file_path":"a","old_string":"a","new_string":"b","replace_all":"yes"}`}, KindInvalidArguments, []string{"arguments.replace_all: expected boolean, got string"}},
		{"null", "openai", Full, Call{Name: "read_file", Arguments: `{"file_path":null}`}, KindInvalidArguments, []string{"expected string, got null"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := b.set(tt.profile, tt.level, nil)
			r := s.Run(t.Context(), tt.call)
			check(t, r, tt.kind, tt.want...)
			if tt.kind == KindInvalidArguments && !strings.HasPrefix(r.Output, "Tool argument validation failed: ") {
				t.Errorf("validation error text: %q", r.Output)
			}
		})
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	b := newBox(t)
	s := b.set("openai", Full, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := s.Run(ctx, Call{Name: "read_file", Arguments: `{"file_path":"a"}`})
	check(t, r, KindCancelled, "Cancelled")
	if r.ErrorKindProto() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_CANCELLED {
		t.Errorf("proto kind %v", r.ErrorKindProto())
	}
}

func TestReadFile(t *testing.T) {
	b := newBox(t)
	var long strings.Builder
	for i := 1; i <= 2500; i++ {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	b.write(t, "a.go", "package a\n\nfunc A() {}\n")
	b.write(t, "long.txt", long.String())
	b.write(t, "empty.txt", "")
	b.write(t, "dir/x.txt", "x")
	s := b.set("openai", ReadOnly, nil)
	tests := []struct {
		name string
		args map[string]any
		kind string
		want []string
		not  []string
	}{
		{"whole file, absolute", map[string]any{"file_path": b.path("a.go")}, "", []string{"  1 | package a\n  2 | \n  3 | func A() {}\n"}, []string{"Showing"}},
		{"relative path", map[string]any{"file_path": "a.go"}, "", []string{"  1 | package a"}, nil},
		{"offset 0 is the first line", map[string]any{"file_path": "a.go", "offset": 0, "limit": 1}, "", []string{"  1 | package a\n"}, []string{"func"}},
		{"offset and limit", map[string]any{"file_path": "a.go", "offset": 3, "limit": 1}, "", []string{"  3 | func A() {}"}, []string{"package"}},
		{"default limit 2000", map[string]any{"file_path": "long.txt"}, "", []string{"2000 | line 2000\n", "[Showing lines 1-2000 of 2500. Use offset=2001 to read more.]"}, []string{"line 2001"}},
		{"page two", map[string]any{"file_path": "long.txt", "offset": 2001}, "", []string{"2001 | line 2001", "2500 | line 2500"}, []string{"Showing"}},
		{"offset past end", map[string]any{"file_path": "a.go", "offset": 10}, "", []string{"past the end of the file, which has 3 lines"}, nil},
		{"empty file", map[string]any{"file_path": "empty.txt"}, "", []string{"(empty file)"}, nil},
		{"file not found", map[string]any{"file_path": "nope.txt"}, KindFailed, []string{"File not found: " + b.path("nope.txt")}, nil},
		{"directory", map[string]any{"file_path": "dir"}, KindFailed, []string{"Error:"}, nil},
		{"escapes the root", map[string]any{"file_path": "../../../../etc/passwd"}, KindFailed, []string{"Permission denied"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, s, "read_file", tt.args)
			check(t, r, tt.kind, tt.want...)
			for _, n := range tt.not {
				if strings.Contains(r.Output, n) {
					t.Errorf("output contains %q:\n%s", n, r.Output)
				}
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	b := newBox(t)
	s := b.set("openai", ReadWrite, nil)
	r := run(t, s, "write_file", map[string]any{"file_path": b.path("new/dir/f.txt"), "content": "one\n"})
	check(t, r, "", "Successfully wrote to "+b.path("new/dir/f.txt"), "created, 4 bytes")
	if got, _ := b.read(t, "new/dir/f.txt"); got != "one\n" {
		t.Fatalf("content %q", got)
	}
	r = run(t, s, "write_file", map[string]any{"file_path": "new/dir/f.txt", "content": "two"})
	check(t, r, "", "updated, 3 bytes")
	if got, _ := b.read(t, "new/dir/f.txt"); got != "two" {
		t.Fatalf("content %q", got)
	}
	r = run(t, s, "write_file", map[string]any{"file_path": "/etc/evil", "content": "x"})
	check(t, r, KindFailed, "Permission denied")
	b.write(t, "blocker", "file")
	r = run(t, s, "write_file", map[string]any{"file_path": "blocker/child", "content": "x"})
	check(t, r, KindFailed)
}

func TestEditFile(t *testing.T) {
	tests := []struct {
		name    string
		initial string
		args    map[string]any
		kind    string
		want    []string
		after   string
	}{
		{"unique", "a\nb\nc\n", map[string]any{"old_string": "b", "new_string": "B"}, "", []string{"1 replacement"}, "a\nB\nc\n"},
		{"not found", "a\nb\n", map[string]any{"old_string": "x", "new_string": "y"}, KindInvalidArguments, []string{"old_string not found in"}, "a\nb\n"},
		{"whitespace must match", "\tb\n", map[string]any{"old_string": "  b", "new_string": "y"}, KindInvalidArguments, []string{"old_string not found"}, "\tb\n"},
		{"ambiguous", "x\nx\n", map[string]any{"old_string": "x", "new_string": "y"}, KindInvalidArguments, []string{"not unique", "found 2 occurrences", "more surrounding context", "replace_all"}, "x\nx\n"},
		{"more context disambiguates", "a\nx\nb\nx\n", map[string]any{"old_string": "b\nx", "new_string": "b\ny"}, "", nil, "a\nx\nb\ny\n"},
		{"replace_all", "x\nx\n", map[string]any{"old_string": "x", "new_string": "y", "replace_all": true}, "", []string{"2 replacements"}, "y\ny\n"},
		{"same strings", "x\n", map[string]any{"old_string": "x", "new_string": "x"}, KindInvalidArguments, []string{"No changes"}, "x\n"},
		{"empty old_string", "x\n", map[string]any{"old_string": "", "new_string": "y"}, KindInvalidArguments, []string{"must not be empty"}, "x\n"},
		{"CRLF file, LF anchor", "a\r\nb\r\nc\r\n", map[string]any{"old_string": "a\nb", "new_string": "A\nB"}, "", nil, "A\r\nB\r\nc\r\n"},
		{"read_file prefixes copied", "func a() {\n\treturn 1\n}\n", map[string]any{"old_string": "  2 | \treturn 1", "new_string": "  2 | \treturn 2"}, "", nil, "func a() {\n\treturn 2\n}\n"},
		{"unicode", "héllo wörld\n", map[string]any{"old_string": "wörld", "new_string": "世界"}, "", nil, "héllo 世界\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			b.write(t, "f.txt", tt.initial)
			s := b.set("anthropic", ReadWrite, nil)
			tt.args["file_path"] = b.path("f.txt")
			check(t, run(t, s, "edit_file", tt.args), tt.kind, tt.want...)
			if got, _ := b.read(t, "f.txt"); got != tt.after {
				t.Errorf("file after = %q, want %q", got, tt.after)
			}
		})
	}
	t.Run("file not found", func(t *testing.T) {
		b := newBox(t)
		s := b.set("gemini", ReadWrite, nil)
		check(t, run(t, s, "edit_file", map[string]any{"file_path": "nope", "old_string": "a", "new_string": "b"}), KindFailed, "File not found")
	})
	t.Run("parallel edits of one file keep both", func(t *testing.T) {
		b := newBox(t)
		b.write(t, "f.txt", "one\ntwo\n")
		s := b.set("anthropic", ReadWrite, nil)
		var wg sync.WaitGroup
		for _, w := range []string{"one", "two"} {
			wg.Go(func() {
				check(t, s.Run(t.Context(), Call{Name: "edit_file", Arguments: fmt.Sprintf(`{"file_path":"f.txt","old_string":%q,"new_string":%q}`, w, strings.ToUpper(w))}), "")
			})
		}
		wg.Wait()
		if got, _ := b.read(t, "f.txt"); got != "ONE\nTWO\n" {
			t.Errorf("file = %q", got)
		}
	})
}

func TestGrep(t *testing.T) {
	b := newBox(t)
	b.write(t, "a.go", "package a\nfunc Alpha() {}\n")
	b.write(t, "sub/b.go", "package sub\nfunc Beta() {}\nfunc alpha() {}\n")
	b.write(t, "c.txt", "func Alpha in text\n")
	s := b.set("openai", ReadOnly, nil)
	tests := []struct {
		name string
		args map[string]any
		kind string
		want []string
		not  []string
	}{
		{"file:line:content", map[string]any{"pattern": "func A"}, "", []string{b.path("a.go") + ":2:func Alpha() {}", b.path("c.txt") + ":1:func Alpha in text"}, []string{"alpha()"}},
		{"case insensitive", map[string]any{"pattern": "func a", "case_insensitive": true}, "", []string{"sub/b.go:3:func alpha() {}", "a.go:2"}, nil},
		{"glob filter", map[string]any{"pattern": "func", "glob_filter": "*.go"}, "", []string{"a.go:2", "b.go:2"}, []string{"c.txt"}},
		{"path", map[string]any{"pattern": "func", "path": "sub"}, "", []string{b.path("sub/b.go") + ":2:func Beta() {}"}, []string{"a.go"}},
		{"max_results", map[string]any{"pattern": "func", "max_results": 1}, "", []string{"[Results limited to 1 matches"}, nil},
		{"no matches", map[string]any{"pattern": "zzz"}, "", []string{"No matches found."}, nil},
		{"invalid regex", map[string]any{"pattern": "func (x"}, KindInvalidArguments, []string{"Invalid argument"}, nil},
		{"missing path", map[string]any{"pattern": "x", "path": "nope"}, KindFailed, []string{"Path not found"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, s, "grep", tt.args)
			check(t, r, tt.kind, tt.want...)
			for _, n := range tt.not {
				if strings.Contains(r.Output, n) {
					t.Errorf("output contains %q:\n%s", n, r.Output)
				}
			}
		})
	}
}

func TestGlob(t *testing.T) {
	b := newBox(t)
	for _, f := range []string{"b.go", "a.go", "sub/c.go", "sub/d.txt", ".hidden.go"} {
		b.write(t, f, "x")
	}
	s := b.set("openai", ReadOnly, nil)
	tests := []struct {
		name string
		args map[string]any
		kind string
		want string
	}{
		{"top level", map[string]any{"pattern": "*.go"}, "", strings.Join([]string{b.path(".hidden.go"), b.path("a.go"), b.path("b.go")}, "\n") + "\n"},
		{"recursive", map[string]any{"pattern": "**/*.go"}, "", strings.Join([]string{b.path(".hidden.go"), b.path("a.go"), b.path("b.go"), b.path("sub/c.go")}, "\n") + "\n"},
		{"under path", map[string]any{"pattern": "*", "path": "sub"}, "", b.path("sub/c.go") + "\n" + b.path("sub/d.txt") + "\n"},
		{"no match", map[string]any{"pattern": "*.rs"}, "", "No files matched."},
		{"absolute pattern", map[string]any{"pattern": "/etc/*"}, KindInvalidArguments, ""},
		{"dotdot", map[string]any{"pattern": "../*"}, KindInvalidArguments, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, s, "glob", tt.args)
			check(t, r, tt.kind)
			if tt.kind == "" && r.Output != tt.want {
				t.Errorf("output:\n%s\nwant:\n%s", r.Output, tt.want)
			}
		})
	}
}

func TestListDirAndReadMany(t *testing.T) {
	b := newBox(t)
	b.write(t, "a.txt", "alpha\n")
	b.write(t, "d/b.txt", "beta\n")
	b.write(t, "d/e/c.txt", "gamma\n")
	s := b.set("gemini", ReadOnly, nil)

	r := run(t, s, "list_dir", map[string]any{"path": b.root})
	check(t, r, "")
	if r.Output != "a.txt\nd/\n" {
		t.Errorf("depth 1:\n%s", r.Output)
	}
	r = run(t, s, "list_dir", map[string]any{"path": ".", "depth": 3})
	if r.Output != "a.txt\nd/\nd/b.txt\nd/e/\nd/e/c.txt\n" {
		t.Errorf("depth 3:\n%s", r.Output)
	}
	check(t, run(t, s, "list_dir", map[string]any{"path": "nope"}), KindFailed, "Directory not found")
	check(t, run(t, s, "list_dir", map[string]any{"path": "a.txt"}), KindFailed)

	r = run(t, s, "read_many_files", map[string]any{"paths": []string{b.path("a.txt"), "d/b.txt", "missing.txt"}})
	check(t, r, "")
	want := "=== " + b.path("a.txt") + " ===\n  1 | alpha\n\n=== " + b.path("d/b.txt") + " ===\n  1 | beta\n\n=== " + b.path("missing.txt") + " ===\nError: File not found: " + b.path("missing.txt") + "\n"
	if r.Output != want {
		t.Errorf("read_many_files:\n%s\nwant:\n%s", r.Output, want)
	}
	check(t, run(t, s, "read_many_files", map[string]any{"paths": []string{"x", "y"}}), KindFailed, "=== "+b.path("x")+" ===")
	check(t, run(t, s, "read_many_files", map[string]any{"paths": []string{}}), KindInvalidArguments)
}

func TestShell(t *testing.T) {
	b := newBox(t)
	tests := []struct {
		name string
		env  func(*Env)
		args map[string]any
		kind string
		want []string
		exit *int32
		term sandboxv1.Termination
	}{
		{"stdout", nil, map[string]any{"command": "echo hello"}, "", []string{"Exit code: 0\n", "stdout:\nhello\n", "stderr: (empty)"}, new(int32(0)), sandboxv1.Termination_TERMINATION_EXITED},
		{"stderr and exit code", nil, map[string]any{"command": "echo out; echo err >&2; exit 3", "description": "fails"}, KindFailed, []string{"Exit code: 3", "stdout:\nout\n", "stderr:\nerr\n"}, new(int32(3)), sandboxv1.Termination_TERMINATION_EXITED},
		{"runs in the working directory", nil, map[string]any{"command": "pwd"}, "", []string{b.root}, new(int32(0)), sandboxv1.Termination_TERMINATION_EXITED},
		{"bash, no pipefail", nil, map[string]any{"command": "false | true; [[ 1 == 1 ]] && echo bash"}, "", []string{"bash"}, new(int32(0)), sandboxv1.Termination_TERMINATION_EXITED},
		{"timeout_ms", nil, map[string]any{"command": "echo before; exec sleep 30", "timeout_ms": 300}, KindTimeout, []string{"Command timed out after 300 ms", "before"}, nil, sandboxv1.Termination_TERMINATION_TIMED_OUT},
		{"default timeout", func(e *Env) { e.DefaultCommandTimeout = 300 * time.Millisecond }, map[string]any{"command": "echo early; exec sleep 30"}, KindTimeout, []string{"Command timed out after 300 ms", "early"}, nil, sandboxv1.Termination_TERMINATION_TIMED_OUT},
		{"timeout capped", func(e *Env) { e.MaxCommandTimeout = 300 * time.Millisecond }, map[string]any{"command": "exec sleep 30", "timeout_ms": 600000}, KindTimeout, []string{"Command timed out after 300 ms"}, nil, sandboxv1.Termination_TERMINATION_TIMED_OUT},
		{"empty command", nil, map[string]any{"command": "  "}, KindInvalidArguments, []string{"must not be empty"}, nil, 0},
		{"command not found", nil, map[string]any{"command": "no-such-command-xyz"}, KindFailed, []string{"Exit code: 127"}, new(int32(127)), sandboxv1.Termination_TERMINATION_EXITED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := b.set("openai", Full, tt.env)
			r := run(t, s, "shell", tt.args)
			check(t, r, tt.kind, tt.want...)
			if tt.term == 0 {
				return
			}
			if r.Process == nil || r.Process.GetTermination() != tt.term {
				t.Fatalf("process %v, want termination %v", r.Process, tt.term)
			}
			if (tt.exit == nil) != (r.Process.ExitCode == nil) || (tt.exit != nil && *tt.exit != r.Process.GetExitCode()) {
				t.Errorf("exit code %v, want %v", r.Process.ExitCode, tt.exit)
			}
		})
	}
}

func TestShellStreamsAndCancel(t *testing.T) {
	b := newBox(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	var chunks []string
	s := b.set("openai", Full, func(e *Env) {
		e.ShellOutput = func(id string, stream sandboxv1.OutputStream, data []byte) {
			mu.Lock()
			defer mu.Unlock()
			if id != "c1" {
				t.Errorf("call id %q", id)
			}
			chunks = append(chunks, string(data))
			cancel() // the first output proves the command runs; stop it
		}
	})
	r := s.Run(ctx, Call{ID: "c1", Name: "shell", Arguments: `{"command":"echo started; exec sleep 30","timeout_ms":60000}`})
	check(t, r, KindCancelled)
	mu.Lock()
	defer mu.Unlock()
	if len(chunks) == 0 || !strings.Contains(strings.Join(chunks, ""), "started") {
		t.Errorf("chunks %q", chunks)
	}
}

func TestSandboxGone(t *testing.T) {
	b := newBox(t)
	b.write(t, "a.txt", "x\n")
	s := b.set("openai", Full, nil)
	check(t, run(t, s, "read_file", map[string]any{"file_path": "a.txt"}), "")
	if _, err := b.client.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: b.id}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{"read_file", map[string]any{"file_path": "a.txt"}},
		{"write_file", map[string]any{"file_path": "a.txt", "content": "y"}},
		{"shell", map[string]any{"command": "true"}},
		{"grep", map[string]any{"pattern": "x"}},
		{"glob", map[string]any{"pattern": "*"}},
		{"apply_patch", map[string]any{"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, s, c.name, c.args)
			check(t, r, KindSandboxUnavailable, "sandbox "+b.id+" no longer exists")
			if r.ErrorKindProto() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_SANDBOX_UNAVAILABLE {
				t.Errorf("proto kind %v", r.ErrorKindProto())
			}
		})
	}
}

func TestResultLimitsApplied(t *testing.T) {
	b := newBox(t)
	var content strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&content, "match line %04d %s\n", i, strings.Repeat("x", 20))
	}
	b.write(t, "big.txt", content.String())
	s := b.set("openai", Full, nil)
	r := run(t, s, "grep", map[string]any{"pattern": "match"})
	check(t, r, "")
	if !r.Truncated || r.CharsOmitted == 0 || len(r.Full) <= 30_000 {
		t.Fatalf("truncated=%v omitted=%d full=%d", r.Truncated, r.CharsOmitted, len(r.Full))
	}
	if !strings.HasSuffix(r.Output, "match line 2999 "+strings.Repeat("x", 20)+"\n") || strings.Contains(r.Output, "match line 0000") {
		t.Errorf("grep did not keep the tail")
	}
	if got := int64(len(r.Output)) - int64(len(r.Full)) + r.CharsOmitted; got <= 0 || got > 400 {
		t.Errorf("model output is %d bytes for a %d-byte full output with %d omitted", len(r.Output), len(r.Full), r.CharsOmitted)
	}

	over := NewSet("openai", Full, b.env(), map[string]Limit{"grep": {MaxChars: 100, Mode: Head}})
	r = run(t, over, "grep", map[string]any{"pattern": "match"})
	if !strings.HasPrefix(r.Output, b.path("big.txt")+":1:match line 0000") || r.CharsOmitted != int64(len(r.Full)-100) {
		t.Errorf("override not applied: omitted %d of %d:\n%.300s", r.CharsOmitted, len(r.Full), r.Output)
	}
	if !slices.Contains([]bool{r.Truncated}, true) {
		t.Error("not marked truncated")
	}
}

func TestShellOutputBomb(t *testing.T) {
	b := newBox(t)
	s := b.set("openai", Full, nil)
	r := run(t, s, "shell", map[string]any{"command": "head -c 3000000 /dev/zero | tr '\\0' a; echo; echo END"})
	check(t, r, "", "Exit code: 0", "END", "characters were removed from the middle")
	if !strings.Contains(r.Full, "bytes omitted ...]") {
		t.Error("the sandbox's omission is not marked in the full output")
	}
	if len(r.Full) > 2<<20 || !r.Truncated || len(r.Output) > 31_000 {
		t.Errorf("full %d bytes, model %d bytes, truncated %v", len(r.Full), len(r.Output), r.Truncated)
	}
	// The bytes observed are every byte the command wrote (plus the
	// rendered header lines), not what the sandbox kept.
	const written = int64(3_000_000 + len("\nEND\n"))
	if r.ObservedBytes < written || r.ObservedBytes > written+200 {
		t.Errorf("observed %d bytes, want %d plus the header lines", r.ObservedBytes, written)
	}
	if r.OmittedBytes <= 0 || r.RetainedBytes+r.OmittedBytes != r.ObservedBytes || r.RetainedBytes > int64(len(r.Full)) {
		t.Errorf("observed %d, retained %d, omitted %d, full %d", r.ObservedBytes, r.RetainedBytes, r.OmittedBytes, len(r.Full))
	}
}
