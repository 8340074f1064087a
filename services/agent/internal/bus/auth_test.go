package bus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// violations collects the asynchronous errors the server sends a client.
type violations struct {
	mu      sync.Mutex
	errs    []string
	changed chan struct{} // closed and replaced on every error
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
	close(v.changed)
	v.changed = make(chan struct{})
}

// refused returns a context that ends once the server has reported a
// permissions violation for subject, and reports whether it did.
func (v *violations) refused(parent context.Context, subject string) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(parent)
	seen := make(chan struct{})
	go func() {
		defer cancel()
		for {
			v.mu.Lock()
			for _, e := range v.errs {
				if strings.Contains(e, "Permissions Violation") && strings.Contains(e, `"`+subject+`"`) {
					v.mu.Unlock()
					close(seen)
					return
				}
			}
			ch := v.changed
			v.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() bool {
		select {
		case <-seen:
			return true
		case <-parent.Done():
			return false
		}
	}
}

// publishEvents stores n events of session s through the agent's own
// connection.
func publishEvents(t *testing.T, b *Bus, s string, n int) {
	t.Helper()
	log := NewLog(b, s, "", s, 0, nil)
	for range n {
		if _, err := log.Emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedServerRequiresCredentials: anonymous clients and unknown keys
// are refused; the subscriber key reads the events, live and stored, and
// every attempt to write, purge or delete is refused with nothing changed.
func TestEmbeddedServerRequiresCredentials(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "sub.nk")
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: keyFile})
	publishEvents(t, b, "s_1", 3)

	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("subscriber key file: %v %v, want mode 0600", fi, err)
	}
	stranger, _ := nkeys.CreateUser()
	strangerPub, _ := stranger.PublicKey()
	for name, opts := range map[string][]nats.Option{
		"anonymous":     nil,
		"user/password": {nats.UserInfo("fabro", "guess")},
		"unknown nkey":  {nats.Nkey(strangerPub, stranger.Sign)},
	} {
		nc, err := nats.Connect(b.ClientURL(), opts...)
		if err == nil {
			nc.Close()
			t.Errorf("%s connection accepted", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s connection: %v, want an authorization violation", name, err)
		}
	}

	v := &violations{changed: make(chan struct{})}
	key, err := nats.NkeyOptionFromSeed(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), key, nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatalf("subscriber connection: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Reading works: a live subscription and the stored events through a
	// consumer.
	live, err := nc.SubscribeSync(AllSubjects)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{SessionFilter("s_1")}})
	if err != nil {
		t.Fatalf("subscriber consumer: %v", err)
	}
	for i := range 3 {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("subscriber read %d: %v", i, err)
		}
		if msg.Headers().Get(jetstream.MsgIDHeader) != MsgID("s_1", uint64(i+1)) {
			t.Errorf("read %d: message id %q", i, msg.Headers().Get(jetstream.MsgIDHeader))
		}
	}
	publishEvents(t, b, "s_2", 1)
	if _, err := live.NextMsgWithContext(ctx); err != nil {
		t.Errorf("live subscription: %v", err)
	}

	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatalf("subscriber stream info: %v", err)
	}
	before := stream.CachedInfo()
	api := "$JS.API."
	attempts := []struct {
		name    string
		subject string // the subject the server must refuse
		try     func(ctx context.Context) error
	}{
		{"publish a forged event that would shadow a real one", Subject("s_1", "text_delta"), func(ctx context.Context) error {
			m := nats.NewMsg(Subject("s_1", "text_delta"))
			m.Header.Set(jetstream.MsgIDHeader, MsgID("s_1", 4))
			_, err := js.PublishMsg(ctx, m)
			return err
		}},
		{"core publish on an event subject", Subject("s_1", "session_ended"), func(ctx context.Context) error {
			if err := nc.Publish(Subject("s_1", "session_ended"), []byte("forged")); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}},
		{"core publish on a JSON event subject", JSONSubject("s_1", "session_ended"), func(ctx context.Context) error {
			if err := nc.Publish(JSONSubject("s_1", "session_ended"), []byte(`{"forged":true}`)); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}},
		{"purge", api + "STREAM.PURGE." + StreamName, func(ctx context.Context) error { return stream.Purge(ctx) }},
		{"purge one session", api + "STREAM.PURGE." + StreamName, func(ctx context.Context) error {
			return stream.Purge(ctx, jetstream.WithPurgeSubject(SessionFilter("s_1")))
		}},
		{"delete a message", api + "STREAM.MSG.DELETE." + StreamName, func(ctx context.Context) error { return stream.DeleteMsg(ctx, 1) }},
		{"delete the stream", api + "STREAM.DELETE." + StreamName, func(ctx context.Context) error { return js.DeleteStream(ctx, StreamName) }},
		{"shorten the stream's retention", api + "STREAM.UPDATE." + StreamName, func(ctx context.Context) error {
			cfg := before.Config
			cfg.MaxMsgs = 1
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}},
		{"create another stream over the events", api + "STREAM.CREATE.SHADOW", func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHADOW", Subjects: []string{"fabro.>"}})
			return err
		}},
		{"delete a consumer", api + "CONSUMER.DELETE." + StreamName + "." + cons.CachedInfo().Name, func(ctx context.Context) error {
			return js.DeleteConsumer(ctx, StreamName, cons.CachedInfo().Name)
		}},
	}
	for _, a := range attempts {
		actx, refused := v.refused(ctx, a.subject)
		if err := a.try(actx); err == nil {
			t.Errorf("%s: accepted", a.name)
		}
		if !refused() {
			t.Errorf("%s: the server reported no permissions violation for %s", a.name, a.subject)
		}
	}
	// Nothing changed: same messages, same configuration; event 4 of s_1 is
	// still free for the agent, not taken by a forgery.
	after, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	got := after.CachedInfo()
	if got.State.Msgs != before.State.Msgs || got.State.LastSeq != before.State.LastSeq || got.Config.MaxMsgs != before.Config.MaxMsgs {
		t.Errorf("stream changed: %d msgs (last %d, max %d), want %d (last %d, max %d)",
			got.State.Msgs, got.State.LastSeq, got.Config.MaxMsgs, before.State.Msgs, before.State.LastSeq, before.Config.MaxMsgs)
	}
	if names := b.js.StreamNames(ctx); names.Err() == nil {
		for n := range names.Name() {
			if n != StreamName {
				t.Errorf("stream %s exists", n)
			}
		}
	}
	publishEvents(t, b, "s_1x", 0)
	ack, err := b.Publish(t.Context(), &agentv1.AgentEvent{SessionId: "s_1", Sequence: 4, Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "real"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-ack.Ok():
		if a.Duplicate {
			t.Error("the agent's event 4 was dropped as a duplicate of a forgery")
		}
	case err := <-ack.Err():
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("no ack")
	}

	// The credential survives a restart: the same file, the same key.
	seed1, _ := os.ReadFile(keyFile)
	b.Close()
	b2 := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: keyFile})
	if seed2, _ := os.ReadFile(keyFile); string(seed1) != string(seed2) {
		t.Error("the subscriber key changed across restarts")
	}
	nc2, err := nats.Connect(b2.ClientURL(), key)
	if err != nil {
		t.Errorf("subscriber after restart: %v", err)
	} else {
		nc2.Close()
	}
}

