package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

func toolOutputs(evs []*agentv1.AgentEvent) map[string]*agentv1.ToolCallCompleted {
	out := map[string]*agentv1.ToolCallCompleted{}
	for _, ev := range evs {
		if c := ev.GetToolCallCompleted(); c != nil {
			out[c.GetToolCallId()] = c
		}
	}
	return out
}

func (st *stack) session(t *testing.T, sbID string, ts *agentv1.ToolSettings, approved string) string {
	t.Helper()
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL, Settings: ts, ApprovedProjectSettingsSha256: approved,
	})
	if err != nil {
		t.Fatal(err)
	}
	return created.GetSession().GetSessionId()
}

// TestSettingsErrors: a bad file or rule fails CreateSession with
// INVALID_ARGUMENT naming the file, the line and the rule.
func TestSettingsErrors(t *testing.T) {
	st := newStack(t)
	opFile := st.settingsFile
	tests := []struct {
		name     string
		operator string // the operator's file
		project  string // .fabro/settings.json, approved
		request  *agentv1.ToolSettings
		want     map[string]string
	}{
		{name: "request rule", request: &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Deny: []string{"shell(rm *"}}},
			want: map[string]string{"file": "CreateSession.settings", "rule": "shell(rm *"}},
		{name: "request hook", request: &agentv1.ToolSettings{Hooks: []*agentv1.Hook{{Event: agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE}}},
			want: map[string]string{"file": "CreateSession.settings"}},
		{name: "operator file does not parse", operator: "{\n  \"permissions\": {\n    \"allow\": [\"shell\"\n  }\n}\n",
			want: map[string]string{"file": opFile, "line": "4"}},
		{name: "operator rule", operator: "{\n  \"permissions\": {\n    \"allow\": [\n      \"write_file(docs/[)\"\n    ]\n  }\n}\n",
			want: map[string]string{"file": opFile, "line": "4", "rule": "write_file(docs/[)"}},
		{name: "approved project rule", project: "{\"permissions\": {\n\"ask\": [\"()\"]}}",
			want: map[string]string{"line": "2", "rule": "()"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(opFile)
			if tc.operator != "" {
				if err := os.WriteFile(opFile, []byte(tc.operator), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			files := map[string]string{}
			approved := ""
			if tc.project != "" {
				files[agent.ProjectSettingsFile] = tc.project
				approved = settingsHash(tc.project)
			}
			dir, sbID := st.workspace(t, files)
			if tc.project != "" {
				tc.want["file"] = filepath.Join(dir, agent.ProjectSettingsFile)
			}
			_, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
				Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
				Settings: tc.request, ApprovedProjectSettingsSha256: approved,
			})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("CreateSession: %v, want INVALID_ARGUMENT", err)
			}
			ei := errorInfo(err)
			if ei.GetReason() != "INVALID_SETTINGS" {
				t.Fatalf("ErrorInfo = %v", ei)
			}
			for k, v := range tc.want {
				if ei.GetMetadata()[k] != v {
					t.Errorf("metadata[%s] = %q, want %q (%v)", k, ei.GetMetadata()[k], v, err)
				}
			}
		})
	}
	os.Remove(opFile)
}

