package toolchain

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/permission"
)

// recorder is a link that notes its name and does what its action says.
func recorder(name string, trace *[]string, act func(ctx context.Context, c Call, next Next) (loop.ToolResult, bool)) Middleware {
	return func(ctx context.Context, c Call, next Next) loop.ToolResult {
		*trace = append(*trace, name)
		if act != nil {
			if r, done := act(ctx, c, next); done {
				return r
			}
		}
		return next(ctx, c)
	}
}

func TestChainOrderAndOutcomes(t *testing.T) {
	echo := func(trace *[]string) Next {
		return func(_ context.Context, c Call) loop.ToolResult {
			*trace = append(*trace, "tool")
			return loop.ToolResult{Output: c.Name + " " + c.Arguments}
		}
	}
	tests := []struct {
		name      string
		second    func(ctx context.Context, c Call, next Next) (loop.ToolResult, bool)
		wantTrace []string
		want      loop.ToolResult
	}{
		{"allow", nil, []string{"level", "rules", "hooks", "approval", "tool"}, loop.ToolResult{Output: "t {}"}},
		{"deny", func(context.Context, Call, Next) (loop.ToolResult, bool) { return Denied("no"), true },
			[]string{"level", "rules"}, loop.ToolResult{Output: "no", IsError: true, Kind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED}},
		{"rewrite", func(ctx context.Context, c Call, next Next) (loop.ToolResult, bool) {
			c.Arguments = `{"x":1}`
			return next(ctx, c), true
		}, []string{"level", "rules", "hooks", "approval", "tool"}, loop.ToolResult{Output: `t {"x":1}`}},
		{"replace", func(ctx context.Context, c Call, next Next) (loop.ToolResult, bool) {
			r := next(ctx, c)
			r.Output = strings.ToUpper(r.Output)
			return r, true
		}, []string{"level", "rules", "hooks", "approval", "tool"}, loop.ToolResult{Output: "T {}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var trace []string
			chain := Build(echo(&trace),
				recorder("level", &trace, nil),
				recorder("rules", &trace, tc.second),
				recorder("hooks", &trace, nil),
				recorder("approval", &trace, nil))
			got := chain(t.Context(), Call{ToolCall: loop.ToolCall{ID: "1", Name: "t", Arguments: "{}"}})
			if diff := cmp.Diff(tc.wantTrace, trace); diff != "" {
				t.Errorf("trace (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

type fakeHooks struct {
	trace   *[]string
	rewrite string
	verdict Verdict
	deny    string
	add     string
}

func (h fakeHooks) Pre(_ context.Context, c Call) (Call, bool, string) {
	*h.trace = append(*h.trace, "pre")
	if h.verdict != Undecided {
		c.Verdict = h.verdict
	}
	if h.rewrite != "" {
		c.Arguments = h.rewrite
		return c, true, h.deny
	}
	return c, false, h.deny
}

func (h fakeHooks) Post(_ context.Context, _ Call, r loop.ToolResult) loop.ToolResult {
	*h.trace = append(*h.trace, "post")
	r.Output += h.add
	return r
}

type fakeApprover struct {
	trace *[]string
	ok    bool
}

func (a fakeApprover) Approve(_ context.Context, c Call) (bool, string) {
	*a.trace = append(*a.trace, "approve:"+c.Reason)
	return a.ok, "the user said no"
}

// TestRealLinks runs the real links in the session's order.
func TestRealLinks(t *testing.T) {
	rule := func(e permission.Effect, text string) *permission.Rule {
		r, err := permission.Parse(e, text)
		if err != nil {
			t.Fatal(err)
		}
		r.Source = "settings.json:3"
		return r
	}
	tests := []struct {
		name      string
		level     string
		rules     []*permission.Rule
		mode      permission.Mode
		hooks     fakeHooks
		approve   bool
		args      string
		wantTrace []string
		wantOut   string
		wantErr   bool
	}{
		{name: "level denies first", level: "not at read-only", rules: []*permission.Rule{rule(permission.Ask, "shell")},
			args: `{"command":"ls"}`, wantTrace: nil, wantOut: "not at read-only", wantErr: true},
		{name: "allow rule lifts the level", level: "not at read-only", rules: []*permission.Rule{rule(permission.Allow, "shell(git status)")},
			args: `{"command":"git status"}`, wantTrace: []string{"pre", "tool", "post"}, wantOut: `shell {"command":"git status"}`},
		{name: "allow rule lifts only what it names", level: "not at read-only", rules: []*permission.Rule{rule(permission.Allow, "shell(git status)")},
			args: `{"command":"git push"}`, wantTrace: nil, wantOut: "not at read-only", wantErr: true},
		{name: "deny_unless_allowed refuses the rest", rules: []*permission.Rule{rule(permission.Allow, "shell(ls *)")}, mode: permission.ModeDenyUnlessAllowed,
			args: `{"command":"cat x"}`, wantTrace: nil, wantOut: "Permission denied: this call of shell is forbidden by default_mode deny_unless_allowed (settings.json)", wantErr: true},
		{name: "default_mode ask asks the rest", rules: []*permission.Rule{rule(permission.Allow, "shell(ls *)")}, mode: permission.ModeAsk, approve: true,
			args: `{"command":"cat x"}`, wantTrace: []string{"pre", "approve:default_mode ask (settings.json): no allow rule matches this call", "tool", "post"}, wantOut: `shell {"command":"cat x"}`},
		{name: "default_mode ask runs what is allowed", rules: []*permission.Rule{rule(permission.Allow, "shell(ls *)")}, mode: permission.ModeAsk,
			args: `{"command":"ls -l"}`, wantTrace: []string{"pre", "tool", "post"}, wantOut: `shell {"command":"ls -l"}`},
		{name: "deny rule before hooks", rules: []*permission.Rule{rule(permission.Deny, "shell(rm *)")},
			args: `{"command":"rm -rf /"}`, wantTrace: nil, wantOut: `Permission denied: this call of shell is forbidden by the rule "shell(rm *)" (settings.json:3), which matches "rm -rf /"`, wantErr: true},
		{name: "ask rule asks after hooks", rules: []*permission.Rule{rule(permission.Ask, "shell")}, approve: true,
			args: `{"command":"ls"}`, wantTrace: []string{"pre", "approve:the rule \"shell\" (settings.json:3)", "tool", "post"}, wantOut: `shell {"command":"ls"}`},
		{name: "ask denied", rules: []*permission.Rule{rule(permission.Ask, "shell")},
			args: `{"command":"ls"}`, wantTrace: []string{"pre", "approve:the rule \"shell\" (settings.json:3)"}, wantOut: "the user said no", wantErr: true},
		{name: "hook denies", hooks: fakeHooks{deny: "blocked by hook"},
			args: `{"command":"ls"}`, wantTrace: []string{"pre"}, wantOut: "blocked by hook", wantErr: true},
		{name: "hook allow skips ask", rules: []*permission.Rule{rule(permission.Ask, "shell")}, hooks: fakeHooks{verdict: Allow},
			args: `{"command":"ls"}`, wantTrace: []string{"pre", "tool", "post"}, wantOut: `shell {"command":"ls"}`},
		{name: "hook rewrite rechecked by rules", rules: []*permission.Rule{rule(permission.Deny, "shell(rm *)")}, hooks: fakeHooks{rewrite: `{"command":"rm -rf /"}`},
			args: `{"command":"ls"}`, wantTrace: []string{"pre"}, wantOut: "Permission denied", wantErr: true},
		{name: "hook rewrite runs", hooks: fakeHooks{rewrite: `{"command":"ls -l"}`},
			args: `{"command":"ls"}`, wantTrace: []string{"pre", "tool", "post"}, wantOut: `shell {"command":"ls -l"}`},
		{name: "post hook adds", hooks: fakeHooks{add: "\nmore"},
			args: `{"command":"ls"}`, wantTrace: []string{"pre", "tool", "post"}, wantOut: "shell {\"command\":\"ls\"}\nmore"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var trace []string
			tc.hooks.trace = &trace
			var rs permission.Set
			rs.Add(tc.rules...)
			rs.Mode, rs.ModeSource = tc.mode, "settings.json"
			rules := Rules(&rs, "/work", func(string) string { return tc.level }, nil)
			chain := Build(func(_ context.Context, c Call) loop.ToolResult {
				trace = append(trace, "tool")
				return loop.ToolResult{Output: c.Name + " " + c.Arguments}
			},
				rules,
				HookLink(tc.hooks, rules),
				Approval(fakeApprover{trace: &trace, ok: tc.approve}))
			got := chain(t.Context(), Call{ToolCall: loop.ToolCall{ID: "1", Name: "shell", Arguments: tc.args}})
			if diff := cmp.Diff(tc.wantTrace, trace); diff != "" {
				t.Errorf("trace (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(got.Output, tc.wantOut) || got.IsError != tc.wantErr {
				t.Errorf("result = %q (error %v), want prefix %q (error %v)", got.Output, got.IsError, tc.wantOut, tc.wantErr)
			}
			if tc.wantErr && got.Kind != agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED {
				t.Errorf("kind = %v, want DENIED", got.Kind)
			}
		})
	}
}
