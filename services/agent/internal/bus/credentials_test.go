package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// connectAs connects with an issued credential, as its response tells a
// client to: user, password and inbox prefix.
func connectAs(t *testing.T, url string, cred Credential, v *violations, more ...nats.Option) *nats.Conn {
	t.Helper()
	opts := append([]nats.Option{nats.UserInfo(cred.User, cred.Password), nats.CustomInboxPrefix(cred.InboxPrefix),
		nats.ErrorHandler(v.handler), nats.MaxReconnects(0)}, more...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", cred.User, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newViolations() *violations { return &violations{changed: make(chan struct{})} }

// TestSessionCredentials: two users' credentials against the embedded
// server. Bob reads his own sessions' live events (both encodings) and
// nothing else; every way at Alice's events or her view is refused by the
// server as a permissions violation: subscribing to her subjects, her
// inbox or wider ones; publishing on her subjects or inbox; and any
// JetStream API at all, in particular a push consumer whose
// deliver_subject is in her JSON tree or her inbox and a pull request
// (CONSUMER.MSG.NEXT) whose reply subject is her JSON subject, which
// nats-server does not check against his permissions (issue 18: with the
// JetStream API allowed they put his events where she reads). Alice,
// subscribed all along, receives only her own events, and still receives
// them; the admin subscriber still reads every session, live and through
// JetStream.
func TestSessionCredentials(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "admin.nk")
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: keyFile})
	publishEvents(t, b, "s_alice", 3)
	publishEvents(t, b, "s_bob", 2)
	alice, err := b.IssueCredential("user:alice", "", []string{"s_alice"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := b.IssueCredential("user:bob", "", []string{"s_bob"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()

	// Alice listens where Bob would write: both her live trees and her inbox.
	av := newViolations()
	anc := connectAs(t, b.ClientURL(), alice, av)
	hers := map[string]*nats.Subscription{}
	for _, subject := range []string{SessionFilter("s_alice"), jsonSessionFilter("s_alice"), alice.InboxPrefix + ".>"} {
		if hers[subject], err = anc.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
	}
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}

	v := newViolations()
	nc := connectAs(t, b.ClientURL(), bob, v)

	// Bob's own: his live subjects, both encodings.
	live, err := nc.SubscribeSync(SessionFilter("s_bob"))
	if err != nil {
		t.Fatal(err)
	}
	liveJSON, err := nc.SubscribeSync(jsonSessionFilter("s_bob"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	publishEvents(t, b, "s_bob", 1)
	if _, err := live.NextMsgWithContext(ctx); err != nil {
		t.Errorf("Bob's live subscription: %v", err)
	}
	if _, err := liveJSON.NextMsgWithContext(ctx); err != nil {
		t.Errorf("Bob's live JSON subscription: %v", err)
	}

	// Alice's, or everyone's: each refused by the server.
	api := "$JS.API."
	aliceJSON := JSONSubject("s_alice", "text_delta")
	subscribe := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			sub, err := nc.SubscribeSync(subject)
			if err != nil {
				return err
			}
			// The server refuses asynchronously and sends nothing.
			publishEvents(t, b, "s_alice", 1)
			_, err = sub.NextMsgWithContext(ctx)
			return err
		}
	}
	// publish sends data on subject with reply as its reply subject ("":
	// a request, answered to his own inbox) and waits for the answer or
	// the refusal.
	publish := func(subject, reply, data string) func(context.Context) error {
		return func(ctx context.Context) error {
			if reply == "" {
				_, err := nc.RequestWithContext(ctx, subject, []byte(data))
				return err
			}
			if err := nc.PublishRequest(subject, reply, []byte(data)); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}
	}
	// Consumer names the credentials used to be granted (its user, "-n"),
	// so the JetStream attempts are ones the old permissions let through.
	name := func(n int) string { return fmt.Sprintf("%s-%d", bob.User, n) }
	create := func(n int) string {
		return api + "CONSUMER.CREATE." + StreamName + "." + name(n) + "." + SessionFilter("s_bob")
	}
	consumer := func(n int, deliver string) string {
		return fmt.Sprintf(`{"stream_name":%q,"config":{"name":%q,"deliver_subject":%q,"filter_subject":%q,"deliver_policy":"all","ack_policy":"none"}}`,
			StreamName, name(n), deliver, SessionFilter("s_bob"))
	}
	next := api + "CONSUMER.MSG.NEXT." + StreamName + "." + name(3)
	attempts := []struct {
		name    string
		subject string // what the server must refuse
		try     func(context.Context) error
	}{
		{"subscribe to Alice's session", SessionFilter("s_alice"), subscribe(SessionFilter("s_alice"))},
		{"subscribe to one of Alice's event types", Subject("s_alice", "text_delta"), subscribe(Subject("s_alice", "text_delta"))},
		{"subscribe to Alice's JSON events", jsonSessionFilter("s_alice"), subscribe(jsonSessionFilter("s_alice"))},
		{"subscribe to one of Alice's JSON event types", aliceJSON, subscribe(aliceJSON)},
		{"subscribe to every session", AllSubjects, subscribe(AllSubjects)},
		{"subscribe to every session's JSON", AllJSONSubjects, subscribe(AllJSONSubjects)},
		{"subscribe to any session's events", "fabro.agent.v1.sessions.*.events.>", subscribe("fabro.agent.v1.sessions.*.events.>")},
		{"subscribe to Alice's inbox", alice.InboxPrefix + ".>", subscribe(alice.InboxPrefix + ".>")},
		{"subscribe to every inbox", "_INBOX.>", subscribe("_INBOX.>")},
		{"subscribe to everything", ">", subscribe(">")},
		{"a push consumer delivering into Alice's JSON tree", create(1), publish(create(1), "", consumer(1, aliceJSON))},
		{"a push consumer delivering into Alice's inbox", create(2), publish(create(2), "", consumer(2, alice.InboxPrefix+".x"))},
		{"a pull consumer on his own session", create(3), publish(create(3), "", consumer(3, ""))},
		{"a pull request replying into Alice's JSON tree", next, publish(next, aliceJSON, `{"batch":10,"no_wait":true}`)},
		{"a pull request replying into Alice's inbox", next, publish(next, alice.InboxPrefix+".y", `{"batch":10,"no_wait":true}`)},
		{"the JetStream account information", api + "INFO", publish(api+"INFO", "", "")},
		{"the stream's information", api + "STREAM.INFO." + StreamName, publish(api+"STREAM.INFO."+StreamName, "", "")},
		{"a message by sequence", api + "STREAM.MSG.GET." + StreamName, publish(api+"STREAM.MSG.GET."+StreamName, "", `{"seq":1}`)},
		{"a direct get replying into Alice's JSON tree", api + "DIRECT.GET." + StreamName, publish(api+"DIRECT.GET."+StreamName, aliceJSON, `{"seq":1}`)},
		{"the list of consumers", api + "CONSUMER.LIST." + StreamName, publish(api+"CONSUMER.LIST."+StreamName, "", "")},
		{"publish on Alice's session", Subject("s_alice", "text_delta"), publish(Subject("s_alice", "text_delta"), "", "forged")},
		{"publish on Alice's JSON tree", aliceJSON, publish(aliceJSON, "", `{"forged":true}`)},
		{"publish into Alice's inbox", alice.InboxPrefix + ".z", publish(alice.InboxPrefix+".z", "", "forged")},
		{"publish on his own session", Subject("s_bob", "text_delta"), publish(Subject("s_bob", "text_delta"), "", "forged")},
	}
	for _, a := range attempts {
		// A bound per attempt, so one accepted attempt cannot use up the
		// time of the others.
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		actx, refused := v.refused(pctx, a.subject)
		if err := a.try(actx); err == nil {
			t.Errorf("%s: accepted", a.name)
		}
		if !refused() {
			t.Errorf("%s: the server reported no permissions violation for %s", a.name, a.subject)
		}
		pcancel()
	}

	// Alice still gets her own live events, and got nothing but hers: the
	// injections would have come long before this event.
	final := NewLog(b, "s_alice", "", "s_alice", 1000, nil)
	if _, err := final.Emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "last"}}}); err != nil {
		t.Fatal(err)
	}
	if err := final.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	last := MsgID("s_alice", 1001)
	for _, subject := range []string{SessionFilter("s_alice"), jsonSessionFilter("s_alice")} {
		for {
			m, err := hers[subject].NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("Alice's subscription to %s: %v before her last event", subject, err)
			}
			id := m.Header.Get(HeaderEventMsgID)
			if !strings.HasPrefix(id, "s_alice:") {
				t.Errorf("Alice's subscription to %s received %q on %s (%s), not hers", subject, id, m.Subject, m.Data)
			}
			if id == last {
				break
			}
		}
	}
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}
	for subject, sub := range hers {
		if n, _, _ := sub.Pending(); n != 0 {
			m, _ := sub.NextMsg(0)
			t.Errorf("Alice's subscription to %s holds %d more messages, such as %v %q", subject, n, m.Header, m.Data)
		}
	}
	av.mu.Lock()
	if len(av.errs) != 0 {
		t.Errorf("Alice was refused %q", av.errs)
	}
	av.mu.Unlock()

	// The admin subscriber reads every session, live and through JetStream.
	key, err := nats.NkeyOptionFromSeed(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := nats.Connect(b.ClientURL(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	all, err := admin.SubscribeSync(AllSubjects)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	publishEvents(t, b, "s_alice", 1)
	publishEvents(t, b, "s_bob", 1)
	seen := map[string]bool{}
	for range 2 {
		m, err := all.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("admin subscriber: %v", err)
		}
		seen[strings.Split(strings.TrimPrefix(m.Subject, SubjectPrefix), ".")[0]] = true
	}
	if !seen["s_alice"] || !seen["s_bob"] {
		t.Errorf("the admin subscriber saw sessions %v, want both", seen)
	}
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ajs.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{SessionFilter("s_alice")}})
	if err != nil {
		t.Fatalf("the admin subscriber's consumer: %v", err)
	}
	m, err := cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("the admin subscriber reads Alice's stored events: %v", err)
	}
	if got, want := m.Headers().Get(jetstream.MsgIDHeader), MsgID("s_alice", 1); got != want {
		t.Errorf("the admin subscriber's first stored event of Alice: %q, want %q", got, want)
	}
}

