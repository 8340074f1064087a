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

// What a command form gets under a deny rule shell(rm *).
const (
	refused = "refused" // denied by the rule, naming it
	asked   = "asked"   // dynamic: asked (and denied by the test's answer)
	runs    = "runs"    // neither: it runs
)

// What it does under allow rules at the read-only level.
const (
	deleted = "deleted" // allowed: it ran and deleted its file
	kept    = "kept"    // not allowed: the level refused it, the file is there
	either  = ""        // not checked (the wrapper may be missing here, or runs in the background)
)

// commandForms are shell lines that each delete the file F (or try to):
// what a deny rule must refuse or ask for, and what allow rules let run.
var commandForms = []struct {
	cmd        string
	underDeny  string
	underAllow string
}{
	// The 16 forms of the issue.
	{"ls && rm -rf F", refused, deleted},
	{"rm F", refused, deleted},
	{"echo hi; rm F", refused, deleted},
	{"  rm   F", refused, deleted},
	{"true || rm F", refused, either},
	{"echo $(rm F)", refused, deleted},
	{"echo `rm F`", refused, deleted},
	{"bash -c 'rm F'", refused, deleted},
	{`sh -c "rm F"`, refused, deleted},
	{"FOO=1 rm F", refused, deleted},
	{"env rm F", refused, deleted},
	{"/bin/rm F", refused, deleted},
	{"command rm F", refused, deleted},
	{`\rm F`, refused, deleted},
	{"(rm F)", refused, deleted},
	{"echo F | xargs rm", refused, deleted},
	// Quotes and escapes.
	{"'rm' F", refused, deleted},
	{`"rm" F`, refused, deleted},
	{"r''m F", refused, deleted},
	{`r\m F`, refused, deleted},
	{"rm -- F", refused, deleted},
	// Compound commands and functions.
	{"{ rm F; }", refused, deleted},
	{"if true; then rm F; fi", refused, deleted},
	{"for f in F; do rm $f; done", refused, deleted},
	{"while true; do rm F; break; done", refused, kept},
	{"case a in a) rm F;; esac", refused, deleted},
	{"f() { rm F; }; f", refused, kept},
	{"! rm F", refused, deleted},
	{"echo start\nrm F", refused, deleted},
	{"echo hi && (cd . && rm F)", refused, deleted},
	{"rm F &", refused, either},
	// Substitutions.
	{"cat <(rm F)", refused, deleted},
	{"x=$(rm F)", refused, deleted},
	{"echo $(echo $(rm F))", refused, deleted},
	{`echo "$(rm F)"`, refused, deleted},
	// Wrappers with their options.
	{"nice -n 5 rm F", refused, deleted},
	{"nohup rm F", refused, deleted},
	{"timeout 5 rm F", refused, deleted},
	{"timeout -s KILL 5 rm F", refused, deleted},
	{"time rm F", refused, deleted},
	{"stdbuf -oL rm F", refused, deleted},
	{"env -i PATH=/usr/bin:/bin rm F", refused, deleted},
	{"env -- rm F", refused, deleted},
	{"exec rm F", refused, deleted},
	{"setsid rm F", refused, either},
	{"builtin rm F", refused, either},
	{"sudo rm F", refused, either},
	{"sudo -u root rm F", refused, either},
	{"doas rm F", refused, either},
	{"busybox rm F", refused, either},
	{"printf '%s\\n' F | xargs -I{} rm {}", refused, deleted},
	{"env FOO=1 nice timeout 5 /usr/bin/rm F", refused, deleted},
	// Shells given the command.
	{"bash -lc 'rm F'", refused, deleted},
	{`sh -c 'sh -c "rm F"'`, refused, deleted},
	{"bash <<< 'rm F'", refused, deleted},
	{"bash <<EOF\nrm F\nEOF", refused, deleted},
	{"eval 'rm F'", refused, kept},
	{"find . -name F -exec rm {} \\;", refused, kept},
	{`sh -c "rm $0" F`, refused, kept},
	// Dynamic: no name to match.
	{"$(echo rm) F", asked, kept},
	{"c=rm; $c F", asked, kept},
	{`eval "$(echo rm F)"`, asked, kept},
	{"echo rm F | sh", asked, kept},
	{"echo rm F | bash", asked, kept},
	{`sh -c "$(echo rm) F"`, asked, kept},
	{`python3 -c 'import os; os.remove("F")'`, asked, kept},
	{`perl -e 'unlink "F"'`, asked, kept},
	{`node -e 'require("fs").unlinkSync("F")'`, asked, kept},
	{"find . -name F -delete", asked, kept},
	{"echo 'rm F' > F.sh; bash F.sh", asked, kept},
	{"echo 'rm F' > F.sh; source F.sh", asked, kept},
	{`awk 'BEGIN{system("rm F")}'`, asked, kept},
	{"{rm,F}", asked, kept},
	{"/bin/r? F", asked, kept},
	{`$'\x72m' F`, asked, kept},
	{"alias r=rm; r F", asked, kept},
	// Found by attacking the parser (they ran and deleted the file).
	{"time -- rm F", refused, deleted},
	{"trap -- 'rm F' EXIT", refused, either},
	{"echo F | xargs -l rm", refused, deleted},
	{"flock F.lock rm F", refused, deleted},
	{"echo rm F | xargs xargs", asked, kept},
	{"echo 'rm F' | xargs -0 sh -c", asked, kept},
	{"hash -p /bin/rm r; r F", asked, kept},
	// Not commands of rm: they run.
	{"echo rm F", runs, either},
	{"ls F", runs, either},
	{`printf '%s\n' "rm F"`, runs, either},
}

