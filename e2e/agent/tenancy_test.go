package agent_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// people are the tenancy suite's callers: two users and an admin.
type people struct{ alice, bob, root string }

func newPeople(t *testing.T, st *stack) people {
	t.Helper()
	issue := func(name string, role auth.Role) string {
		v, _, err := st.tokens.Issue(name, role)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return people{alice: issue("alice", auth.RoleUser), bob: issue("bob", auth.RoleUser), root: issue("root", auth.RoleAdmin)}
}

// bearer is ctx presenting token.
func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// createAs makes a sandbox on a fresh workspace and a session on it, as
// token's person.
func (st *stack) createAs(t *testing.T, token string) (sessionID, sandboxID string) {
	t.Helper()
	ctx := bearer(t.Context(), token)
	sb, err := st.sandbox.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.agent.CreateSession(ctx, &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sb.GetSandbox().GetSandboxId()}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSession().GetSessionId(), sb.GetSandbox().GetSandboxId()
}

// sessionCalls calls every AgentService method that names a session, on
// id. TestTenancyAgentEveryMethod fails on a method named in neither this
// nor unscopedAgent, so a new RPC cannot be forgotten.
// sessionCall is one method's call on a session id.
type sessionCall = func(ctx context.Context, c agentv1.AgentServiceClient, id string) error

var sessionCalls = map[string]sessionCall{
	"CreateSession": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error { // a subagent in its tree
		_, err := c.CreateSession(ctx, &agentv1.CreateSessionRequest{ParentSessionId: id, Model: "anthropic/claude-sonnet-4.5",
			Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local"}}})
		return err
	},
	"Prompt": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		return authtest.RecvAll(c.Prompt(ctx, &agentv1.PromptRequest{SessionId: id, Text: "hi"}))
	},
	"StartPrompt": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.StartPrompt(ctx, &agentv1.StartPromptRequest{SessionId: id, Text: "hi"})
		return err
	},
	"Steer": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.Steer(ctx, &agentv1.SteerRequest{SessionId: id, Text: "stop"})
		return err
	},
	"FollowUp": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.FollowUp(ctx, &agentv1.FollowUpRequest{SessionId: id, Text: "more"})
		return err
	},
	"Interrupt": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.Interrupt(ctx, &agentv1.InterruptRequest{SessionId: id})
		return err
	},
	"Abort": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.Abort(ctx, &agentv1.AbortRequest{SessionId: id})
		return err
	},
	"IssueEventsCredential": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.IssueEventsCredential(ctx, &agentv1.IssueEventsCredentialRequest{SessionIds: []string{id}})
		return err
	},
	"GetHistory": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.GetHistory(ctx, &agentv1.GetHistoryRequest{SessionId: id})
		return err
	},
	"GetSnapshot": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.GetSnapshot(ctx, &agentv1.GetSnapshotRequest{SessionId: id})
		return err
	},
	"GetSession": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.GetSession(ctx, &agentv1.GetSessionRequest{SessionId: id})
		return err
	},
	"CloseSession": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.CloseSession(ctx, &agentv1.CloseSessionRequest{SessionId: id})
		return err
	},
	"DeleteSession": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.DeleteSession(ctx, &agentv1.DeleteSessionRequest{SessionId: id})
		return err
	},
	"ResumeSession": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: id})
		return err
	},
	"StreamEvents": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		return authtest.RecvAll(c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id}))
	},
	"Approve": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.Approve(ctx, &agentv1.ApproveRequest{SessionId: id, ApprovalId: "ap_1", Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY})
		return err
	},
	"SubmitToolResult": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.SubmitToolResult(ctx, &agentv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "call_1", Output: "forged"})
		return err
	},
	"ListCheckpoints": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.ListCheckpoints(ctx, &agentv1.ListCheckpointsRequest{SessionId: id})
		return err
	},
	"DiffCheckpoint": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.DiffCheckpoint(ctx, &agentv1.DiffCheckpointRequest{SessionId: id})
		return err
	},
	"RestoreCheckpoint": func(ctx context.Context, c agentv1.AgentServiceClient, id string) error {
		_, err := c.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: id, Turn: 0, Force: true, Conversation: true})
		return err
	},
}

// unscopedAgent are the methods naming no session (their own tests).
var unscopedAgent = map[string]bool{"ListSessions": true}