// TestSessionCredentialRefused: a wrong password, another user's
// password, a token, and a lapsed credential are refused; a lapsed
// credential's connection is closed at expiry.
func TestSessionCredentialRefused(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	a, err := b.IssueCredential("user:alice", "", []string{"s_a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	o, err := b.IssueCredential("user:bob", "", []string{"s_b"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]nats.Option{
		"wrong password":          nats.UserInfo(a.User, a.Password+"x"),
		"another user's password": nats.UserInfo(a.User, o.Password),
		"no password":             nats.UserInfo(a.User, ""),
		"password as a token":     nats.Token(a.Password),
	} {
		if nc, err := nats.Connect(b.ClientURL(), opt, nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}

	short, err := b.IssueCredential("user:alice", "", []string{"s_a"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	connectAs(t, b.ClientURL(), short, newViolations(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the lapsed credential's connection is still open")
	}
	if nc, err := nats.Connect(b.ClientURL(), nats.UserInfo(short.User, short.Password), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a lapsed credential connected")
	}
}

// TestSessionCredentialLimits: a principal holds at most
// MaxCredentialsPerPrincipal unexpired credentials (another principal is
// not affected, and a lapsed one frees its place); the session list is
// bounded and must be subject tokens; no listener, no credential.
func TestSessionCredentialLimits(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	now := time.Now()
	b.auth.now = func() time.Time { return now }
	for i := range MaxCredentialsPerPrincipal {
		ttl := time.Hour
		if i == 0 {
			ttl = time.Minute
		}
		if _, err := b.IssueCredential("user:alice", "", []string{"s_a"}, ttl); err != nil {
			t.Fatalf("credential %d: %v", i, err)
		}
	}
	if _, err := b.IssueCredential("user:alice", "", []string{"s_a"}, time.Hour); !errors.Is(err, ErrCredentialLimit) {
		t.Errorf("credential %d: %v, want %v", MaxCredentialsPerPrincipal+1, err, ErrCredentialLimit)
	}
	if _, err := b.IssueCredential("user:bob", "", []string{"s_b"}, time.Hour); err != nil {
		t.Errorf("Bob's first credential: %v", err)
	}
	now = now.Add(2 * time.Minute) // the first lapsed
	if _, err := b.IssueCredential("user:alice", "", []string{"s_a"}, time.Hour); err != nil {
		t.Errorf("a credential once one lapsed: %v", err)
	}

	many := make([]string, MaxCredentialSessions+1)
	for i := range many {
		many[i] = fmt.Sprintf("s_%d", i)
	}
	for name, ids := range map[string][]string{
		"no session":         {},
		"too many sessions":  many,
		"a wildcard":         {"*"},
		"a subject tail":     {">"},
		"a dotted id":        {"s_a.events"},
		"an id with a space": {"s a"},
		"an empty id":        {""},
	} {
		if _, err := b.IssueCredential("user:carol", "", ids, time.Hour); err == nil {
			t.Errorf("%s: issued", name)
		}
	}

	inproc := open(t, Config{StoreDir: t.TempDir()})
	if _, err := inproc.IssueCredential("user:alice", "", []string{"s_a"}, time.Hour); !errors.Is(err, ErrNotEmbedded) {
		t.Errorf("in-process only server: %v, want %v", err, ErrNotEmbedded)
	}
}

// TestListenExposure: the embedded server refuses a listener that is not
// loopback without TLS unless Insecure, which warns; a refused Open never
// listens.
func TestListenExposure(t *testing.T) {
	for _, tc := range []struct {
		listen, cert string
		insecure     bool
		refused      bool
		warned       bool
	}{
		{listen: "127.0.0.1:7723"},
		{listen: "[::1]:7723"},
		{listen: "localhost:7723"},
		{listen: "0.0.0.0:7723", refused: true},
		{listen: ":7723", refused: true},
		{listen: "[::]:7723", refused: true},
		{listen: "192.0.2.10:7723", refused: true},
		{listen: "0.0.0.0:7723", insecure: true, warned: true},
		{listen: "0.0.0.0:7723", cert: "cert.pem"},
	} {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		host, _, _ := strings.Cut(strings.TrimPrefix(tc.listen, "["), "]:")
		if !strings.HasPrefix(tc.listen, "[") {
			host, _, _ = strings.Cut(tc.listen, ":")
		}
		err := checkExposure(t.Context(), logger, Config{Listen: tc.listen, ListenTLSCertFile: tc.cert, Insecure: tc.insecure}, host)
		if (err != nil) != tc.refused {
			t.Errorf("%s (tls %v, insecure %v): %v, want refused %v", tc.listen, tc.cert != "", tc.insecure, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "-insecure") {
			t.Errorf("%s: %q does not say how to proceed", tc.listen, err)
		}
		if got := strings.Contains(logs.String(), "INSECURE"); got != tc.warned {
			t.Errorf("%s: warned %v, want %v: %s", tc.listen, got, tc.warned, logs.String())
		}
	}
	_, err := Open(t.Context(), Config{StoreDir: t.TempDir(), Listen: "0.0.0.0:-1"}, discard())
	if err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("Open on 0.0.0.0 without TLS: %v, want refused", err)
	}
}

// TestSessionCredentialsConcurrent: 100 callers issuing at once for one
// principal get exactly MaxCredentialsPerPrincipal credentials, each with
// its own user and password, and connecting with all of them at once
// works.
func TestSessionCredentialsConcurrent(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	var (
		mu    sync.Mutex
		got   []Credential
		limit int
		wg    sync.WaitGroup
	)
	for range 100 {
		wg.Go(func() {
			c, err := b.IssueCredential("user:alice", "", []string{"s_a"}, time.Hour)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrCredentialLimit):
				limit++
			case err != nil:
				t.Error(err)
			default:
				got = append(got, c)
			}
		})
	}
	wg.Wait()
	if len(got) != MaxCredentialsPerPrincipal || limit != 100-MaxCredentialsPerPrincipal {
		t.Fatalf("%d issued, %d refused; want %d and %d", len(got), limit, MaxCredentialsPerPrincipal, 100-MaxCredentialsPerPrincipal)
	}
	users := map[string]bool{}
	for _, c := range got {
		users[c.User] = true
		wg.Go(func() {
			nc, err := nats.Connect(b.ClientURL(), nats.UserInfo(c.User, c.Password), nats.CustomInboxPrefix(c.InboxPrefix))
			if err != nil {
				t.Errorf("connect as %s: %v", c.User, err)
				return
			}
			nc.Close()
		})
	}
	wg.Wait()
	if len(users) != len(got) {
		t.Errorf("%d distinct users among %d credentials", len(users), len(got))
	}
}

// TestSessionCredentialRevoked: once the fabro token a credential was
// issued to is revoked, RevokeCredentials closes the credential's open
// connection and refuses it a new one; a credential of a token still
// issued, or of none, keeps reading.
func TestSessionCredentialRevoked(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	issue := func(principal, tokenID, session string) Credential {
		t.Helper()
		c, err := b.IssueCredential(principal, tokenID, []string{session}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	creds := []struct {
		name    string
		cred    Credential
		session string
		revoked bool
	}{
		{"Alice's, of her revoked token", issue("user:alice", "tok_alice", "s_a"), "s_a", true},
		{"Alice's second, of the same token", issue("user:alice", "tok_alice", "s_a"), "s_a", true},
		{"Bob's, of his live token", issue("user:bob", "tok_bob", "s_b"), "s_b", false},
		{"one of no token", issue("user:carol", "", "s_c"), "s_c", false},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	closed := make([]chan struct{}, len(creds))
	subs := make([]*nats.Subscription, len(creds))
	for i, c := range creds {
		closed[i] = make(chan struct{})
		done := closed[i]
		nc := connectAs(t, b.ClientURL(), c.cred, newViolations(), nats.ClosedHandler(func(*nats.Conn) { close(done) }))
		sub, err := nc.SubscribeSync(SessionFilter(c.session))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		subs[i] = sub
	}
	if n := b.RevokeCredentials(func(id string) bool { return id != "tok_alice" }); n != 2 {
		t.Errorf("RevokeCredentials ended %d credentials, want 2", n)
	}
	if n := b.RevokeCredentials(func(id string) bool { return id != "tok_alice" }); n != 0 {
		t.Errorf("RevokeCredentials again ended %d more, want 0", n)
	}
	for i, c := range creds {
		if c.revoked {
			select {
			case <-closed[i]:
			case <-ctx.Done():
				t.Fatalf("%s: its connection is still open", c.name)
			}
			if nc, err := nats.Connect(b.ClientURL(), nats.UserInfo(c.cred.User, c.cred.Password), nats.MaxReconnects(0)); err == nil {
				nc.Close()
				t.Errorf("%s: connects again after its token was revoked", c.name)
			}
			continue
		}
		publishEvents(t, b, c.session, 1)
		if _, err := subs[i].NextMsgWithContext(ctx); err != nil {
			t.Errorf("%s: no longer reads its session: %v", c.name, err)
		}
	}
}
