package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/mcptest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestMCPInSession: MCP servers from CreateSession (stdio on the host and
// streamable HTTP) give mcp__<server>__<tool> tools that take the same
// chain (a deny rule hides one, an ask rule asks); a server that does not
// start is left out with a warning and the session works.
func TestMCPInSession(t *testing.T) {
	hs := httptest.NewServer(mcptest.Handler())
	t.Cleanup(hs.Close) // after the stack's cleanup has closed the session's MCP connections
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{
			{ID: "c1", Name: "mcp__local__upper", Arguments: args(map[string]any{"text": "shout"})},
			{ID: "c2", Name: "mcp__web__image", Arguments: `{}`},
			{ID: "c3", Name: "mcp__web__fail", Arguments: `{}`},
		}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c4", Name: "mcp__local__big", Arguments: args(map[string]any{"chars": 100000})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c5", Name: "mcp__web__echo", Arguments: args(map[string]any{"text": 1})}}},
		fakeprovider.Turn{Text: "done"},
	)
	// Host-side (stdio) and loopback servers come from the operator's file,
	// in .mcp.json's shape; CreateSession adds rules and a server the SSRF
	// guard refuses.
	op, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"local":  map[string]any{"command": os.Args[0], "env": map[string]string{mcptest.ServeEnv: "1"}},
		"web":    map[string]any{"type": "http", "url": hs.URL},
		"broken": map[string]any{"command": "/nonexistent/server", "startup_timeout": "5s"},
	}})
	st.operatorSettings(t, string(op))
	id := st.session(t, sbID, &agentv1.ToolSettings{
		McpServers:  []*agentv1.McpServer{{Name: "inside", Url: hs.URL, StartupTimeout: durationpb.New(5 * time.Second)}},
		Permissions: &agentv1.PermissionRules{Deny: []string{"mcp__local__echo"}, Ask: []string{"mcp__web__fail"}},
	}, "")
	evs := promptWithApprovals(t, st, id, "go", func(ar *agentv1.ApprovalRequested) {
		if _, err := st.agent.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: ar.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
			t.Error(err)
		}
	})
	outs := toolOutputs(evs)
	if c := outs["c1"]; c.GetIsError() || c.GetOutput() != "SHOUT" {
		t.Errorf("c1 = %v", c)
	}
	if c := outs["c2"]; c.GetIsError() || !strings.Contains(c.GetOutput(), "[image image/png") {
		t.Errorf("c2 = %v", c)
	}
	if c := outs["c3"]; !c.GetIsError() || c.GetOutput() != "it went wrong" {
		t.Errorf("c3 = %v (approved, then an error result)", c)
	}
	if c := outs["c4"]; c.GetModelCharsOmitted() == 0 {
		t.Errorf("c4: the huge result was not truncated (%d chars omitted)", c.GetModelCharsOmitted())
	}
	if c := outs["c5"]; !c.GetIsError() || c.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS {
		t.Errorf("c5 = %v (arguments validated like a built-in tool's)", c)
	}
	reqs := st.fake.Requests()
	body := string(reqs[0].Body)
	if !strings.Contains(body, "mcp__local__upper") || strings.Contains(body, "mcp__local__echo") || strings.Contains(body, "mcp__local__bad") {
		t.Errorf("tools offered: want mcp__local__upper, not the denied echo nor the tool with a bad schema")
	}
	// The image reached the model as an image part of the tool result.
	if !strings.Contains(string(reqs[1].Body), "image/png") {
		t.Errorf("the image did not reach the model")
	}
	if !hasWarning(t, st, id, `MCP server "broken" did not start`) || !hasWarning(t, st, id, `tool "bad" is left out`) {
		t.Errorf("no warning for the broken server or the bad schema")
	}
	if !hasWarning(t, st, id, `MCP server "inside" did not start`) || strings.Contains(body, "mcp__inside__") {
		t.Errorf("a loopback MCP server named by CreateSession was dialled")
	}
}

func TestMCPBadConfig(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	for _, m := range []*agentv1.McpServer{{Name: "x y", Command: "a"}, {Name: "a"}, {Name: "a", Url: "http://x", Place: agentv1.HookPlace_HOOK_PLACE_SANDBOX}} {
		_, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
			Settings: &agentv1.ToolSettings{McpServers: []*agentv1.McpServer{m}}})
		if status.Code(err) != codes.InvalidArgument || errorInfo(err).GetReason() != "INVALID_SETTINGS" {
			t.Errorf("%v: %v", m, err)
		}
	}
}

// TestClientTools: a tool the client serves, answered with
// SubmitToolResult; an unknown call id is NOT_FOUND, a second answer
// FAILED_PRECONDITION, a result that never comes an error result.
func TestClientTools(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "ask_user", Arguments: args(map[string]any{"question": "Which color?"})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "slow", Arguments: `{}`}}},
		fakeprovider.Turn{Text: "done"},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY,
		ClientTools: []*agentv1.ClientTool{
			{Name: "ask_user", Description: "Ask the user a question.", Parameters: `{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`},
			{Name: "slow", Description: "Never answered.", Timeout: durationpb.New(100 * time.Millisecond)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		ev := resp.GetEvent()
		evs = append(evs, ev)
		if r := ev.GetClientToolRequested(); r != nil && r.GetToolCallId() == "c1" {
			if r.GetToolName() != "ask_user" || !strings.Contains(r.GetArguments(), "Which color?") {
				t.Errorf("client_tool_requested = %v", r)
			}
			if _, err := st.agent.SubmitToolResult(t.Context(), &agentv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "nope"}); status.Code(err) != codes.NotFound {
				t.Errorf("unknown call id: %v", err)
			}
			// Over REST: an unknown call is 404, the real one answered.
			for _, tc := range []struct {
				call string
				code int
			}{{"nope", http.StatusNotFound}, {"c1", http.StatusOK}} {
				resp, err := http.Post("http://"+st.httpAddr+"/v1/sessions/"+id+"/toolCalls/"+tc.call+":submitResult", "application/json",
					strings.NewReader(`{"output":"blue"}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.code {
					t.Errorf("REST submit %s: %s, want %d", tc.call, resp.Status, tc.code)
				}
			}
			if _, err := st.agent.SubmitToolResult(t.Context(), &agentv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "c1", Output: "red"}); status.Code(err) != codes.FailedPrecondition {
				t.Errorf("second answer: %v", err)
			}
		}
	}
	outs := toolOutputs(evs)
	if c := outs["c1"]; c.GetIsError() || c.GetOutput() != "blue" {
		t.Errorf("c1 = %v", c)
	}
	if c := outs["c2"]; !c.GetIsError() || !strings.Contains(c.GetOutput(), "did not return a result for slow within 100ms") {
		t.Errorf("c2 = %v", c)
	}
	for _, bad := range [][]*agentv1.ClientTool{
		{{Name: "shell", Description: "x"}},
		{{Name: "bad name", Description: "x"}},
		{{Name: "t", Description: ""}},
		{{Name: "t", Description: "x", Parameters: `{"type":"array"}`}},
		{{Name: "t", Description: "x", Parameters: `{"type":"object","properties":{"a":{"minimum":"z"}}}`}},
		{{Name: "t", Description: "x"}, {Name: "t", Description: "y"}},
	} {
		_, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}, ClientTools: bad})
		if status.Code(err) != codes.InvalidArgument || errorInfo(err).GetReason() != "INVALID_CLIENT_TOOL" {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
