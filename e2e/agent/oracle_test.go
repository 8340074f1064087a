package agent_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// unknownLike is an id of the same form as id that no session has.
func unknownLike(id string) string {
	last := id[len(id)-1]
	c := byte('a')
	if last == 'a' {
		c = 'b'
	}
	return id[:len(id)-1] + string(c)
}

// sameRefusal checks that got is the refusal of an unknown id, want,
// byte for byte once the ids are swapped: code, message and details.
func sameRefusal(t *testing.T, what string, got, want error, id, unknown string) {
	t.Helper()
	g, w := status.Convert(got).Proto(), status.Convert(want).Proto()
	gj, _ := protojson.Marshal(g)
	wj, _ := protojson.Marshal(w)
	if codes.Code(g.GetCode()) != codes.NotFound || strings.ReplaceAll(string(gj), id, unknown) != string(wj) {
		t.Errorf("%s:\n got %s\nwant %s (an unknown id's)", what, gj, wj)
	}
}

// TestOracleCorruptRecord: a session whose record cannot be read is, to
// a user (its owner cannot be read either), the NOT_FOUND of an unknown
// id, not DATA_LOSS; an admin hears DATA_LOSS.
func TestOracleCorruptRecord(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	id, _ := st.createAs(t, who.alice)
	if _, err := st.agent.CloseSession(bearer(t.Context(), who.alice), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.cfg.DataDir, "agent", "sessions", id+".pb"), []byte("\xff\xffnot a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := unknownLike(id)
	_, want := st.agent.GetSession(bearer(t.Context(), who.bob), &agentv1.GetSessionRequest{SessionId: unknown})
	for _, c := range []struct{ name, token string }{{"bob", who.bob}, {"alice", who.alice}} {
		_, err := st.agent.GetSession(bearer(t.Context(), c.token), &agentv1.GetSessionRequest{SessionId: id})
		sameRefusal(t, c.name+" on a corrupt record", err, want, id, unknown)
	}
	if _, err := st.agent.GetSession(bearer(t.Context(), who.root), &agentv1.GetSessionRequest{SessionId: id}); status.Code(err) != codes.DataLoss {
		t.Errorf("an admin on a corrupt record: %v, want DATA_LOSS", err)
	}
}

// TestOracleOwnerReplicaDown: with the replica serving alice's session
// killed (its lease still held), bob asking another replica gets the
// NOT_FOUND of an unknown id, decided from the session's record before
// anything is forwarded; alice is told UNAVAILABLE, and no error names an
// address.
func TestOracleOwnerReplicaDown(t *testing.T) {
	d := startDeps(t)
	natsURL := natstest.StartServer(t)
	a := startReplicaProc(t, d, natsURL, "a", time.Minute)
	b := startReplicaProc(t, d, natsURL, "b", time.Minute)
	as := func(p string) metadata.MD { return metadata.Pairs(auth.ForwardedPrincipalHeader, p) }
	ctxAs := func(p string) context.Context { return metadata.NewOutgoingContext(t.Context(), as(p)) }
	created, err := a.client.CreateSession(ctxAs("user:alice"), &agentv1.CreateSessionRequest{Model: "openai/gpt-5",
		Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	if _, err := b.client.GetSession(ctxAs("user:alice"), &agentv1.GetSessionRequest{SessionId: id}); err != nil {
		t.Fatalf("alice through b with a up: %v", err)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	unknown := unknownLike(id)
	_, want := b.client.GetSession(ctxAs("user:bob"), &agentv1.GetSessionRequest{SessionId: unknown})
	_, err = b.client.GetSession(ctxAs("user:bob"), &agentv1.GetSessionRequest{SessionId: id})
	sameRefusal(t, "bob through b, a down", err, want, id, unknown)
	err = authtest.RecvAll(b.client.StreamEvents(ctxAs("user:bob"), &agentv1.StreamEventsRequest{SessionId: id}))
	_, wantStream := b.client.GetSession(ctxAs("user:bob"), &agentv1.GetSessionRequest{SessionId: unknown})
	if status.Code(err) != codes.NotFound || status.Code(wantStream) != codes.NotFound {
		t.Errorf("bob's StreamEvents through b, a down: %v", err)
	}
	_, err = b.client.GetSession(ctxAs("user:alice"), &agentv1.GetSessionRequest{SessionId: id})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("alice through b, a down: %v, want UNAVAILABLE", err)
	}
	full, _ := protojson.Marshal(status.Convert(err).Proto())
	host := a.addr[:strings.LastIndexByte(a.addr, ':')]
	if strings.Contains(string(full), a.addr) || strings.Contains(string(full), host) {
		t.Errorf("the refusal names a's address %s: %s", a.addr, full)
	}
}

// TestOpaqueStateCarriedBack: the opaque reasoning item a turn of an
// authenticated user's session got (sealed by the gateway to the session's
// owner, whom the agent names) is carried back by the agent as received,
// and the provider gets its own item again on the next turn, never the
// envelope.
func TestOpaqueStateCarriedBack(t *testing.T) {
	st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
	who := newPeople(t, st)
	ctx := bearer(t.Context(), who.alice)
	resp, err := st.agent.CreateSession(ctx, &agentv1.CreateSessionRequest{Model: "openai/gpt-5",
		Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: t.TempDir()}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetSessionId()
	st.fake.Enqueue(fakeprovider.Turn{Reasoning: "look first", Text: "one"})
	st.promptAs(t, who.alice, id)
	first := len(st.fake.Requests())
	st.fake.Enqueue(fakeprovider.Turn{Text: "two"})
	evs := st.promptAs(t, who.alice, id)
	reqs := st.fake.Requests()
	if len(reqs) <= first {
		t.Fatalf("no second turn reached the provider: %v", evs)
	}
	body := string(reqs[len(reqs)-1].Body)
	want := "gAAAAB" + base64.StdEncoding.EncodeToString([]byte("enc:look first")) // the fake's encrypted_content
	if !strings.Contains(body, `"encrypted_content":"`+want+`"`) || strings.Contains(body, "fabro2.") {
		t.Fatalf("the provider did not get its reasoning item back as it made it: %s", body)
	}
}