// sessionState is what a refused call may not change: the session, its
// history, its events, and the model's requests.
func (st *stack) sessionState(t *testing.T, owner, id string) []any {
	t.Helper()
	ctx := bearer(t.Context(), owner)
	s, err := st.agent.GetSession(ctx, &agentv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatalf("the owner's GetSession: %v", err)
	}
	h, err := st.agent.GetHistory(ctx, &agentv1.GetHistoryRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	return []any{s.GetSession(), h, len(st.fake.Requests())}
}

// TestTenancyAgentEveryMethod calls every AgentService method naming a
// session, from the service descriptor, on alice's session: bob gets the
// NOT_FOUND of an id no session has (code, reason, message) and changes
// nothing; alice and the admin reach it, the admin's call audited.
func TestTenancyAgentEveryMethod(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	ctx := t.Context()
	gone, _ := st.createAs(t, who.bob)
	if _, err := st.agent.DeleteSession(bearer(ctx, who.bob), &agentv1.DeleteSessionRequest{SessionId: gone}); err != nil {
		t.Fatal(err)
	}
	svc := agentv1.File_fabro_agent_v1_agent_proto.Services().ByName("AgentService")
	authtest.EveryMethod(t, svc, sessionCalls, unscopedAgent, func(t *testing.T, name string, call sessionCall) {
		id, _ := st.createAs(t, who.alice)
		before := st.sessionState(t, who.alice, id)
		missing := call(bearer(ctx, who.bob), st.agent, gone)
		if status.Code(missing) != codes.NotFound {
			t.Fatalf("on a deleted id: %v, want NOT_FOUND", missing)
		}
		err := call(bearer(ctx, who.bob), st.agent, id)
		if ok, want := authtest.SameAsMissing(err, missing, gone, id); !ok {
			t.Errorf("bob: %v (%s), want the missing id's NOT_FOUND %s", err, authtest.Reason(err), want)
		}
		if diff := cmp.Diff(before, st.sessionState(t, who.alice, id), protocmp.Transform()); diff != "" {
			t.Errorf("bob's %s changed alice's session (-before +after):\n%s", name, diff)
		}
		refused := func(err error) bool { return authtest.Refused(err, missing) }
		audit := "admin reached another principal's resource audit=true principal=admin:root method=/fabro.agent.v1.AgentService/" + name
		if st.logs.logged(audit) {
			t.Fatalf("audited before any admin call")
		}
		// Each on a session of alice's of its own: a delete or close
		// of one would hide whether the other reached it.
		other, _ := st.createAs(t, who.alice)
		for _, c := range []struct{ name, token, id string }{{"admin", who.root, id}, {"alice", who.alice, other}} {
			st.fake.Enqueue(fakeprovider.Turn{Text: "ok"}) // for a prompt
			if err := call(bearer(ctx, c.token), st.agent, c.id); refused(err) {
				t.Errorf("%s: %v", c.name, err)
			}
		}
		if !st.logs.logged(audit) {
			t.Errorf("the admin's %s on alice's session is not audited", name)
		}
	})
}

// TestTenancySessionsAndSandboxes: lists hold only the caller's (the
// admin's all); a session's sandbox is its owner's, created through the
// agent for her; naming another's sandbox is NOT_FOUND for a user and
// refused for an admin; REST answers as gRPC.
func TestTenancySessionsAndSandboxes(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	ctx := t.Context()
	aliceID, aliceSB := st.createAs(t, who.alice)
	bobID, _ := st.createAs(t, who.bob)
	list := func(token string) []string {
		t.Helper()
		resp, err := st.agent.ListSessions(bearer(ctx, token), &agentv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range resp.GetSessions() {
			ids = append(ids, s.GetSessionId())
		}
		return ids
	}
	for _, c := range []struct {
		name, token string
		want        []string
	}{{"alice", who.alice, []string{aliceID}}, {"bob", who.bob, []string{bobID}}, {"admin", who.root, []string{bobID, aliceID}}} {
		if diff := cmp.Diff(c.want, list(c.token)); diff != "" {
			t.Errorf("%s lists (-want +got):\n%s", c.name, diff)
		}
	}
	// bob naming alice's sandbox: NOT_FOUND, as a sandbox that is not there.
	_, err := st.agent.CreateSession(bearer(ctx, who.bob), &agentv1.CreateSessionRequest{Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: aliceSB}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("bob's session on alice's sandbox: %v, want NOT_FOUND", err)
	}
	_, err = st.agent.CreateSession(bearer(ctx, who.root), &agentv1.CreateSessionRequest{Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: aliceSB}})
	if status.Code(err) != codes.FailedPrecondition || authtest.Reason(err) != "SANDBOX_OWNER_MISMATCH" {
		t.Errorf("the admin's session on alice's sandbox: %v, want FAILED_PRECONDITION SANDBOX_OWNER_MISMATCH", err)
	}
	// A sandbox the agent creates for alice's session is hers.
	spec, err := st.agent.CreateSession(bearer(ctx, who.alice), &agentv1.CreateSessionRequest{
		Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local"}}})
	if err != nil {
		t.Fatal(err)
	}
	owned := spec.GetSession().GetSandboxId()
	if got, err := st.sandbox.GetSandbox(bearer(ctx, who.alice), &sandboxv1.GetSandboxRequest{SandboxId: owned}); err != nil || got.GetSandbox().GetOwner() != "user:alice" {
		t.Errorf("the session's own sandbox: %v, owner %q", err, got.GetSandbox().GetOwner())
	}
	if _, err := st.sandbox.GetSandbox(bearer(ctx, who.bob), &sandboxv1.GetSandboxRequest{SandboxId: owned}); status.Code(err) != codes.NotFound {
		t.Errorf("bob on alice's session's sandbox: %v", err)
	}
	// A prompt of alice's whose tool runs in her sandbox works (the agent
	// acts for her there).
	st.fake.Enqueue(fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "shell", Arguments: args(map[string]any{"command": "echo hi > made.txt"})}}},
		fakeprovider.Turn{Text: "done"})
	evs := st.promptAs(t, who.alice, spec.GetSession().GetSessionId())
	if rep := lastReport(t, evs); rep.GetOutput() != "done" {
		t.Errorf("alice's prompt: %v", rep)
	}
	if _, err := st.sandbox.StatFile(bearer(ctx, who.alice), &sandboxv1.StatFileRequest{SandboxId: owned, Path: "made.txt"}); err != nil {
		t.Errorf("the tool's file in alice's sandbox: %v", err)
	}
	// REST, through the gateway.
	rest := func(method, path, token string) int {
		t.Helper()
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader("{}")
		}
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+st.httpAddr+path, body)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/v1/sessions/" + aliceID, who.bob, 404},
		{"GET", "/v1/sessions/" + aliceID + "/history", who.bob, 404},
		{"GET", "/v1/sessions/" + aliceID + "/events", who.bob, 404},
		{"DELETE", "/v1/sessions/" + aliceID, who.bob, 404},
		{"POST", "/v1/sessions/" + aliceID + ":close", who.bob, 404},
		{"GET", "/v1/sessions/" + aliceID, who.alice, 200},
		{"GET", "/v1/sessions/" + aliceID + "/history", who.root, 200},
	} {
		if got := rest(c.method, c.path, c.token); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
		}
	}
	if diff := cmp.Diff([]string{aliceID}, list(who.alice)[1:]); diff != "" {
		t.Errorf("alice's sessions after bob's REST calls (-want +got):\n%s", diff)
	}
}

