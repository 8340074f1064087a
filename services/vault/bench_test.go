package vault_test

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/vault"
	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
	"github.com/fabro-sh/fabro-go/services/vault/internal/jstest"
)

// loopback starts the vault behind the real runtime on 127.0.0.1:0 and
// returns a connection to it, so latency includes TCP, HTTP/2 and the
// interceptor chain.
func loopback(b *testing.B) (*grpc.ClientConn, map[string]string) {
	return loopbackWith(b, vault.Config{DataDir: b.TempDir(), LookupEnv: env(nil)})
}

func loopbackWith(b *testing.B, cfg vault.Config) (*grpc.ClientConn, map[string]string) {
	b.Helper()
	logger := slog.New(slog.DiscardHandler)
	svc, err := vault.New(b.Context(), cfg, logger)
	if err != nil {
		b.Fatal(err)
	}
	fx := authtest.New(b)
	srv, err := server.Start(b.Context(), server.Config{GRPCAddr: "127.0.0.1:0", Auth: fx.Store}, logger, svc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Shutdown(b.Context()); svc.Close() })
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn, map[string]string{"admin": fx.Token("admin", auth.RoleAdmin), "llmgateway": fx.Token("llmgateway", auth.RoleService)}
}

// timed runs op b.N times and reports its median latency.
func timed(b *testing.B, op func(i int) error) {
	b.Helper()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
}

// BenchmarkLoopbackBaseline is the floor: a health check over the same
// connection, so Put and Resolve can be read as ratios of it.
func BenchmarkLoopbackBaseline(b *testing.B) {
	conn, _ := loopback(b)
	client := healthpb.NewHealthClient(conn)
	timed(b, func(int) error {
		_, err := client.Check(b.Context(), &healthpb.HealthCheckRequest{})
		return err
	})
}

// BenchmarkPut writes a new version each time: seal, rewrite the file
// atomically and fsync it.
func BenchmarkPut(b *testing.B) {
	conn, tokens := loopback(b)
	client := vaultv1.NewVaultServiceClient(conn)
	admin := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+tokens["admin"])
	timed(b, func(i int) error {
		_, err := client.PutSecret(admin, &vaultv1.PutSecretRequest{Name: fmt.Sprintf("KEY_%d_API_KEY", i%20), Value: "sk-benchmark-value"})
		return err
	})
}

// BenchmarkResolve resolves one credential as the gateway does on every
// attempt: policy check, unwrap the data key, decrypt.
func BenchmarkResolve(b *testing.B) {
	conn, tokens := loopback(b)
	client := vaultv1.NewVaultServiceClient(conn)
	admin := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+tokens["admin"])
	if _, err := client.PutSecret(admin, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: "sk-benchmark-value"}); err != nil {
		b.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+tokens["llmgateway"])
	req := &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}}
	timed(b, func(int) error {
		_, err := client.ResolveCredentials(ctx, req)
		return err
	})
}

// stores are the backends compared side by side in one run: the file
// (the baseline) and a JetStream bucket on an embedded node (R1) and on
// a three-node cluster in this process (R3), over loopback TCP.
var stores = []struct {
	name string
	cfg  func(b *testing.B) vault.Config
}{
	{"file", func(b *testing.B) vault.Config { return vault.Config{DataDir: b.TempDir(), LookupEnv: env(nil)} }},
	{"jetstream-R1", func(b *testing.B) vault.Config {
		return vault.Config{DataDir: b.TempDir(), Store: vault.StoreJetStream, JetStream: jstest.Start(b).JetStream(),
			LookupEnv: env(map[string]string{vault.EnvKEK: envelope.GenerateKEKText()})}
	}},
	{"jetstream-R3", func(b *testing.B) vault.Config {
		return vault.Config{DataDir: b.TempDir(), Store: vault.StoreJetStream, JetStream: jstest.StartCluster(b).JetStream(), Replicas: 3,
			LookupEnv: env(map[string]string{vault.EnvKEK: envelope.GenerateKEKText()})}
	}},
}

// BenchmarkStores runs PutSecret and ResolveCredentials on each store in
// the same run, so the JetStream figures read as ratios of the file's.
func BenchmarkStores(b *testing.B) {
	for _, st := range stores {
		b.Run("PutSecret/"+st.name, func(b *testing.B) {
			conn, tokens := loopbackWith(b, st.cfg(b))
			client := vaultv1.NewVaultServiceClient(conn)
			admin := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+tokens["admin"])
			timed(b, func(i int) error {
				_, err := client.PutSecret(admin, &vaultv1.PutSecretRequest{Name: fmt.Sprintf("KEY_%d_API_KEY", i%20), Value: "sk-benchmark-value"})
				return err
			})
		})
		b.Run("ResolveCredentials/"+st.name, func(b *testing.B) {
			conn, tokens := loopbackWith(b, st.cfg(b))
			client := vaultv1.NewVaultServiceClient(conn)
			admin := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+tokens["admin"])
			if _, err := client.PutSecret(admin, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: "sk-benchmark-value"}); err != nil {
				b.Fatal(err)
			}
			ctx := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+tokens["llmgateway"])
			req := &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}}
			timed(b, func(int) error {
				_, err := client.ResolveCredentials(ctx, req)
				return err
			})
		})
	}
}
