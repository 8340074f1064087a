package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// linkedWorkspace is a workspace with secret/s.txt and links into secret/
// of every kind: to the file, to the directory, chained, absolute, and
// relative through "..".
func linkedWorkspace(t *testing.T, st *stack) (dir, sbID string) {
	t.Helper()
	dir, sbID = st.workspace(t, map[string]string{"secret/s.txt": "top secret\n", "pub/p.txt": "public\n"})
	for link, target := range map[string]string{
		"flink":   "secret/s.txt",
		"dlink":   "secret",
		"chain":   "dlink",
		"abslink": filepath.Join(dir, "secret"),
		"pub/up":  "../secret",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, sbID
}

// TestLinksIntoDeniedTree: with a read rule and an edit rule on secret/**,
// every tool that reads or writes is refused through every kind of link
// (naming the rule and where the path leads), and searches and listings
// show nothing of secret/ however they reach it; the tree is unchanged.
func TestLinksIntoDeniedTree(t *testing.T) {
	st := newStack(t)
	dir, sbID := linkedWorkspace(t, st)
	rules := &agentv1.PermissionRules{Deny: []string{"read_file(secret/**)", "edit_file(secret/**)"}}
	abs := func(p string) string { return filepath.Join(dir, p) }

	type call struct {
		tool string
		args map[string]any
		// refused: denied naming the rule and (through a link) where the
		// path leads; else it runs and its output must not show the secret.
		refused bool
		leads   string
	}
	var calls []call
	for _, p := range []string{"flink", "dlink/s.txt", "chain/s.txt", "abslink/s.txt", "pub/up/s.txt", abs("flink"), abs("chain/s.txt")} {
		calls = append(calls,
			call{tool: "read_file", args: map[string]any{"file_path": p}, refused: true, leads: "secret/s.txt"},
			call{tool: "write_file", args: map[string]any{"file_path": p, "content": "pwned\n"}, refused: true, leads: "secret/s.txt"},
			call{tool: "edit_file", args: map[string]any{"file_path": p, "old_string": "top", "new_string": "pwned"}, refused: true, leads: "secret/s.txt"},
		)
	}
	calls = append(calls,
		call{tool: "read_file", args: map[string]any{"file_path": "secret/s.txt"}, refused: true},
		call{tool: "write_file", args: map[string]any{"file_path": "dlink/new.txt", "content": "x"}, refused: true, leads: "secret/new.txt"},
		call{tool: "write_file", args: map[string]any{"file_path": "pub/up/new.txt", "content": "x"}, refused: true, leads: "secret/new.txt"},
		call{tool: "read_many_files", args: map[string]any{"paths": []string{"pub/p.txt", "chain/s.txt"}}, refused: true, leads: "secret/s.txt"},
		call{tool: "grep", args: map[string]any{"pattern": "secret", "path": "dlink"}},
		call{tool: "grep", args: map[string]any{"pattern": "secret"}},
		call{tool: "glob", args: map[string]any{"pattern": "**/*.txt"}},
		call{tool: "glob", args: map[string]any{"pattern": "*", "path": "chain"}},
		call{tool: "list_dir", args: map[string]any{"path": "dlink"}},
		call{tool: "list_dir", args: map[string]any{"path": "secret"}},
	)
	var tcs []fakeprovider.ToolCall
	for i, c := range calls {
		tcs = append(tcs, fakeprovider.ToolCall{ID: fmt.Sprintf("l%02d", i), Name: c.tool, Arguments: args(c.args)})
	}
	st.fake.Enqueue(fakeprovider.Turn{ToolCalls: tcs}, fakeprovider.Turn{Text: "done"})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL, Settings: &agentv1.ToolSettings{Permissions: rules},
	})
	if err != nil {
		t.Fatal(err)
	}
	outs := toolOutputs(st.prompt(t, created.GetSession().GetSessionId(), "read the secret"))
	for i, c := range calls {
		o := outs[fmt.Sprintf("l%02d", i)]
		if o == nil {
			t.Fatalf("%s %v: no result", c.tool, c.args)
		}
		switch {
		case c.refused:
			rule := `"read_file(secret/**)"`
			if c.tool != "read_file" && c.tool != "read_many_files" {
				rule = `"edit_file(secret/**)"`
			}
			if o.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED || !strings.Contains(o.GetOutput(), rule) {
				t.Errorf("%s %v: want refused by %s, got %q", c.tool, c.args, rule, o.GetOutput())
			}
			if c.leads != "" && !strings.Contains(o.GetOutput(), fmt.Sprintf("%q, where", c.leads)) {
				t.Errorf("%s %v: the refusal does not name where the path leads (%s): %q", c.tool, c.args, c.leads, o.GetOutput())
			}
		default:
			if o.GetIsError() || strings.Contains(o.GetOutput(), "top secret") || strings.Contains(o.GetOutput(), "s.txt") {
				t.Errorf("%s %v: shows the secret or failed: %q", c.tool, c.args, o.GetOutput())
			}
			if !strings.Contains(o.GetOutput(), "not shown: the rule \"read_file(secret/**)\"") {
				t.Errorf("%s %v: does not say what it hid and why: %q", c.tool, c.args, o.GetOutput())
			}
		}
	}
	if b, err := os.ReadFile(abs("secret/s.txt")); err != nil || string(b) != "top secret\n" {
		t.Errorf("secret/s.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(abs("secret/new.txt")); err == nil {
		t.Error("secret/new.txt was written through a link")
	}

	// apply_patch (the openai profile's): each file of the patch is judged
	// where it leads.
	st.fake.Enqueue(fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{
		{ID: "p1", Name: "apply_patch", Arguments: args(map[string]any{"patch": "*** Begin Patch\n*** Add File: pub/ok.txt\n+fine\n*** Update File: chain/s.txt\n@@\n-top secret\n+pwned\n*** End Patch\n"})},
		{ID: "p2", Name: "apply_patch", Arguments: args(map[string]any{"patch": "*** Begin Patch\n*** Add File: pub/up/added.txt\n+x\n*** End Patch\n"})},
		{ID: "p3", Name: "apply_patch", Arguments: args(map[string]any{"patch": "*** Begin Patch\n*** Add File: pub/ok.txt\n+fine\n*** End Patch\n"})},
	}}, fakeprovider.Turn{Text: "done"})
	id := st.session(t, sbID, &agentv1.ToolSettings{Permissions: rules}, "")
	outs = toolOutputs(st.prompt(t, id, "patch"))
	for _, c := range []string{"p1", "p2"} {
		if o := outs[c]; o.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED || !strings.Contains(o.GetOutput(), `"edit_file(secret/**)"`) {
			t.Errorf("apply_patch %s: %q", c, o.GetOutput())
		}
	}
	if o := outs["p3"]; o.GetIsError() {
		t.Errorf("apply_patch outside secret/ failed: %q", o.GetOutput())
	}
	if b, _ := os.ReadFile(abs("secret/s.txt")); string(b) != "top secret\n" {
		t.Errorf("secret/s.txt = %q after apply_patch", b)
	}
	if _, err := os.Stat(abs("secret/added.txt")); err == nil {
		t.Error("apply_patch added a file in secret/ through a link")
	}
}
