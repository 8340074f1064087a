package vault_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/services/vault"
	"github.com/fabro-sh/fabro-go/services/vault/internal/audit"
	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
	"github.com/fabro-sh/fabro-go/services/vault/internal/jstest"
)

// replicas starts n vault replicas on one JetStream, sharing a KEK given
// through the environment, each with a data directory of its own.
func replicas(t *testing.T, srv *jstest.Server, n int) []*harness {
	t.Helper()
	kek := envelope.GenerateKEKText()
	var hs []*harness
	for range n {
		hs = append(hs, startWith(t, vault.Config{
			DataDir: t.TempDir(), Store: vault.StoreJetStream, JetStream: srv.JetStream(),
			LookupEnv: env(map[string]string{vault.EnvKEK: kek}),
		}))
	}
	return hs
}

func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// TestReplicasServeTheSameSecrets: what one replica writes, another reads
// and resolves; two check-and-set writes at one version on two replicas
// end with exactly one winner and one ABORTED, round after round.
func TestReplicasServeTheSameSecrets(t *testing.T) {
	srv := jstest.Start(t)
	hs := replicas(t, srv, 2)
	a, b := hs[0], hs[1]
	ctx := t.Context()
	a.put(t, "OPENAI_API_KEY", "sk-from-a")
	resp, err := b.client.ResolveCredentials(b.as(ctx, "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetCredentials(); len(got) != 1 || got[0].GetValue() != "sk-from-a" || got[0].GetVersion() != 1 {
		t.Fatalf("replica b resolved %v, want sk-from-a v1", got)
	}
	b.put(t, "OPENAI_API_KEY", "sk-from-b")
	got, err := a.client.GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "OPENAI_API_KEY"})
	if err != nil || got.GetSecret().GetCurrentVersion() != 2 {
		t.Fatalf("replica a sees version %d (%v), want 2", got.GetSecret().GetCurrentVersion(), err)
	}
	for v := int64(2); v < 7; v++ {
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, h := range hs {
			wg.Go(func() {
				_, errs[i] = h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: fmt.Sprintf("sk-%d-%d", v, i), ExpectedVersion: &v})
			})
		}
		wg.Wait()
		ok, aborted := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case code(err) == codes.Aborted && reason(err) == "VERSION_CONFLICT":
				aborted++
			default:
				t.Fatalf("expected version %d: %v", v, err)
			}
		}
		if ok != 1 || aborted != 1 {
			t.Fatalf("two check-and-set writes at version %d on two replicas: %d won, %d ABORTED; want 1 and 1", v, ok, aborted)
		}
	}
	list, err := b.client.ListSecrets(ctx, &vaultv1.ListSecretsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := list.GetSecrets(); len(s) != 1 || s[0].GetCurrentVersion() != 7 {
		t.Errorf("replica b lists %v, want OPENAI_API_KEY at version 7", s)
	}
}

// TestAuditIsAStream: with the JetStream store, every replica's audit
// entries land in one stream, without values.
func TestAuditIsAStream(t *testing.T) {
	srv := jstest.Start(t)
	hs := replicas(t, srv, 2)
	ctx := t.Context()
	hs[0].put(t, "OPENAI_API_KEY", "sk-canary-value")
	hs[1].client.ResolveCredentials(hs[1].as(ctx, "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	hs[1].client.ResolveCredentials(hs[1].as(ctx, "agent"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	hs[0].client.DeleteSecret(ctx, &vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY"})

	js := srv.JetStream()
	cons, err := js.OrderedConsumer(ctx, audit.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for len(ops) < 4 {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %v: %v", ops, err)
		}
		var e audit.Entry
		if err := json.Unmarshal(msg.Data(), &e); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(msg.Data()), "sk-canary-value") {
			t.Errorf("an audit entry holds the value: %s", msg.Data())
		}
		ops = append(ops, e.Op+"/"+e.Caller+"/"+e.Outcome)
	}
	want := []string{"put/admin/OK", "resolve/llmgateway/OK", "resolve/agent/PermissionDenied", "delete/admin/OK"}
	if d := cmp.Diff(want, ops); d != "" {
		t.Errorf("audit stream (-want +got):\n%s", d)
	}
}

// TestJetStreamStoreNeedsASharedKEK: no key is generated for the bucket,
// since one made by a replica would be that replica's alone.
func TestJetStreamStoreNeedsASharedKEK(t *testing.T) {
	srv := jstest.Start(t)
	tests := []struct {
		name string
		cfg  vault.Config
	}{
		{"no KEK", vault.Config{DataDir: t.TempDir(), Store: vault.StoreJetStream, JetStream: srv.JetStream(), LookupEnv: env(nil)}},
		{"no NATS", vault.Config{Store: vault.StoreJetStream, LookupEnv: env(map[string]string{vault.EnvKEK: envelope.GenerateKEKText()})}},
		{"unknown store", vault.Config{DataDir: t.TempDir(), Store: "etcd", LookupEnv: env(nil)}},
	}
	for _, tc := range tests {
		if _, err := vault.New(t.Context(), tc.cfg, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%s: vault.New succeeded", tc.name)
		}
	}
}

// TestStoreUnavailable: NATS gone is UNAVAILABLE with RetryInfo, never
// INTERNAL or NOT_FOUND.
func TestStoreUnavailable(t *testing.T) {
	srv := jstest.Start(t)
	h := replicas(t, srv, 1)[0]
	h.put(t, "OPENAI_API_KEY", "sk")
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := h.client.ResolveCredentials(h.as(ctx, "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	if code(err) != codes.Unavailable || reason(err) != "STORE_UNAVAILABLE" {
		t.Errorf("resolve with NATS down: %v, want UNAVAILABLE STORE_UNAVAILABLE", err)
	}
}
