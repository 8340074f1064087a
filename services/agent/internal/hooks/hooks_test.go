package hooks

import (
	"strings"
	"sync"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/toolchain"
)

func engine(t *testing.T, data string) (*Engine, *[]*agentv1.HookFailed) {
	t.Helper()
	pf, err := settings.Parse("s.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	p, err := settings.Build(settings.Layer{Source: "s.json", Settings: pf.Settings, Data: []byte(data)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failed []*agentv1.HookFailed
	return &Engine{Hooks: p.Hooks, Host: Host{Dir: t.TempDir()}, SessionID: "s_1", WorkDir: "/work",
		Failed: func(f *agentv1.HookFailed) { mu.Lock(); failed = append(failed, f); mu.Unlock() }}, &failed
}

func pre(cmd string) string {
	return `{"hooks": {"pre_tool_use": [{"matcher": "shell", "command": ` + quote(cmd) + `, "timeout": "2s"}]}}`
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

func TestPreToolUse(t *testing.T) {
	tests := []struct {
		name, cmd     string
		wantDeny      string // prefix; "" allows
		wantArgs      string
		wantVerdict   toolchain.Verdict
		wantFailed    bool
		wantRewritten bool
	}{
		{name: "no output allows", cmd: "cat >/dev/null", wantArgs: `{"command":"ls"}`},
		{name: "allow decision", cmd: `cat >/dev/null; echo '{"hookSpecificOutput":{"permissionDecision":"allow"}}'`, wantArgs: `{"command":"ls"}`, wantVerdict: toolchain.Allow},
		{name: "ask decision", cmd: `echo '{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"risky"}}'`, wantArgs: `{"command":"ls"}`, wantVerdict: toolchain.Ask},
		{name: "deny decision", cmd: `echo '{"hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"no ls today"}}'`, wantDeny: "Denied by a pre_tool_use hook: no ls today"},
		{name: "exit 2 blocks with stderr", cmd: `echo "not allowed here" >&2; exit 2`, wantDeny: "Blocked by a pre_tool_use hook: not allowed here"},
		{name: "sees the call on stdin", cmd: `in=$(cat); case "$in" in *'"hook_event_name":"pre_tool_use"'*'"tool_name":"shell","tool_input":{"command":"ls"},"tool_use_id":"c1"'*) ;; *) echo "$in" >&2; exit 2;; esac`, wantArgs: `{"command":"ls"}`},
		{name: "rewrite", cmd: `echo '{"hookSpecificOutput":{"updatedInput":{"command":"ls -la"}}}'`, wantArgs: `{"command":"ls -la"}`, wantRewritten: true},
		{name: "bad rewrite", cmd: `echo '{"hookSpecificOutput":{"updatedInput":"rm -rf /"}}'`, wantDeny: "A pre_tool_use hook failed", wantFailed: true},
		{name: "unknown decision", cmd: `echo '{"hookSpecificOutput":{"permissionDecision":"maybe"}}'`, wantDeny: "A pre_tool_use hook failed (unknown permissionDecision", wantFailed: true},
		{name: "unknown exit code", cmd: "exit 3", wantDeny: "A pre_tool_use hook failed (exited with code 3", wantFailed: true},
		{name: "garbage", cmd: "echo 'sure, go ahead'", wantDeny: "A pre_tool_use hook failed (stdout is not a JSON object", wantFailed: true},
		{name: "times out", cmd: "sleep 30", wantDeny: "A pre_tool_use hook failed (timed out after 2s)", wantFailed: true},
		{name: "crashes", cmd: "kill -SEGV $$", wantDeny: "A pre_tool_use hook failed", wantFailed: true},
		{name: "command not found", cmd: "/nonexistent/hook", wantDeny: "A pre_tool_use hook failed (exited with code 127", wantFailed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, failed := engine(t, pre(tc.cmd))
			out, rewritten, deny := e.Pre(t.Context(), toolchain.Call{ToolCall: loop.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"ls"}`}})
			if tc.wantDeny != "" {
				if !strings.HasPrefix(deny, tc.wantDeny) {
					t.Errorf("deny = %q, want prefix %q", deny, tc.wantDeny)
				}
			} else if deny != "" {
				t.Errorf("denied: %q", deny)
			} else if out.Arguments != tc.wantArgs || out.Verdict != tc.wantVerdict || rewritten != tc.wantRewritten {
				t.Errorf("call = %q verdict %v rewritten %v, want %q %v %v", out.Arguments, out.Verdict, rewritten, tc.wantArgs, tc.wantVerdict, tc.wantRewritten)
			}
			if got := len(*failed) > 0; got != tc.wantFailed {
				t.Errorf("hook_failed events: %v, want %v", *failed, tc.wantFailed)
			}
			if tc.wantFailed && len(*failed) > 0 && (!(*failed)[0].GetDenied() || (*failed)[0].GetToolCallId() != "c1") {
				t.Errorf("hook_failed = %v", (*failed)[0])
			}
		})
	}
}

func TestPreToolUseMatcher(t *testing.T) {
	e, _ := engine(t, pre("exit 2"))
	if _, _, deny := e.Pre(t.Context(), toolchain.Call{ToolCall: loop.ToolCall{Name: "read_file", Arguments: `{}`}}); deny != "" {
		t.Errorf("a shell hook ran for read_file: %q", deny)
	}
}

func TestPostToolUse(t *testing.T) {
	data := `{"hooks": {"post_tool_use": [
	  {"command": "grep -q '\"output\":\"ok\"' && echo '{\"hookSpecificOutput\":{\"additionalContext\":\"lint: 2 warnings\"}}'"},
	  {"command": "echo stderr note >&2; exit 2"},
	  {"command": "exit 7"}]}}`
	e, failed := engine(t, data)
	r := e.Post(t.Context(), toolchain.Call{ToolCall: loop.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"ls"}`}}, loop.ToolResult{Output: "ok"})
	want := "ok\n\n[post_tool_use hook]\nlint: 2 warnings\n\n[post_tool_use hook]\nstderr note"
	if r.Output != want {
		t.Errorf("output = %q, want %q", r.Output, want)
	}
	if len(*failed) != 1 || (*failed)[0].GetExitCode() != 7 || (*failed)[0].GetDenied() {
		t.Errorf("hook_failed = %v, want one for exit 7, not denying", *failed)
	}
}

// TestSandboxHookCannotLiftAsk: an allow from a sandbox-side hook (code the
// agent can rewrite) leaves an ask in place; a host-side hook's lifts it.
func TestSandboxHookCannotLiftAsk(t *testing.T) {
	allow := `echo '{"hookSpecificOutput":{"permissionDecision":"allow"}}'`
	for _, tc := range []struct {
		place string
		want  toolchain.Verdict
	}{{"sandbox", toolchain.Ask}, {"host", toolchain.Allow}} {
		e, _ := engine(t, `{"hooks": {"pre_tool_use": [{"command": `+quote(allow)+`, "place": "`+tc.place+`"}]}}`)
		e.Sandbox = e.Host // the same runner: what matters is the place
		out, _, deny := e.Pre(t.Context(), toolchain.Call{ToolCall: loop.ToolCall{Name: "shell", Arguments: `{}`}, Verdict: toolchain.Ask})
		if deny != "" || out.Verdict != tc.want {
			t.Errorf("%s hook: verdict %v (deny %q), want %v", tc.place, out.Verdict, deny, tc.want)
		}
	}
}
