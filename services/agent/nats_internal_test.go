package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
)

// eventsService is an agent whose only sessions are records: s_alice of
// user:alice and s_bob of user:bob. Nothing here calls the gateway or the
// sandbox service, so their addresses are never dialled.
func eventsService(t *testing.T, natsURL string) *Service {
	t.Helper()
	return eventsServiceWith(t, Config{NATSURL: natsURL})
}

// eventsServiceWith is eventsService with cfg's other settings.
func eventsServiceWith(t *testing.T, cfg Config) *Service {
	t.Helper()
	cfg.DataDir, cfg.NATSListen, cfg.LLMAddr, cfg.SandboxAddr = t.TempDir(), "127.0.0.1:-1", "127.0.0.1:1", "127.0.0.1:1"
	s, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for id, owner := range map[string]string{"s_alice": "user:alice", "s_bob": "user:bob"} {
		rec := &agentv1.SessionRecord{FormatVersion: records.FormatVersion, Session: &agentv1.Session{SessionId: id, Principal: owner, State: agentv1.SessionState_SESSION_STATE_CLOSED}}
		if _, err := s.records.Put(t.Context(), rec, records.Any); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func as(name string, role auth.Role) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{Name: name, Role: role})
}

// TestIssueEventsCredential: a user gets a credential for their own
// sessions only (another's is NOT_FOUND, exactly as an unknown one, and a
// list with one of another's issues nothing); an admin for anyone's; the
// credential works against the server as its response describes (its
// sessions' live subjects, no JetStream: replay is StreamEvents); bad
// requests are INVALID_ARGUMENT naming the field; the per-principal
// limit is RESOURCE_EXHAUSTED.
func TestIssueEventsCredential(t *testing.T) {
	s := eventsService(t, "")
	alice, bob, admin := as("alice", auth.RoleUser), as("bob", auth.RoleUser), as("root", auth.RoleAdmin)
	issue := func(ctx context.Context, ids ...string) (*agentv1.IssueEventsCredentialResponse, error) {
		return s.IssueEventsCredential(ctx, &agentv1.IssueEventsCredentialRequest{SessionIds: ids})
	}

	res, err := issue(alice, "s_alice")
	if err != nil {
		t.Fatalf("Alice's own session: %v", err)
	}
	// The deprecated stream and consumer_names stay empty: no JetStream.
	//lint:ignore SA1019 the test checks that the deprecated fields stay empty
	deprecatedEmpty := res.GetStream() == "" && len(res.GetConsumerNames()) == 0
	if res.GetNatsUrl() != s.NATSURL() || res.GetUser() == "" || res.GetPassword() == "" || !deprecatedEmpty ||
		!strings.HasPrefix(res.GetInboxPrefix(), "_INBOX_") {
		t.Errorf("response %v", res)
	}
	if d := time.Until(res.GetExpireTime().AsTime()); d < 14*time.Minute || d > 15*time.Minute {
		t.Errorf("expires in %s, want the default 15m", d)
	}
	for _, want := range []string{bus.SessionFilter("s_alice"), bus.JSONSubjectPrefix + "s_alice.events.>"} {
		if !strings.Contains(strings.Join(res.GetSubjects(), " "), want) {
			t.Errorf("subjects %q lack %s", res.GetSubjects(), want)
		}
	}

	// As the response says: user, password, inbox prefix; a live
	// subscription to each of its subjects works, and the JetStream API is
	// refused by the server.
	nc, err := nats.Connect(res.GetNatsUrl(), nats.UserInfo(res.GetUser(), res.GetPassword()), nats.CustomInboxPrefix(res.GetInboxPrefix()),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatalf("connect with the credential: %v", err)
	}
	defer nc.Close()
	for _, subject := range res.GetSubjects() {
		if _, err := nc.SubscribeSync(subject); err != nil {
			t.Errorf("subscribe to %s: %v", subject, err)
		}
	}
	if err := nc.Flush(); err != nil || nc.LastError() != nil {
		t.Fatalf("subscriptions to its subjects: %v %v", err, nc.LastError())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Refused, the request has no answer: a bound, then the server's word.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateConsumer(ctx, bus.StreamName, jetstream.ConsumerConfig{FilterSubject: bus.SessionFilter("s_alice")}); err == nil {
		t.Error("a JetStream consumer on Alice's own session: accepted")
	}
	if err := nc.LastError(); err == nil || !strings.Contains(err.Error(), `Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.`) {
		t.Errorf("the consumer got %v from the server, want a permissions violation", err)
	}

	unknown, errUnknown := issue(bob, "s_nobody")
	for name, ctx := range map[string]context.Context{"Bob": bob, "an anonymous caller": context.Background()} {
		_, err := issue(ctx, "s_alice")
		if status.Code(err) != codes.NotFound || grpcerr.ReasonOf(err) != grpcerr.ReasonOf(errUnknown) ||
			status.Convert(err).Message() != strings.ReplaceAll(status.Convert(errUnknown).Message(), "s_nobody", "s_alice") {
			t.Errorf("%s on Alice's session: %v, want what an unknown session gets (%v)", name, err, errUnknown)
		}
	}
	if unknown != nil {
		t.Error("an unknown session got a credential")
	}
	if _, err := issue(bob, "s_bob", "s_alice"); status.Code(err) != codes.NotFound {
		t.Errorf("Bob's and Alice's sessions: %v, want NOT_FOUND", err)
	}
	if _, err := issue(admin, "s_alice", "s_bob"); err != nil {
		t.Errorf("an admin on both: %v", err)
	}

	many := make([]string, bus.MaxCredentialSessions+1)
	for i := range many {
		many[i] = fmt.Sprintf("s_%d", i)
	}
	for _, tc := range []struct {
		name  string
		req   *agentv1.IssueEventsCredentialRequest
		field string
	}{
		{"no session", &agentv1.IssueEventsCredentialRequest{}, "session_ids"},
		{"too many", &agentv1.IssueEventsCredentialRequest{SessionIds: many}, "session_ids"},
		{"twice the same", &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice", "s_alice"}}, "session_ids[1]"},
		{"a wildcard", &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"*"}}, "session_ids[0]"},
		{"a subject", &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice.events.>"}}, "session_ids[0]"},
		{"a ttl too short", &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice"}, Ttl: durationpb.New(time.Second)}, "ttl"},
		{"a ttl too long", &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice"}, Ttl: durationpb.New(2 * time.Hour)}, "ttl"},
		{"a negative ttl", &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice"}, Ttl: &durationpb.Duration{Seconds: -60}}, "ttl"},
	} {
		_, err := s.IssueEventsCredential(alice, tc.req)
		v := grpcerr.ViolationsOf(err)
		if status.Code(err) != codes.InvalidArgument || len(v) != 1 || v[0].GetField() != tc.field {
			t.Errorf("%s: %v (%v), want INVALID_ARGUMENT on %s", tc.name, err, v, tc.field)
		}
	}

	// Alice has one; the limit is reached at MaxCredentialsPerPrincipal.
	for i := 1; i < bus.MaxCredentialsPerPrincipal; i++ {
		if _, err := issue(alice, "s_alice"); err != nil {
			t.Fatalf("credential %d: %v", i+1, err)
		}
	}
	_, err = s.IssueEventsCredential(alice, &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice"}, Ttl: durationpb.New(time.Hour)})
	if status.Code(err) != codes.ResourceExhausted || grpcerr.ReasonOf(err) != reasonEventsCredentialLimit {
		t.Errorf("one credential too many: %v, want RESOURCE_EXHAUSTED %s", err, reasonEventsCredentialLimit)
	}
	if _, err := issue(bob, "s_bob"); err != nil {
		t.Errorf("Bob, at Alice's limit: %v", err)
	}
}

// TestIssueEventsCredentialExternal: with an external NATS server the
// operator issues credentials, so the service refuses.
func TestIssueEventsCredentialExternal(t *testing.T) {
	s := eventsService(t, natstest.StartServer(t))
	_, err := s.IssueEventsCredential(as("alice", auth.RoleUser), &agentv1.IssueEventsCredentialRequest{SessionIds: []string{"s_alice"}})
	if status.Code(err) != codes.FailedPrecondition || grpcerr.ReasonOf(err) != reasonNATSNotEmbedded {
		t.Errorf("external server: %v, want FAILED_PRECONDITION %s", err, reasonNATSNotEmbedded)
	}
}

// TestEventsCredentialEndsWithToken: an events credential lasts as long
// as the fabro token it was issued to. Revoking Alice's token closes the
// NATS connection of her credential and refuses it a new one, as her gRPC
// streams end; Bob's credential, of a token still issued, reads on.
func TestEventsCredentialEndsWithToken(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	s := eventsServiceWith(t, Config{Tokens: store})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type holder struct {
		name, session string
		entry         auth.Entry
		res           *agentv1.IssueEventsCredentialResponse
		nc            *nats.Conn
		closed        chan struct{}
	}
	holders := []*holder{{name: "alice", session: "s_alice"}, {name: "bob", session: "s_bob"}}
	for _, h := range holders {
		_, e, err := store.Issue(h.name, auth.RoleUser)
		if err != nil {
			t.Fatal(err)
		}
		h.entry = e
		caller := auth.WithPrincipal(ctx, auth.Principal{Name: h.name, Role: auth.RoleUser, TokenID: e.ID})
		if h.res, err = s.IssueEventsCredential(caller, &agentv1.IssueEventsCredentialRequest{SessionIds: []string{h.session}}); err != nil {
			t.Fatalf("%s's credential: %v", h.name, err)
		}
		h.closed = make(chan struct{})
		done := h.closed
		if h.nc, err = nats.Connect(h.res.GetNatsUrl(), nats.UserInfo(h.res.GetUser(), h.res.GetPassword()), nats.CustomInboxPrefix(h.res.GetInboxPrefix()),
			nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(done) })); err != nil {
			t.Fatalf("%s connects: %v", h.name, err)
		}
		t.Cleanup(h.nc.Close)
	}
	if err := store.Revoke(holders[0].entry.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-holders[0].closed:
	case <-ctx.Done():
		t.Fatal("Alice's NATS connection is still open after her token was revoked")
	}
	if nc, err := nats.Connect(holders[0].res.GetNatsUrl(), nats.UserInfo(holders[0].res.GetUser(), holders[0].res.GetPassword()), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("Alice's credential connects again after her token was revoked")
	}
	if !holders[1].nc.IsConnected() {
		t.Errorf("Bob's connection, of a live token: %v", holders[1].nc.Status())
	}
}
