package agent_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

var spawnedID = regexp.MustCompile(`Subagent (s_[0-9a-f]+) started`)

// TestSubagents runs a parent that spawns a child, waits for it and
// answers with its result. It checks the tools offered, the sub_agent_*
// events, the child's events on the parent's Prompt stream (without
// deltas), and StreamEvents with include_subagents.
func TestSubagents(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, map[string]string{"a.txt": "alpha\n"})
	st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		body := string(r.Body)
		switch {
		case !strings.Contains(body, "PARENT-PROMPT"): // the child
			return fakeprovider.Turn{Text: "child says alpha", ChunkRunes: 3}
		case strings.Contains(body, "completed (success: true, turns: 1)"):
			return fakeprovider.Turn{Text: "parent done"}
		case spawnedID.MatchString(body):
			id := spawnedID.FindStringSubmatch(body)[1]
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "w1", Name: "wait", Arguments: args(map[string]any{"agent_id": id})}}}
		}
		return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "sp1", Name: "spawn_agent", Arguments: args(map[string]any{"task": "CHILD-TASK: say alpha"})}}}
	})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY,
		Options:         &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	snap, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	var allowed []string
	for _, tl := range snap.GetSnapshot().GetTools() {
		if tl.GetAllowed() {
			allowed = append(allowed, tl.GetDefinition().GetName())
		}
	}
	for _, name := range []string{"spawn_agent", "send_input", "wait", "close_agent"} {
		if !slices.Contains(allowed, name) {
			t.Errorf("read-only session with subagents: allowed tools %v lack %s", allowed, name)
		}
	}

	evs := st.prompt(t, id, "PARENT-PROMPT: delegate")
	rep := lastReport(t, evs)
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetOutput() != "parent done" {
		t.Fatalf("report = %v", rep)
	}
	var childID string
	var parentTypes, childTypes []string
	var waitOut string
	for _, ev := range evs {
		if ev.GetSessionId() == id {
			parentTypes = append(parentTypes, eventType(ev))
		} else {
			childTypes = append(childTypes, eventType(ev))
			if ev.GetParentSessionId() != id || ev.GetRootSessionId() != id {
				t.Errorf("child envelope %v", ev)
			}
		}
		if sp := ev.GetSubAgentSpawned(); sp != nil {
			childID = sp.GetChildSessionId()
			if sp.GetToolCallId() != "sp1" || sp.GetTask() != "CHILD-TASK: say alpha" || sp.GetDepth() != 1 {
				t.Errorf("sub_agent_spawned = %v", sp)
			}
		}
		if c := ev.GetSubAgentCompleted(); c != nil && (!c.GetSuccess() || c.GetOutput() != "child says alpha" || c.GetChildSessionId() != childID) {
			t.Errorf("sub_agent_completed = %v", c)
		}
		if c := ev.GetToolCallCompleted(); c != nil && c.GetToolName() == "wait" {
			waitOut = c.GetOutput()
		}
	}
	for _, want := range []string{"sub_agent_spawned", "sub_agent_turn_started", "sub_agent_completed"} {
		if !slices.Contains(parentTypes, want) {
			t.Errorf("parent events %v lack %s", parentTypes, want)
		}
	}
	if slices.Contains(childTypes, "text_delta") || !slices.Contains(childTypes, "assistant_message") || !slices.Contains(childTypes, "prompt_completed") {
		t.Errorf("child events on the parent's stream: %v (want no deltas, the rest)", childTypes)
	}
	if !strings.Contains(waitOut, "child says alpha") || !strings.Contains(waitOut, "success: true") {
		t.Errorf("wait output %q", waitOut)
	}

	// include_subagents: both sessions, each gap-free, in commit order.
	all := st.events(t, &agentv1.StreamEventsRequest{SessionId: id, IncludeSubagents: true})
	per := map[string][]*agentv1.AgentEvent{}
	for _, ev := range all {
		per[ev.GetSessionId()] = append(per[ev.GetSessionId()], ev)
	}
	if len(per) != 2 || len(per[childID]) == 0 {
		t.Fatalf("include_subagents gave sessions %v", slices.Collect(func(yield func(string) bool) {
			for k := range per {
				yield(k)
			}
		}))
	}
	checkGapless(t, per[id], 1)
	checkGapless(t, per[childID], 1)
	if !slices.ContainsFunc(per[childID], func(ev *agentv1.AgentEvent) bool { return ev.GetTextDelta() != nil }) {
		t.Error("StreamEvents(include_subagents) should keep the child's deltas")
	}
	without := st.streamEvents(t, id, 1)
	if len(without) != len(per[id]) {
		t.Errorf("without include_subagents: %d events, want the parent's %d", len(without), len(per[id]))
	}

	// close_agent through CloseSession of the parent: the child closes too.
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	list, err := st.agent.ListSessions(t.Context(), &agentv1.ListSessionsRequest{ParentSessionId: id})
	if err != nil || len(list.GetSessions()) != 1 || list.GetSessions()[0].GetState() != agentv1.SessionState_SESSION_STATE_CLOSED {
		t.Errorf("children after closing the parent: %v %v", list, err)
	}
}