// TestRulesInSession: a deny rule's message reaches the model, a bare deny
// hides the tool, an allow rule lets a call run.
func TestRulesInSession(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, map[string]string{"a.txt": "alpha\n"})
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{
			{ID: "c1", Name: "shell", Arguments: args(map[string]any{"command": "echo hi; rm a.txt"})},
		}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{
			{ID: "c2", Name: "web_fetch", Arguments: args(map[string]any{"url": "http://127.0.0.1:1/"})},
			{ID: "c3", Name: "write_file", Arguments: args(map[string]any{"file_path": "docs/b.md", "content": "b"})},
		}},
		fakeprovider.Turn{Text: "done"},
	)
	id := st.session(t, sbID, &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{
		Deny: []string{"web_fetch", "shell(rm *)"}, Allow: []string{"write_file(docs/**)"}}}, "")
	evs := st.prompt(t, id, "go")
	outs := toolOutputs(evs)
	if c := outs["c1"]; !c.GetIsError() || c.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED || !strings.Contains(c.GetOutput(), `the rule "shell(rm *)" (CreateSession.settings)`) {
		t.Errorf("c1 = %v", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err != nil {
		t.Errorf("a.txt: %v (the denied command ran)", err)
	}
	if c := outs["c2"]; !c.GetIsError() || c.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED {
		t.Errorf("c2 = %v", c)
	}
	if c := outs["c3"]; c.GetIsError() {
		t.Errorf("c3 = %v", c)
	}
	reqs := st.fake.Requests()
	if len(reqs) == 0 || strings.Contains(string(reqs[0].Body), `"web_fetch"`) || !strings.Contains(string(reqs[0].Body), `"shell"`) {
		t.Errorf("the model was offered web_fetch, or not shell")
	}
	snap, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range snap.GetSnapshot().GetTools() {
		if n := tl.GetDefinition().GetName(); n == "web_fetch" && (tl.GetAllowed() || tl.GetDeniedReason() == "") || n == "shell" && !tl.GetAllowed() {
			t.Errorf("snapshot tool %v", tl)
		}
	}
}

// approveOn answers every approval_requested of a prompt stream with the
// next answer, through answer(), and collects the events.
func promptWithApprovals(t *testing.T, st *stack, id, text string, answer func(ev *agentv1.ApprovalRequested)) []*agentv1.AgentEvent {
	t.Helper()
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err != nil {
			if len(evs) > 0 && evs[len(evs)-1].GetPromptCompleted() != nil && evs[len(evs)-1].GetSessionId() == id {
				return evs
			}
			t.Fatalf("prompt stream: %v after %v", err, eventTypes(evs))
		}
		ev := resp.GetEvent()
		evs = append(evs, ev)
		if ar := ev.GetApprovalRequested(); ar != nil {
			answer(ar)
		}
	}
}

// TestApprovals: an ask rule waits for Approve, answered by a second gRPC
// client (allow once, allow for the session) and over REST (deny with a
// message); a timeout denies; a second answer and an unknown id fail.
func TestApprovals(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: args(map[string]any{"command": "echo one > one.txt"})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "shell", Arguments: args(map[string]any{"command": "echo two > two.txt"})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c3", Name: "write_file", Arguments: args(map[string]any{"file_path": "w1.txt", "content": "x"})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c4", Name: "write_file", Arguments: args(map[string]any{"file_path": "w2.txt", "content": "x"})}}},
		fakeprovider.Turn{Text: "done"},
	)
	id := st.session(t, sbID, &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Ask: []string{"shell", "write_file"}}}, "")

	conn, err := grpc.NewClient(st.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	second := agentv1.NewAgentServiceClient(conn)
	var answered []string
	evs := promptWithApprovals(t, st, id, "go", func(ar *agentv1.ApprovalRequested) {
		answered = append(answered, ar.GetApprovalId())
		if ar.GetRequestingSessionId() != id || ar.GetReason() == "" || ar.GetExpireTime() == nil {
			t.Errorf("approval_requested = %v", ar)
		}
		switch ar.GetToolCallId() {
		case "c1": // a second gRPC client allows once
			if _, err := second.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: ar.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
				t.Errorf("Approve: %v", err)
			}
		case "c2": // REST denies with a message
			resp, err := http.Post("http://"+st.httpAddr+"/v1/sessions/"+id+"/approvals/"+ar.GetApprovalId()+":approve", "application/json",
				bytes.NewBufferString(`{"decision":"APPROVAL_DECISION_DENY","message":"not two"}`))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("REST approve: %v %v", err, resp)
			} else {
				resp.Body.Close()
			}
		case "c3": // allow for the session: c4 does not ask
			if _, err := second.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: ar.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION}); err != nil {
				t.Errorf("Approve: %v", err)
			}
		default:
			t.Errorf("unexpected approval for %s", ar.GetToolCallId())
		}
	})
	outs := toolOutputs(evs)
	if c := outs["c1"]; c.GetIsError() {
		t.Errorf("c1 = %v", c)
	}
	if c := outs["c2"]; !c.GetIsError() || !strings.Contains(c.GetOutput(), "They said: not two") {
		t.Errorf("c2 = %v", c)
	}
	for _, f := range []string{"one.txt", "w1.txt", "w2.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "two.txt")); err == nil {
		t.Errorf("the denied command ran")
	}
	if len(answered) != 3 {
		t.Fatalf("approvals asked: %v, want 3 (c4 allowed for the session)", answered)
	}
	resolved := 0
	for _, ev := range evs {
		if ev.GetApprovalResolved() != nil {
			resolved++
		}
	}
	if resolved != 3 {
		t.Errorf("approval_resolved events: %d", resolved)
	}
	_, err = second.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: answered[0], Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY})
	if status.Code(err) != codes.FailedPrecondition || errorInfo(err).GetReason() != "APPROVAL_RESOLVED" {
		t.Errorf("second answer: %v", err)
	}
	for _, req := range []*agentv1.ApproveRequest{
		{SessionId: id, ApprovalId: "ap_unknown", Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY},
		{SessionId: "s_other", ApprovalId: answered[0], Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY},
	} {
		if _, err := second.Approve(t.Context(), req); status.Code(err) != codes.NotFound || errorInfo(err) == nil {
			t.Errorf("Approve(%v): %v, want NOT_FOUND with ErrorInfo", req, err)
		}
	}
	if _, err := second.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: answered[0]}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no decision: %v", err)
	}
}