// promptAs runs a prompt as token's person and collects its events.
func (st *stack) promptAs(t *testing.T, token, id string) []*agentv1.AgentEvent {
	t.Helper()
	stream, err := st.agent.Prompt(bearer(t.Context(), token), &agentv1.PromptRequest{SessionId: id, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("prompt: %v", err)
		}
		evs = append(evs, resp.GetEvent())
	}
}

// TestRevocationCutsStreams: a token revoked while its streams are open
// ends a follow StreamEvents over gRPC and over REST, a Prompt, and the
// gateway's Stream, with UNAUTHENTICATED; the owner's other token goes on
// working.
func TestRevocationCutsStreams(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	ctx := t.Context()
	id, _ := st.createAs(t, who.alice)
	watcher, entry, err := st.tokens.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	// gRPC: the replay's first event arrives, then the stream follows.
	grpcStream, err := st.agent.StreamEvents(bearer(ctx, watcher), &agentv1.StreamEventsRequest{SessionId: id, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcStream.Recv(); err != nil {
		t.Fatal(err)
	}
	// REST: the same, as newline-delimited JSON.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+st.httpAddr+"/v1/sessions/"+id+"/events?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+watcher)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() {
		t.Fatalf("REST events: no first line (%v)", lines.Err())
	}
	// The gateway's Stream, held in the model's first turn.
	entered, release := holdModel(st, "late")
	defer close(release)
	conn, err := grpc.NewClient(st.cfg.LLMAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	llm, err := llmv1.NewLLMGatewayServiceClient(conn).Stream(bearer(ctx, watcher), &llmv1.StreamRequest{Request: &llmv1.Request{
		Model: "anthropic/claude-sonnet-4.5", Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "hi"}}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	// A Prompt, its model turn held too.
	prompt, err := st.agent.Prompt(bearer(ctx, watcher), &agentv1.PromptRequest{SessionId: id, Text: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prompt.Recv(); err != nil {
		t.Fatal(err)
	}

	if err := st.tokens.Revoke(entry.ID); err != nil {
		t.Fatal(err)
	}
	if err := authtest.RecvAll(grpcStream, nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC StreamEvents after revocation: %v, want UNAUTHENTICATED", err)
	}
	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text())
	}
	if !strings.Contains(rest.String(), `"code":16`) {
		t.Errorf("REST events after revocation ended with %q, want an UNAUTHENTICATED (16) error line", rest.String())
	}
	if err := authtest.RecvAll(prompt, nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Prompt after revocation: %v, want UNAUTHENTICATED", err)
	}
	if err := authtest.RecvAll(llm, nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gateway Stream after revocation: %v, want UNAUTHENTICATED", err)
	}
	if _, err := st.agent.GetSession(bearer(ctx, who.alice), &agentv1.GetSessionRequest{SessionId: id}); err != nil {
		t.Errorf("alice's other token: %v", err)
	}
}

// TestTenancyForwarded: a call for a session that replica a serves, made
// to replica b, is forwarded with its caller, and a decides: bob is told
// NOT_FOUND (nothing deleted), alice and an admin reach it. The replicas
// run without authentication on a trusted network, where the forwarded
// principal a caller names is believed on a cluster (forward.go).
func TestTenancyForwarded(t *testing.T) {
	d := startDeps(t)
	natsURL := natstest.StartServer(t)
	a := startReplicaProc(t, d, natsURL, "a", 10*time.Second)
	b := startReplicaProc(t, d, natsURL, "b", 10*time.Second)
	as := func(p string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), auth.ForwardedPrincipalHeader, p)
	}
	created, err := a.client.CreateSession(as("user:alice"), &agentv1.CreateSessionRequest{Model: "openai/gpt-5",
		Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	if got := created.GetSession().GetPrincipal(); got != "user:alice" {
		t.Fatalf("principal %q", got)
	}
	for _, c := range []struct {
		who  string
		want codes.Code
	}{{"user:bob", codes.NotFound}, {"user:alice", codes.OK}, {"admin:root", codes.OK}} {
		if _, err := b.client.GetSession(as(c.who), &agentv1.GetSessionRequest{SessionId: id}); status.Code(err) != c.want {
			t.Errorf("GetSession through b as %s: %v, want %v", c.who, err, c.want)
		}
	}
	if err := authtest.RecvAll(b.client.StreamEvents(as("user:bob"), &agentv1.StreamEventsRequest{SessionId: id})); status.Code(err) != codes.NotFound {
		t.Errorf("StreamEvents through b as bob: %v, want NOT_FOUND", err)
	}
	if _, err := b.client.DeleteSession(as("user:bob"), &agentv1.DeleteSessionRequest{SessionId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("DeleteSession through b as bob: %v, want NOT_FOUND", err)
	}
	if _, err := a.client.GetSession(as("user:alice"), &agentv1.GetSessionRequest{SessionId: id}); err != nil {
		t.Errorf("alice's session after bob's delete: %v", err)
	}
}

// TestTenancyNATS: through the whole stack, each person's events
// credential (IssueEventsCredential over gRPC with their own token) reads
// their own session's live events; Bob's subscriptions to Alice's
// subjects and his JetStream consumer are refused by the server, and
// Alice's subscription receives only her own session's events.
func TestTenancyNATS(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	aliceID, _ := st.createAs(t, who.alice)
	bobID, _ := st.createAs(t, who.bob)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	connect := func(token, id string) (*nats.Conn, *agentv1.IssueEventsCredentialResponse) {
		t.Helper()
		res, err := st.agent.IssueEventsCredential(bearer(ctx, token), &agentv1.IssueEventsCredentialRequest{SessionIds: []string{id}})
		if err != nil {
			t.Fatalf("events credential of %s: %v", id, err)
		}
		nc, err := nats.Connect(res.GetNatsUrl(), nats.UserInfo(res.GetUser(), res.GetPassword()), nats.CustomInboxPrefix(res.GetInboxPrefix()),
			nats.MaxReconnects(0), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc, res
	}
	anc, ares := connect(who.alice, aliceID)
	bnc, bres := connect(who.bob, bobID)
	aliceJSON := "fabro.agent.v1.json.sessions." + aliceID + ".events.>"
	hers, err := anc.SubscribeSync(aliceJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, subject := range []string{aliceJSON, "fabro.agent.v1.sessions." + aliceID + ".events.>", ares.GetInboxPrefix() + ".>", "fabro.agent.v1.json.sessions.>"} {
		if _, err := bnc.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		if err := bnc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := bnc.LastError(); err == nil || !strings.Contains(err.Error(), `Permissions Violation for Subscription to "`+subject+`"`) {
			t.Errorf("Bob subscribing to %s: %v, want the server's permissions violation", subject, err)
		}
	}
	// Nothing to set a reply subject on: any publish, JetStream's API
	// included, is refused. The consumer name is one the credentials used
	// to be granted, whose pull requests the server answered on any reply
	// subject: here Alice's.
	next := "$JS.API.CONSUMER.MSG.NEXT.FABRO_AGENT_EVENTS." + bres.GetUser() + "-1"
	if err := bnc.PublishRequest(next, "fabro.agent.v1.json.sessions."+aliceID+".events.text_delta", []byte(`{"batch":10}`)); err != nil {
		t.Fatal(err)
	}
	if err := bnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := bnc.LastError(); err == nil || !strings.Contains(err.Error(), `Permissions Violation for Publish to "`+next+`"`) {
		t.Errorf("Bob's pull request replying into Alice's subject: %v, want the server's permissions violation", err)
	}

	st.promptAs(t, who.bob, bobID)
	evs := st.promptAs(t, who.alice, aliceID)
	if len(evs) == 0 {
		t.Fatal("Alice's prompt had no events")
	}
	for range evs {
		m, err := hers.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("Alice's live events: %v", err)
		}
		if !strings.HasPrefix(m.Subject, "fabro.agent.v1.json.sessions."+aliceID+".") || !strings.HasPrefix(m.Header.Get("Fabro-Event-Msg-Id"), aliceID+":") {
			t.Errorf("Alice received %s (%s), not of her session", m.Subject, m.Header.Get("Fabro-Event-Msg-Id"))
		}
	}
}

// TestPolicyGovernsSessionTurns: a token's model list holds for the turns
// of a session it prompts, as for its own gateway calls. The agent calls
// the gateway with its service credential acting for the session's owner;
// without the prompting token's id the gateway governs the turns by no
// policy, and a token limited to one model (or to a budget) calls any model
// by prompting a session.
func TestPolicyGovernsSessionTurns(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	limited, _, err := st.tokens.IssueWithPolicy("alice", auth.RoleUser, &auth.Policy{Models: []string{"openai/*"}})
	if err != nil {
		t.Fatal(err)
	}
	free, _, err := st.tokens.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	st.fake.Enqueue(fakeprovider.Turn{Text: "hello"}, fakeprovider.Turn{Text: "hello"})
	// Its own gateway call is refused.
	conn, err := grpc.NewClient(st.cfg.LLMAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gs, err := llmv1.NewLLMGatewayServiceClient(conn).Stream(bearer(t.Context(), limited), &llmv1.StreamRequest{Request: &llmv1.Request{
		Model: "anthropic/claude-sonnet-4.5", Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "hi"}}}}}}}})
	if err == nil {
		_, err = gs.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("limited token's own Stream: %v, want PERMISSION_DENIED", err)
	}
	id, _ := st.createAs(t, free) // anthropic/claude-sonnet-4.5
	evs := st.promptAs(t, limited, id)
	if r := lastReport(t, evs); r.GetError() == nil || !strings.Contains(r.GetError().GetMessage(), "may not call model") {
		t.Errorf("the limited token's prompt on an anthropic session: %v (%v), want the model refused", eventTypes(evs), r)
	}
	// The unlimited token of the same person still prompts it.
	if r := lastReport(t, st.promptAs(t, free, id)); r.GetError() != nil {
		t.Errorf("the free token's prompt: %v", r.GetError())
	}
}

