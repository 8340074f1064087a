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

// TestSessionCredentials: Bob's credential reads Bob's session, live and
// through his consumers, and every way at Alice's session (her subjects,
// a wider subject, her inbox, a consumer filtered to her session or to
// every session, one with another name, the stream's messages by
// sequence, the stream's information) is refused by the server; the
// admin subscriber still reads everything; the consumer cap holds.
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
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	v := newViolations()
	nc := connectAs(t, b.ClientURL(), bob, v)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// Bob's own: his live subjects (both encodings) and his consumers.
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
	cons, err := js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{
		Durable: bob.Consumers[0], FilterSubject: SessionFilter("s_bob"), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("Bob's consumer on his session: %v", err)
	}
	for i := range 2 {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("Bob's read %d: %v", i, err)
		}
		if got, want := msg.Headers().Get(jetstream.MsgIDHeader), MsgID("s_bob", uint64(i+1)); got != want {
			t.Errorf("Bob's read %d: %q, want %q", i, got, want)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			t.Errorf("Bob's ack %d: %v", i, err)
		}
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
	consumer := func(name string, cfg jetstream.ConsumerConfig) func(context.Context) error {
		return func(ctx context.Context) error {
			cfg.Name = name
			_, err := js.CreateOrUpdateConsumer(ctx, StreamName, cfg)
			return err
		}
	}
	attempts := []struct {
		name    string
		subject string // what the server must refuse
		try     func(context.Context) error
	}{
		{"subscribe to Alice's session", SessionFilter("s_alice"), subscribe(SessionFilter("s_alice"))},
		{"subscribe to one of Alice's event types", Subject("s_alice", "text_delta"), subscribe(Subject("s_alice", "text_delta"))},
		{"subscribe to Alice's JSON events", jsonSessionFilter("s_alice"), subscribe(jsonSessionFilter("s_alice"))},
		{"subscribe to every session", AllSubjects, subscribe(AllSubjects)},
		{"subscribe to every session's JSON", AllJSONSubjects, subscribe(AllJSONSubjects)},
		{"subscribe to any session's events", "fabro.agent.v1.sessions.*.events.>", subscribe("fabro.agent.v1.sessions.*.events.>")},
		{"subscribe to Alice's inbox", alice.InboxPrefix + ".>", subscribe(alice.InboxPrefix + ".>")},
		{"subscribe to every inbox", "_INBOX.>", subscribe("_INBOX.>")},
		{"subscribe to everything", ">", subscribe(">")},
		{"a consumer on Alice's session", api + "CONSUMER.CREATE." + StreamName + "." + bob.Consumers[1] + "." + SessionFilter("s_alice"),
			consumer(bob.Consumers[1], jetstream.ConsumerConfig{FilterSubject: SessionFilter("s_alice")})},
		{"a consumer on every session", api + "CONSUMER.CREATE." + StreamName + "." + bob.Consumers[1] + "." + AllSubjects,
			consumer(bob.Consumers[1], jetstream.ConsumerConfig{FilterSubject: AllSubjects})},
		{"a consumer on any session's events", api + "CONSUMER.CREATE." + StreamName + "." + bob.Consumers[1] + ".fabro.agent.v1.sessions.*.events.>",
			consumer(bob.Consumers[1], jetstream.ConsumerConfig{FilterSubject: "fabro.agent.v1.sessions.*.events.>"})},
		{"a consumer with no filter", api + "CONSUMER.CREATE." + StreamName + "." + bob.Consumers[1],
			consumer(bob.Consumers[1], jetstream.ConsumerConfig{})},
		{"a consumer with two filters, his and Alice's", api + "CONSUMER.CREATE." + StreamName + "." + bob.Consumers[1],
			consumer(bob.Consumers[1], jetstream.ConsumerConfig{FilterSubjects: []string{SessionFilter("s_bob"), SessionFilter("s_alice")}})},
		{"a fifth consumer, on his own session", api + "CONSUMER.CREATE." + StreamName + ".extra." + SessionFilter("s_bob"),
			consumer("extra", jetstream.ConsumerConfig{FilterSubject: SessionFilter("s_bob")})},
		{"one of Alice's consumer names", api + "CONSUMER.CREATE." + StreamName + "." + alice.Consumers[0] + "." + SessionFilter("s_bob"),
			consumer(alice.Consumers[0], jetstream.ConsumerConfig{FilterSubject: SessionFilter("s_bob")})},
		{"pull from Alice's consumer", api + "CONSUMER.MSG.NEXT." + StreamName + "." + alice.Consumers[0], func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, api+"CONSUMER.MSG.NEXT."+StreamName+"."+alice.Consumers[0], []byte(`{"batch":1}`))
			return err
		}},
		{"read a message by sequence", api + "STREAM.MSG.GET." + StreamName, func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, api+"STREAM.MSG.GET."+StreamName, []byte(`{"seq":1}`))
			return err
		}},
		{"direct get by sequence", api + "DIRECT.GET." + StreamName, func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, api+"DIRECT.GET."+StreamName, []byte(`{"seq":1}`))
			return err
		}},
		{"the stream's information (it lists the sessions)", api + "STREAM.INFO." + StreamName, func(ctx context.Context) error {
			_, err := js.Stream(ctx, StreamName)
			return err
		}},
		{"the list of consumers", api + "CONSUMER.LIST." + StreamName, func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, api+"CONSUMER.LIST."+StreamName, nil)
			return err
		}},
		{"publish on his own session", Subject("s_bob", "text_delta"), func(ctx context.Context) error {
			if err := nc.Publish(Subject("s_bob", "text_delta"), []byte("forged")); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}},
	}
	for _, a := range attempts {
		// A bound per attempt, so one accepted attempt cannot use up the
		// time of the others.
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		actx, refused := v.refused(pctx, a.subject)
		if err := a.try(actx); err == nil {
			t.Errorf("%s: accepted", a.name)
		}
		if !refused() {
			t.Errorf("%s: the server reported no permissions violation for %s", a.name, a.subject)
		}
		pcancel()
	}

	// The cap: his four names, no more, whatever he asks.
	for _, name := range bob.Consumers[1:] {
		if _, err := js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{Name: name, FilterSubject: SessionFilter("s_bob")}); err != nil {
			t.Fatalf("Bob's consumer %s: %v", name, err)
		}
	}
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	var his []string
	for info := range stream.ListConsumers(ctx).Info() {
		if strings.HasPrefix(info.Name, bob.User) {
			his = append(his, info.Name)
			if info.Config.FilterSubject != SessionFilter("s_bob") || len(info.Config.FilterSubjects) != 0 {
				t.Errorf("Bob's consumer %s filters %q %q", info.Name, info.Config.FilterSubject, info.Config.FilterSubjects)
			}
		}
	}
	if len(his) != CredentialConsumers {
		t.Errorf("Bob has consumers %v, want %d", his, CredentialConsumers)
	}
	if err := js.DeleteConsumer(ctx, StreamName, bob.Consumers[3]); err != nil {
		t.Errorf("Bob deletes his own consumer: %v", err)
	}

	// The admin subscriber reads every session.
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