func TestApprovalTimeout(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: args(map[string]any{"command": "touch ran"})}}},
		fakeprovider.Turn{Text: "done"},
	)
	id := st.session(t, sbID, &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Ask: []string{"shell"}},
		ApprovalTimeout: durationpb.New(100 * time.Millisecond)}, "")
	evs := promptWithApprovals(t, st, id, "go", func(*agentv1.ApprovalRequested) {})
	if c := toolOutputs(evs)["c1"]; !c.GetIsError() || !strings.Contains(c.GetOutput(), "No approval came within 100ms") {
		t.Errorf("c1 = %v", c)
	}
	var res *agentv1.ApprovalResolved
	for _, ev := range evs {
		if r := ev.GetApprovalResolved(); r != nil {
			res = r
		}
	}
	if !res.GetTimedOut() || res.GetDecision() != agentv1.ApprovalDecision_APPROVAL_DECISION_DENY {
		t.Errorf("approval_resolved = %v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("the command ran without approval")
	}
	_, err := st.agent.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: res.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Approve after the timeout: %v", err)
	}
}

// TestSubagentApprovalOnRoot: a subagent's ask is emitted on the root
// session and answered there.
func TestSubagentApprovalOnRoot(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, nil)
	st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		body := string(r.Body)
		switch {
		case !strings.Contains(body, "PARENT-PROMPT"):
			if strings.Contains(body, "child_call") {
				return fakeprovider.Turn{Text: "child done"}
			}
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "child_call", Name: "shell", Arguments: args(map[string]any{"command": "touch child.txt"})}}}
		case strings.Contains(body, "completed (success"):
			return fakeprovider.Turn{Text: "parent done"}
		case spawnedID.MatchString(body):
			id := spawnedID.FindStringSubmatch(body)[1]
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "w1", Name: "wait", Arguments: args(map[string]any{"agent_id": id})}}}
		}
		return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "sp1", Name: "spawn_agent", Arguments: args(map[string]any{"task": "touch child.txt"})}}}
	})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
		Options:         &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
		Settings:        &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Ask: []string{"shell"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	var seen *agentv1.AgentEvent
	evs := st.promptTree(t, id, "PARENT-PROMPT", func(ev *agentv1.AgentEvent) {
		ar := ev.GetApprovalRequested()
		if ar == nil {
			return
		}
		seen = ev
		if _, err := st.agent.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: ar.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
			t.Errorf("Approve on the root: %v", err)
		}
	})
	if lastReport(t, evs).GetOutput() != "parent done" {
		t.Errorf("report %v", lastReport(t, evs))
	}
	if seen == nil || seen.GetSessionId() != id || seen.GetApprovalRequested().GetRequestingSessionId() == id || seen.GetApprovalRequested().GetToolCallId() != "child_call" {
		t.Fatalf("approval_requested = %v, want it on the root %s for the child's call", seen, id)
	}
	if _, err := os.Stat(filepath.Join(dir, "child.txt")); err != nil {
		t.Errorf("the child's approved call did not run: %v", err)
	}
}

// promptTree runs a prompt and calls on for every event as it arrives.
func (st *stack) promptTree(t *testing.T, id, text string, on func(*agentv1.AgentEvent)) []*agentv1.AgentEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stream, err := st.agent.Prompt(ctx, &agentv1.PromptRequest{SessionId: id, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("prompt did not end: %v", eventTypes(evs))
			}
			return evs
		}
		evs = append(evs, resp.GetEvent())
		on(resp.GetEvent())
	}
}