// formFile is the file form i deletes.
func formFile(i int) string { return fmt.Sprintf("f%02d", i) }

// runForms runs every form as one shell call in one turn of a session and
// returns the calls' results and the calls that were asked about (each
// answered DENY).
func runForms(t *testing.T, st *stack, level agentv1.PermissionLevel, rules *agentv1.PermissionRules) (dir string, outs map[string]*agentv1.ToolCallCompleted, askedIDs map[string]bool) {
	t.Helper()
	files := map[string]string{}
	var calls []fakeprovider.ToolCall
	for i, f := range commandForms {
		files[formFile(i)] = "keep me\n"
		calls = append(calls, fakeprovider.ToolCall{ID: fmt.Sprintf("c%02d", i), Name: "shell",
			Arguments: args(map[string]any{"command": strings.ReplaceAll(f.cmd, "F", formFile(i))})})
	}
	dir, sbID := st.workspace(t, files)
	st.fake.Enqueue(fakeprovider.Turn{ToolCalls: calls}, fakeprovider.Turn{Text: "done"})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: level, Settings: &agentv1.ToolSettings{Permissions: rules},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	askedIDs = map[string]bool{}
	evs := promptWithApprovals(t, st, id, "delete them", func(ar *agentv1.ApprovalRequested) {
		askedIDs[ar.GetToolCallId()] = true
		if _, err := st.agent.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: ar.GetApprovalId(),
			Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY}); err != nil {
			t.Errorf("Approve: %v", err)
		}
	})
	return dir, toolOutputs(evs), askedIDs
}

func fileExists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// TestCommandFormsUnderDenyAndAsk: every form of a command the shell would
// run is refused by shell(rm *) naming the rule, or asked when no rule can
// name it, and its file survives; the same forms under an ask rule are all
// asked; forms that do not run rm run.
func TestCommandFormsUnderDenyAndAsk(t *testing.T) {
	if len(commandForms) < 60 {
		t.Fatalf("%d forms, want at least 60", len(commandForms))
	}
	st := newStack(t)
	for _, mode := range []string{"deny", "ask"} {
		t.Run(mode, func(t *testing.T) {
			rules := &agentv1.PermissionRules{Deny: []string{"shell(rm *)"}}
			if mode == "ask" {
				rules = &agentv1.PermissionRules{Ask: []string{"shell(rm *)"}}
			}
			dir, outs, askedIDs := runForms(t, st, agentv1.PermissionLevel_PERMISSION_LEVEL_FULL, rules)
			for i, f := range commandForms {
				id, file := fmt.Sprintf("c%02d", i), formFile(i)
				c := outs[id]
				want := f.underDeny
				if mode == "ask" && want == refused {
					want = asked
				}
				denied := c.GetIsError() && c.GetErrorKind() == agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED
				switch want {
				case refused:
					if !denied || askedIDs[id] || !strings.Contains(c.GetOutput(), `the rule "shell(rm *)" (CreateSession.settings)`) {
						t.Errorf("%q: want refused naming the rule, got asked=%v %q", f.cmd, askedIDs[id], c.GetOutput())
					}
				case asked:
					if !askedIDs[id] || !denied {
						t.Errorf("%q: want asked (then denied), got asked=%v %q", f.cmd, askedIDs[id], c.GetOutput())
					}
				case runs:
					if denied || askedIDs[id] {
						t.Errorf("%q: want it to run, got asked=%v %q", f.cmd, askedIDs[id], c.GetOutput())
					}
				}
				if !fileExists(dir, file) {
					t.Errorf("%q: %s was deleted", f.cmd, file)
				}
			}
		})
	}
}

// TestCommandFormsUnderAllow: at read-only, allow rules let the forms run
// whose every command they name (wrappers and shells see-through), and
// nothing dynamic: those the level refuses, without asking.
func TestCommandFormsUnderAllow(t *testing.T) {
	st := newStack(t)
	rules := &agentv1.PermissionRules{Allow: []string{"shell(rm *)", "shell(ls *)", "shell(echo *)", "shell(cat *)",
		"shell(printf *)", "shell(cd *)", "shell(true)"}}
	dir, outs, askedIDs := runForms(t, st, agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY, rules)
	for i, f := range commandForms {
		id, file := fmt.Sprintf("c%02d", i), formFile(i)
		c := outs[id]
		if askedIDs[id] {
			t.Errorf("%q: asked; no rule asks", f.cmd)
		}
		switch f.underAllow {
		case deleted:
			if fileExists(dir, file) {
				t.Errorf("%q: allowed, but %s is still there: %q", f.cmd, file, c.GetOutput())
			}
		case kept:
			if !fileExists(dir, file) {
				t.Errorf("%q: %s was deleted", f.cmd, file)
			}
			if !c.GetIsError() || !strings.Contains(c.GetOutput(), "not allowed at permission level read-only") {
				t.Errorf("%q: want the level's refusal, got %q", f.cmd, c.GetOutput())
			}
		}
	}
}