// TestRevokedTokensPromptStops: a prompt started with a token that is then
// revoked makes no further model call or command for it. Its Prompt stream
// ends at the revocation, but the prompt itself goes on (StartPrompt, or
// Prompt without cancel_on_disconnect); its later calls name the revoked
// token and are refused, instead of running governed by no policy.
func TestRevokedTokensPromptStops(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	ctx := t.Context()
	id, _ := st.createAs(t, who.alice)
	temp, entry, err := st.tokens.IssueWithPolicy("alice", auth.RoleUser, &auth.Policy{Models: []string{"anthropic/*"}})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	st.fake.Script(func(fakeprovider.Request) fakeprovider.Turn {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "shell", Arguments: args(map[string]any{"command": "echo ran > after-revoke.txt"})}}}
		}
		return fakeprovider.Turn{Text: "still here"}
	})
	started, err := st.agent.StartPrompt(bearer(ctx, temp), &agentv1.StartPromptRequest{SessionId: id, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := st.tokens.Revoke(entry.ID); err != nil {
		t.Fatal(err)
	}
	close(release)
	evs, err := st.agent.StreamEvents(bearer(ctx, who.alice), &agentv1.StreamEventsRequest{SessionId: id, PromptId: started.GetPromptId(), Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	var report *agentv1.PromptReport
	for report == nil {
		resp, err := evs.Recv()
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		report = resp.GetEvent().GetPromptCompleted().GetReport()
	}
	if report.GetStatus() == agentv1.PromptStatus_PROMPT_STATUS_COMPLETED {
		t.Errorf("the revoked token's prompt completed: %v", report)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the model was called %d times, want 1 (none after the revocation)", n)
	}
}

// TestPolicyGovernsSubagents: a subagent the model spawns, on a model of
// its choosing, runs under the token of the prompt that spawned it: a
// token limited to anthropic/* cannot reach openai through spawn_agent,
// and no openai request is made.
func TestPolicyGovernsSubagents(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	limited, _, err := st.tokens.IssueWithPolicy("alice", auth.RoleUser, &auth.Policy{Models: []string{"anthropic/*"}})
	if err != nil {
		t.Fatal(err)
	}
	var parentTurns, openaiCalls atomic.Int32
	st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if strings.HasPrefix(r.Protocol, "openai") {
			openaiCalls.Add(1)
			return fakeprovider.Turn{Text: "child on openai"}
		}
		switch parentTurns.Add(1) {
		case 1:
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "sp1", Name: "spawn_agent", Arguments: args(map[string]any{"task": "say hi", "model": "openai/gpt-5"})}}}
		case 2:
			if m := spawnedID.FindStringSubmatch(string(r.Body)); m != nil {
				return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "w1", Name: "wait", Arguments: args(map[string]any{"agent_id": m[1]})}}}
			}
		}
		return fakeprovider.Turn{Text: "parent done"}
	})
	ctx := bearer(t.Context(), limited)
	sb, err := st.sandbox.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	created, err := st.agent.CreateSession(ctx, &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sb.GetSandbox().GetSandboxId()},
		Options: &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st.promptAs(t, limited, created.GetSession().GetSessionId())
	if parentTurns.Load() < 2 {
		t.Fatalf("the parent took %d turns: no subagent was spawned", parentTurns.Load())
	}
	if n := openaiCalls.Load(); n != 0 {
		t.Errorf("a token limited to anthropic/* reached openai %d times through a subagent", n)
	}
}