// TestProjectSettingsNeedApproval is the configuration-based sandbox
// escape: a tool call writes .fabro/settings.json with a host-side hook and
// a looser rule; later sessions ignore it until its content hash is
// approved, and again once it changes.
func TestProjectSettingsNeedApproval(t *testing.T) {
	st := newStack(t)
	marker := filepath.Join(t.TempDir(), "host-hook-ran")
	dir, sbID := st.workspace(t, nil)
	evil := `{"hooks": {"pre_tool_use": [{"command": "touch ` + marker + `"}]}, "permissions": {"deny": ["read_file"]}}`
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "w", Name: "write_file", Arguments: args(map[string]any{"file_path": ".fabro/settings.json", "content": evil})}}},
		fakeprovider.Turn{Text: "configured"},
	)
	first := st.session(t, sbID, nil, "")
	if c := toolOutputs(st.prompt(t, first, "configure yourself"))["w"]; c.GetIsError() {
		t.Fatalf("write: %v", c)
	}
	if _, err := os.Stat(filepath.Join(dir, ".fabro/settings.json")); err != nil {
		t.Fatal(err)
	}

	runShell := func(id string) []*agentv1.AgentEvent {
		st.fake.Enqueue(
			fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "s", Name: "shell", Arguments: args(map[string]any{"command": "true"})}}},
			fakeprovider.Turn{Text: "ok"},
		)
		return st.prompt(t, id, "run")
	}
	// Not approved: a warning, no hook, no rule.
	second := st.session(t, sbID, nil, "")
	runShell(second)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the unapproved project file's host hook ran")
	}
	if !hasWarning(t, st, second, "is not approved and was ignored") {
		t.Error("no warning about the ignored project file")
	}
	snap, _ := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: second})
	for _, tl := range snap.GetSnapshot().GetTools() {
		if tl.GetDefinition().GetName() == "read_file" && !tl.GetAllowed() {
			t.Error("the unapproved project file's rule took effect")
		}
	}
	// Approved by its hash on CreateSession alone: the caller (whose tools
	// may have written the file) cannot bring a host-side hook with it.
	_, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL, ApprovedProjectSettingsSha256: settingsHash(evil),
	})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "host-side hook") {
		t.Fatalf("CreateSession approving a project file with a host-side hook = %v; want PERMISSION_DENIED naming it", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the caller-approved project file's host hook ran")
	}
	// Changed after approval: ignored again.
	os.Remove(marker)
	if err := os.WriteFile(filepath.Join(dir, ".fabro/settings.json"), []byte(evil+" "), 0o644); err != nil {
		t.Fatal(err)
	}
	fourth := st.session(t, sbID, nil, settingsHash(evil))
	runShell(fourth)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a changed project file took effect under the old approval")
	}
	// The operator's trusted_project_settings approve it too.
	st.operatorSettings(t, `{"trusted_project_settings": ["`+settingsHash(evil+" ")+`"]}`)
	runShell(st.session(t, sbID, nil, ""))
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the operator-trusted project file's hook did not run: %v", err)
	}
}

// operatorSettings writes the operator's settings file (Config.SettingsFile,
// read on every CreateSession) for the rest of the test.
func (st *stack) operatorSettings(t *testing.T, data string) {
	t.Helper()
	if err := os.WriteFile(st.settingsFile, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(st.settingsFile) })
}

// settingsHash is what ApprovedProjectSettingsSha256 and
// trusted_project_settings name: the hex SHA-256 of the file's bytes.
func settingsHash(data string) string {
	h := sha256.Sum256([]byte(data))
	return hex.EncodeToString(h[:])
}

// TestNoHostExtensionsFromCreateSession: an API caller cannot make the
// agent's host run a command.
func TestNoHostExtensionsFromCreateSession(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	for _, ts := range []*agentv1.ToolSettings{
		{Hooks: []*agentv1.Hook{{Event: agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, Command: "touch /tmp/pwned"}}},
		{Hooks: []*agentv1.Hook{{Event: agentv1.HookEvent_HOOK_EVENT_SESSION_START, Command: "touch /tmp/pwned", Place: agentv1.HookPlace_HOOK_PLACE_HOST}}},
		{McpServers: []*agentv1.McpServer{{Name: "evil", Command: "/bin/sh", Args: []string{"-c", "touch /tmp/pwned"}}}},
	} {
		_, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}, Settings: ts})
		if status.Code(err) != codes.PermissionDenied || errorInfo(err).GetReason() != "HOST_EXTENSION_FORBIDDEN" {
			t.Errorf("%v: %v, want PERMISSION_DENIED", ts, err)
		}
	}
}

