package settings

import (
	"errors"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/permission"
)

func TestBadFiles(t *testing.T) {
	tests := []struct {
		name, data string
		line       int
		rule       string
	}{
		{"syntax", "{\n  \"permissions\": {\n    \"deny\": [\"shell\",]\n  }\n}\n", 3, ""},
		{"type", "{\n  \"permissions\": {\n    \"deny\": \"shell\"\n  }\n}\n", 3, ""},
		{"bad default mode", "{\n  \"permissions\": {\n    \"default_mode\": \"sometimes\"}}", 3, "sometimes"},
		{"bad claude hook matcher", "{\"hooks\": {\"PreToolUse\": [\n {\"matcher\": \"Bash(\", \"hooks\": []}]}}", 2, "Bash("},
		{"bad rule", "{\n  \"permissions\": {\n    \"allow\": [\"read_file\",\n      \"shell(git *\"]\n  }\n}\n", 4, "shell(git *"},
		{"bad hook event", "{\n  \"hooks\": {\n    \"before_tool\": []\n  }\n}\n", 3, "before_tool"},
		{"bad hook place", "{\"hooks\": {\"pre_tool_use\": [\n {\"command\": \"x\",\n \"place\": \"moon\"}]}}", 3, "x"},
		{"bad hook timeout", "{\"hooks\": {\"pre_tool_use\": [\n {\"command\": \"x\", \"timeout\": \"soon\"}]}}", 2, "x"},
		{"empty hook command", "{\"hooks\": {\"pre_tool_use\": [\n {\"matcher\": \"shell\"}]}}", 0, ""},
		{"bad matcher", "{\"hooks\": {\"pre_tool_use\": [\n {\"matcher\": \"sh(\", \"command\": \"y\"}]}}", 2, "y"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pf, err := Parse("/etc/fabro/settings.json", []byte(tc.data))
			if err == nil {
				_, err = Build(Layer{Source: "/etc/fabro/settings.json", Settings: pf.Settings, Data: []byte(tc.data)})
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *settings.Error", err)
			}
			if se.File != "/etc/fabro/settings.json" || se.Line != tc.line || se.Rule != tc.rule {
				t.Errorf("error %q names %s:%d rule %q, want line %d rule %q", se, se.File, se.Line, se.Rule, tc.line, tc.rule)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	user := "{\n \"permissions\": {\"allow\": [\"shell(git *)\"]},\n \"approval_timeout\": \"1m\",\n \"hooks\": {\"prompt_end\": [{\"command\": \"b\"}], \"pre_tool_use\": [{\"command\": \"a\", \"matcher\": \"shell|write_*\", \"timeout\": \"5s\", \"place\": \"sandbox\"}]},\n \"trusted_project_settings\": [\"abc\"]\n}"
	pf, err := Parse("user.json", []byte(user))
	if err != nil {
		t.Fatal(err)
	}
	ts, trusted := pf.Settings, pf.Trusted
	if len(trusted) != 1 || trusted[0] != "abc" {
		t.Errorf("trusted = %v", trusted)
	}
	req := &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Deny: []string{"shell(git push*)"}}}
	p, err := Build(Layer{Source: "user.json", Settings: ts, Data: []byte(user)}, Layer{Source: "CreateSession", Settings: req})
	if err != nil {
		t.Fatal(err)
	}
	if p.ApprovalTimeout.String() != "1m0s" {
		t.Errorf("approval timeout %v", p.ApprovalTimeout)
	}
	if d := p.Rules.Decide("shell", permission.SubjectOf("shell", `{"command":"git push"}`, "")); d.Effect != permission.Deny || d.Rule.Source != "CreateSession" {
		t.Errorf("git push: %+v", d)
	}
	if d := p.Rules.Decide("shell", permission.SubjectOf("shell", `{"command":"git status"}`, "")); d.Effect != permission.Allow || d.Rule.Source != "user.json:2" {
		t.Errorf("git status: %+v", d)
	}
	if len(p.Hooks) != 2 || p.Hooks[0].Command != "b" || p.Hooks[1].Command != "a" {
		t.Fatalf("hooks not in file order: %+v", p.Hooks)
	}
	h := p.Hooks[1]
	if !h.Matches("shell") || !h.Matches("write_file") || h.Matches("read_file") || h.Timeout.String() != "5s" || h.Place != agentv1.HookPlace_HOOK_PLACE_SANDBOX {
		t.Errorf("hook a: %+v", h)
	}
}