// TestSubagentLimits checks that spawns past max_open_sessions or
// max_depth are error results the model sees, that close_agent frees a
// slot, and that send_input starts a finished child again.
func TestSubagentLimits(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	step := 0
	var child string
	st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		body := string(r.Body)
		if !strings.Contains(body, "PARENT-PROMPT") {
			return fakeprovider.Turn{Text: "child answer " + strings.Repeat("!", strings.Count(body, "AGAIN"))}
		}
		step++
		if m := spawnedID.FindStringSubmatch(body); m != nil && child == "" {
			child = m[1]
		}
		call := func(name string, a map[string]any) fakeprovider.Turn {
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c" + name, Name: name, Arguments: args(a)}}}
		}
		switch step {
		case 1:
			return call("spawn_agent", map[string]any{"task": "first"})
		case 2:
			return call("spawn_agent", map[string]any{"task": "second"}) // past max_open_sessions 2
		case 3:
			return call("wait", map[string]any{})
		case 4:
			return call("send_input", map[string]any{"agent_id": child, "message": "AGAIN"})
		case 5:
			return call("wait", map[string]any{"agent_id": child})
		case 6:
			return call("close_agent", map[string]any{"agent_id": child})
		case 7:
			return call("spawn_agent", map[string]any{"task": "third"})
		}
		return fakeprovider.Turn{Text: "ok"}
	})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		Options: &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true, MaxOpenSessions: proto.Int32(2)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := st.prompt(t, created.GetSession().GetSessionId(), "PARENT-PROMPT")
	var results []string
	for _, ev := range evs {
		if c := ev.GetToolCallCompleted(); c != nil && ev.GetSessionId() == created.GetSession().GetSessionId() {
			results = append(results, c.GetToolName()+" "+map[bool]string{true: "ERR", false: "ok"}[c.GetIsError()]+" "+c.GetOutput())
		}
	}
	want := []string{"spawn_agent ok", "spawn_agent ERR Could not start a subagent: the session tree already has 2 open sessions",
		"wait ok", "send_input ok", "wait ok", "close_agent ok", "spawn_agent ok"}
	if len(results) != len(want) {
		t.Fatalf("tool results %q", results)
	}
	for i, w := range want {
		if !strings.HasPrefix(results[i], w) {
			t.Errorf("result %d = %q, want prefix %q", i, results[i], w)
		}
	}
	if !strings.Contains(results[4], "child answer !") {
		t.Errorf("wait after send_input = %q, want the second answer", results[4])
	}
	if !slices.ContainsFunc(evs, func(ev *agentv1.AgentEvent) bool { return ev.GetSubAgentClosed().GetChildSessionId() == child }) {
		t.Error("no sub_agent_closed for the closed child")
	}

	// max_depth 0 allows no child at all: RESOURCE_EXHAUSTED over the RPC.
	root, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		Options: &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true, MaxDepth: proto.Int32(0)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		ParentSessionId: root.GetSession().GetSessionId(),
	})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("child past max_depth: %v, want ResourceExhausted", err)
	}
}

// TestSubagentCapUnderParallelSpawns: 8 spawn_agent calls of one turn run
// in parallel under max_open_sessions 4 (the root and 3 children): 3
// children start, 5 calls get the tree limit's error, and no more than 4
// sessions of the tree are ever open.
func TestSubagentCapUnderParallelSpawns(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		body := string(r.Body)
		switch {
		case !strings.Contains(body, "PARENT-PROMPT"):
			return fakeprovider.Turn{Text: "child answer"}
		case strings.Contains(body, "open sessions"): // the results are in
			return fakeprovider.Turn{Text: "done"}
		}
		var calls []fakeprovider.ToolCall
		for i := range 8 {
			calls = append(calls, fakeprovider.ToolCall{ID: fmt.Sprintf("spawn_%d", i), Name: "spawn_agent", Arguments: args(map[string]any{"task": fmt.Sprintf("task %d", i)})})
		}
		return fakeprovider.Turn{ToolCalls: calls}
	})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		Options: &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true, MaxOpenSessions: proto.Int32(4)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	root := created.GetSession().GetSessionId()
	evs := st.prompt(t, root, "PARENT-PROMPT")
	ok, refused := 0, 0
	for _, ev := range evs {
		c := ev.GetToolCallCompleted()
		if c == nil || ev.GetSessionId() != root {
			continue
		}
		switch {
		case !c.GetIsError():
			ok++
		case strings.Contains(c.GetOutput(), "the session tree already has 4 open sessions"):
			refused++
		default:
			t.Errorf("spawn %s: unexpected error %q", c.GetToolCallId(), c.GetOutput())
		}
	}
	if ok != 3 || refused != 5 {
		t.Errorf("%d spawns started and %d refused, want 3 and 5", ok, refused)
	}
	list, err := st.agent.ListSessions(t.Context(), &agentv1.ListSessionsRequest{ParentSessionId: root})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetSessions()); n != 3 {
		t.Errorf("the root has %d children, want 3", n)
	}
}