// TestTenancyCreateSessionOnAnothersSandbox: bob's session on alice's
// sandbox is refused exactly as one on a sandbox id nobody has (code,
// reason and message but for the id), and makes no session.
func TestTenancyCreateSessionOnAnothersSandbox(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	_, aliceSB := st.createAs(t, who.alice)
	refusal := func(sandboxID string) string {
		_, err := st.agent.CreateSession(bearer(t.Context(), who.bob), &agentv1.CreateSessionRequest{
			Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sandboxID}})
		if err == nil {
			t.Fatalf("bob's session on sandbox %s was created", sandboxID)
		}
		s := status.Convert(err)
		b, _ := protojson.Marshal(s.Proto())
		return strings.ReplaceAll(string(b), sandboxID, "ID")
	}
	missing := "sbx-" + strings.Repeat("0", len(strings.TrimPrefix(aliceSB, "sbx-")))
	if got, want := refusal(aliceSB), refusal(missing); got != want {
		t.Errorf("on alice's sandbox:\n%s\non a missing one:\n%s", got, want)
	}
	resp, err := st.agent.ListSessions(bearer(t.Context(), who.bob), &agentv1.ListSessionsRequest{})
	if err != nil || len(resp.GetSessions()) != 0 {
		t.Errorf("bob's sessions: %v %v", resp.GetSessions(), err)
	}
}
