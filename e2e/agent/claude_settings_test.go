package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// claudeDocsSettings is the example settings file of Claude Code's
// settings documentation, with the PreToolUse hook of its hooks guide
// (logging each Bash command; written to LOG with cat instead of jq, which
// a fresh machine may lack).
const claudeDocsSettings = `{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": [
      "Bash(npm run lint)",
      "Bash(npm run test *)",
      "Read(~/.zshrc)"
    ],
    "deny": [
      "Bash(curl *)",
      "Read(./.env)",
      "Read(./.env.*)",
      "Read(./secrets/**)"
    ]
  },
  "env": {
    "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
    "OTEL_METRICS_EXPORTER": "otlp"
  },
  "companyAnnouncements": [
    "Welcome to Acme Corp! Review our code guidelines at docs.acme.com"
  ],
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "cat >> LOG"
          }
        ]
      }
    ]
  }
}
`

// TestClaudeCodeSettings: Claude Code's documented example, as the
// operator's file, is read as it is and enforced: Bash, Read and
// path rules on fabro's tools (a Read rule keeping grep out too), an allow
// rule lifting read-only for its command, the hook run on shell calls, and
// a settings_ignored event naming each field fabro does not honour.
func TestClaudeCodeSettings(t *testing.T) {
	st := newStack(t)
	log := filepath.Join(t.TempDir(), "bash-command-log.txt")
	if err := os.WriteFile(st.settingsFile, []byte(strings.ReplaceAll(claudeDocsSettings, "LOG", log)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(st.settingsFile) })
	_, sbID := st.workspace(t, map[string]string{".env": "KEY=1\n", ".env.local": "KEY=2\n", "secrets/key": "k\n", "README.md": "hello\n"})
	st.fake.Enqueue(fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{
		{ID: "lint", Name: "shell", Arguments: args(map[string]any{"command": "npm run lint"})},
		{ID: "curl", Name: "shell", Arguments: args(map[string]any{"command": "curl -s http://127.0.0.1:1/"})},
		{ID: "ls", Name: "shell", Arguments: args(map[string]any{"command": "ls"})},
		{ID: "env", Name: "read_file", Arguments: args(map[string]any{"file_path": ".env"})},
		{ID: "envlocal", Name: "read_file", Arguments: args(map[string]any{"file_path": ".env.local"})},
		{ID: "secret", Name: "read_file", Arguments: args(map[string]any{"file_path": "secrets/key"})},
		{ID: "grep", Name: "grep", Arguments: args(map[string]any{"pattern": "k", "path": "secrets"})},
		{ID: "readme", Name: "read_file", Arguments: args(map[string]any{"file_path": "README.md"})},
	}}, fakeprovider.Turn{Text: "done"})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	outs := toolOutputs(st.prompt(t, id, "go"))
	denied := func(c string) bool {
		return outs[c].GetErrorKind() == agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED
	}
	if denied("lint") {
		t.Errorf("npm run lint (allowed by Bash(npm run lint) below the level): %q", outs["lint"].GetOutput())
	}
	for c, rule := range map[string]string{"curl": "Bash(curl *)", "env": "Read(./.env)", "envlocal": "Read(./.env.*)", "secret": "Read(./secrets/**)"} {
		if !denied(c) || !strings.Contains(outs[c].GetOutput(), `the rule "`+rule+`" (`+st.settingsFile+":") {
			t.Errorf("%s: want refused by %s, got %q", c, rule, outs[c].GetOutput())
		}
	}
	if !denied("ls") || !strings.Contains(outs["ls"].GetOutput(), "permission level read-only") {
		t.Errorf("ls (no rule, read-only): %q", outs["ls"].GetOutput())
	}
	if g := outs["grep"].GetOutput(); strings.Contains(g, "secrets/key") || !strings.Contains(g, "Read(./secrets/**)") {
		t.Errorf("grep in secrets/: %q", g)
	}
	if denied("readme") {
		t.Errorf("README.md: %q", outs["readme"].GetOutput())
	}
	// The hook ran on the shell call that ran, and only on it.
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b), `"npm run lint"`) || strings.Contains(string(b), "curl") || strings.Contains(string(b), `"ls"`) {
		t.Errorf("hook log = %q", b)
	}
	for _, want := range []string{`"env"`, `"companyAnnouncements"`, `Read(~/.zshrc)`} {
		if !hasWarning(t, st, id, want) {
			t.Errorf("no settings_ignored naming %s", want)
		}
	}
	if hasWarning(t, st, id, `"$schema"`) {
		t.Error("$schema was reported as ignored")
	}
}

// TestClaudeProjectSettings: .claude/settings.json and
// .claude/settings.local.json are project files: ignored until approved
// (a settings_ignored event with the hash to approve), then enforced.
func TestClaudeProjectSettings(t *testing.T) {
	st := newStack(t)
	local := `{"permissions": {"deny": ["Bash(rm:*)"], "defaultMode": "dontAsk", "allow": ["Bash(ls:*)"]}}`
	dir, sbID := st.workspace(t, map[string]string{".claude/settings.local.json": local, "a.txt": "a\n"})
	calls := func() {
		st.fake.Enqueue(fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{
			{ID: "rm", Name: "shell", Arguments: args(map[string]any{"command": "rm a.txt"})},
			{ID: "ls", Name: "shell", Arguments: args(map[string]any{"command": "ls -l"})},
			{ID: "cat", Name: "shell", Arguments: args(map[string]any{"command": "cat a.txt"})},
		}}, fakeprovider.Turn{Text: "done"})
	}
	// Not approved: ignored, saying so with its hash.
	unapproved := st.session(t, sbID, &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Deny: []string{"shell(rm *)"}}}, "")
	if !hasWarning(t, st, unapproved, settingsHash(local)) {
		t.Error("no settings_ignored with the unapproved file's hash")
	}
	// Approved: Bash(rm:*) denies, dontAsk refuses what no rule allows, ls runs.
	calls()
	id := st.session(t, sbID, nil, settingsHash(local))
	outs := toolOutputs(st.prompt(t, id, "go"))
	if o := outs["rm"].GetOutput(); !strings.Contains(o, `the rule "Bash(rm:*)"`) {
		t.Errorf("rm: %q", o)
	}
	if o := outs["cat"].GetOutput(); !strings.Contains(o, "default_mode deny_unless_allowed") {
		t.Errorf("cat under dontAsk: %q", o)
	}
	if outs["ls"].GetIsError() {
		t.Errorf("ls: %q", outs["ls"].GetOutput())
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err != nil {
		t.Errorf("a.txt: %v", err)
	}
}