// TestExternalServerCredentials runs a separate nats-server that requires a
// user and password: the bus connects with the ones given, and without them
// Open fails.
func TestExternalServerCredentials(t *testing.T) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "fabro-agent", Password: "s3cret-password"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	b := open(t, Config{URL: ns.ClientURL(), User: "fabro-agent", Password: "s3cret-password"})
	publishEvents(t, b, "s_ext", 2)
	if got := replay(t, b, "s_ext", 2); len(got) != 2 {
		t.Errorf("replayed %d events, want 2", len(got))
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := Open(ctx, Config{URL: ns.ClientURL(), User: "fabro-agent", Password: "wrong"}, discard()); err == nil {
		t.Error("Open with a wrong password succeeded")
	}
	if _, err := Open(ctx, Config{URL: ns.ClientURL(), User: "u", Password: "p", NKeyFile: "x"}, discard()); err == nil {
		t.Error("Open with two credentials succeeded")
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestSubscriberDurableConsumerExpires: a subscriber may create a durable
// consumer it cannot delete; the stream's consumer limit removes it once
// idle, so they cannot pile up.
func TestSubscriberDurableConsumerExpires(t *testing.T) {
	defer func(d time.Duration) { consumerIdleLimit = d }(consumerIdleLimit)
	consumerIdleLimit = 500 * time.Millisecond
	keyFile := filepath.Join(t.TempDir(), "sub.nk")
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: keyFile})
	key, err := nats.NkeyOptionFromSeed(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{Durable: "keeps-forever"}); err != nil {
		t.Fatalf("durable consumer: %v", err)
	}
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Consumer(ctx, "keeps-forever"); errors.Is(err, jetstream.ErrConsumerNotFound) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the idle durable consumer was never removed")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
