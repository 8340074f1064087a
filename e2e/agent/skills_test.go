package agent_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestSkills discovers SKILL.md files in two directories (the later
// overriding the earlier, bad ones skipped with reasons), lists them in the
// snapshot, the skills_discovered event and the system prompt, expands a
// "/name rest" prompt, and activates one through use_skill.
func TestSkills(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, map[string]string{
		"skills/review/SKILL.md":     "---\nname: review\ndescription: old review\n---\nOld body.\n",
		"skills/noname/SKILL.md":     "---\ndescription: nameless\n---\nbody\n",
		"skills/plain/SKILL.md":      "no front matter\n",
		"skills/notes.txt":           "not a skill directory\n",
		"more/review/SKILL.md":       "---\nname: review\ndescription: \"Review code for bugs\"\n---\n\nReview {{user_input}} carefully.\n",
		"more/release/SKILL.md":      "---\nname: release\ndescription: Cut a release\n---\nBump the version.\n",
		"more/unterminated/SKILL.md": "---\nname: x\ndescription: y\n",
	})
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "u1", Name: "use_skill", Arguments: args(map[string]any{"skill_name": "release"})}}},
		fakeprovider.Turn{Text: "reviewed"},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
		Options:         &agentv1.AgentOptions{SkillDirs: []string{"skills", "more", "missing"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	snap, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	wantSkills := []*agentv1.Skill{
		{Name: "review", Description: "Review code for bugs", Path: "more/review/SKILL.md"},
		{Name: "release", Description: "Cut a release", Path: "more/release/SKILL.md"},
	}
	if diff := cmp.Diff(wantSkills, snap.GetSnapshot().GetSkills(), protocmp.Transform(),
		protocmp.SortRepeated(func(a, b *agentv1.Skill) bool { return a.GetName() < b.GetName() })); diff != "" {
		t.Errorf("snapshot skills (-want +got):\n%s", diff)
	}
	sys := snap.GetSnapshot().GetSystemPrompt()
	if !strings.Contains(sys, "# Available Skills") || !strings.Contains(sys, "- review: Review code for bugs") || strings.Contains(sys, "old review") {
		t.Errorf("system prompt skills section:\n%s", sys)
	}
	if !slices.ContainsFunc(snap.GetSnapshot().GetTools(), func(tl *agentv1.SessionTool) bool {
		return tl.GetDefinition().GetName() == "use_skill" && tl.GetAllowed()
	}) {
		t.Error("use_skill is not offered")
	}
	disc := st.streamEvents(t, id, 1)[1].GetSkillsDiscovered()
	reasons := map[string]string{}
	for _, sk := range disc.GetSkipped() {
		reasons[sk.GetPath()] = sk.GetReason()
	}
	wantReasons := map[string]string{
		"skills/review/SKILL.md": "duplicate", "skills/noname/SKILL.md": "missing_name", "skills/plain/SKILL.md": "missing_front_matter",
		"more/unterminated/SKILL.md": "unterminated_front_matter", "missing": "unreadable_dir",
	}
	if diff := cmp.Diff(wantReasons, reasons); diff != "" || len(disc.GetSkills()) != 2 {
		t.Errorf("skills_discovered %v; skipped reasons (-want +got):\n%s", disc, diff)
	}

	evs := st.prompt(t, id, "/review main.go")
	var activated []string
	var input, useOut string
	for _, ev := range evs {
		if a := ev.GetSkillActivated(); a != nil {
			activated = append(activated, a.GetSkillName()+" "+a.GetSource().String())
		}
		if u := ev.GetUserInput(); u != nil {
			input = u.GetText()
		}
		if c := ev.GetToolCallCompleted(); c != nil {
			useOut = c.GetOutput()
		}
	}
	if want := []string{"review SKILL_SOURCE_SLASH", "release SKILL_SOURCE_TOOL"}; !cmp.Equal(activated, want) {
		t.Errorf("skill_activated %v, want %v", activated, want)
	}
	if input != "Review main.go carefully.\n" {
		t.Errorf("user_input %q, want the expanded skill", input)
	}
	if useOut != "Bump the version.\n" {
		t.Errorf("use_skill output %q", useOut)
	}
	if reqs := st.fake.Requests(); len(reqs) == 0 || !strings.Contains(string(reqs[0].Body), "Review main.go carefully.") {
		t.Error("the model did not get the expanded skill")
	}
	if evs := st.promptText(t, id, "/unknown stays as typed"); !slices.ContainsFunc(evs, func(ev *agentv1.AgentEvent) bool {
		return ev.GetUserInput().GetText() == "/unknown stays as typed"
	}) {
		t.Error("an unknown /name should be sent as typed")
	}
}

// promptText runs a prompt answered with a canned text.
func (st *stack) promptText(t *testing.T, id, text string) []*agentv1.AgentEvent {
	st.fake.Enqueue(fakeprovider.Turn{Text: "ok"})
	return st.prompt(t, id, text)
}