// hasWarning reports a settings_ignored, extension_failed or warning event
// of the session whose text holds text.
func hasWarning(t *testing.T, st *stack, id, text string) bool {
	t.Helper()
	stream, err := st.agent.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return false
		}
		ev := resp.GetEvent()
		for _, msg := range []string{ev.GetWarning().GetMessage(), ev.GetSettingsIgnored().GetReason(), ev.GetExtensionFailed().GetReason()} {
			if msg != "" && strings.Contains(msg, text) {
				return true
			}
		}
	}
}

// TestHooksInSession: a sandbox-side pre_tool_use hook rewrites a call, a
// host-side one that fails denies it with a hook_failed event, and a
// post_tool_use hook adds to the result the model sees.
func TestHooksInSession(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: args(map[string]any{"command": "echo original > out.txt"})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "write_file", Arguments: args(map[string]any{"file_path": "w.txt", "content": "x"})}}},
		fakeprovider.Turn{Text: "done"},
	)
	// Host-side hooks come from the operator's file; CreateSession may add
	// sandbox-side ones.
	st.operatorSettings(t, `{"hooks": {
	  "post_tool_use": [{"matcher": "shell", "command": "echo '{\"hookSpecificOutput\":{\"additionalContext\":\"checked by hook\"}}'"}],
	  "pre_tool_use": [{"matcher": "write_file", "command": "exit 5"}]}}`)
	id := st.session(t, sbID, &agentv1.ToolSettings{Hooks: []*agentv1.Hook{
		{Event: agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, Matcher: "shell", Place: agentv1.HookPlace_HOOK_PLACE_SANDBOX,
			Command: `cat > seen.json; echo '{"hookSpecificOutput":{"updatedInput":{"command":"echo rewritten > out.txt"}}}'`},
	}}, "")
	evs := st.prompt(t, id, "go")
	outs := toolOutputs(evs)
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "rewritten\n" {
		t.Errorf("out.txt = %q, want the rewritten command's output", b)
	}
	var seen struct {
		Event     string `json:"hook_event_name"`
		Tool      string `json:"tool_name"`
		ToolInput struct {
			Command string `json:"command"`
		} `json:"tool_input"`
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "seen.json")); json.Unmarshal(b, &seen) != nil || seen.Event != "pre_tool_use" || seen.Tool != "shell" || seen.ToolInput.Command != "echo original > out.txt" {
		t.Errorf("the sandbox hook saw %s", b)
	}
	if c := outs["c1"]; !strings.Contains(c.GetOutput(), "checked by hook") {
		t.Errorf("c1 = %v", c)
	}
	if c := outs["c2"]; !c.GetIsError() || c.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED {
		t.Errorf("c2 = %v", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "w.txt")); err == nil {
		t.Error("the call whose hook failed ran")
	}
	var failed *agentv1.HookFailed
	for _, ev := range evs {
		if f := ev.GetHookFailed(); f != nil {
			failed = f
		}
	}
	if failed.GetExitCode() != 5 || !failed.GetDenied() || failed.GetToolCallId() != "c2" {
		t.Errorf("hook_failed = %v", failed)
	}
}

// TestSessionStartAndPromptEndHooks: the operator's session_start and
// prompt_end hooks get their event as JSON on stdin; one that fails is a
// hook_failed event and changes nothing else.
func TestSessionStartAndPromptEndHooks(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	log := filepath.Join(t.TempDir(), "hooks.log")
	st.operatorSettings(t, `{"hooks": {
	  "session_start": [{"command": "cat >> `+log+`"}, {"command": "exit 9"}],
	  "prompt_end": [{"command": "cat >> `+log+`"}]}}`)
	st.fake.Enqueue(fakeprovider.Turn{Text: "hi"})
	id := st.session(t, sbID, nil, "")
	if rep := lastReport(t, st.prompt(t, id, "hello")); rep.GetOutput() != "hi" {
		t.Fatalf("report %v", rep)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"hook_event_name":"session_start"`) || !strings.Contains(lines[1], `"hook_event_name":"prompt_end"`) ||
		!strings.Contains(lines[1], `"status":"PROMPT_STATUS_COMPLETED"`) || !strings.Contains(lines[0], `"session_id":"`+id+`"`) {
		t.Errorf("hooks saw:\n%s", b)
	}
	stream, err := st.agent.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	var failed *agentv1.HookFailed
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		if f := resp.GetEvent().GetHookFailed(); f != nil {
			failed = f
		}
	}
	if failed.GetEvent() != agentv1.HookEvent_HOOK_EVENT_SESSION_START || failed.GetExitCode() != 9 || failed.GetDenied() {
		t.Errorf("hook_failed = %v", failed)
	}
}
