package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/telemetry/telemetrybench"
)

// BenchmarkTelemetryUnary: one unary RPC (the full interceptor chain, a
// traced client and server) with telemetry off, unset, sampled at 100% to
// a local OTLP receiver and at 0%, interleaved; ratios to off.
//
//	go test -run '^$' -bench TelemetryUnary ./server/
func BenchmarkTelemetryUnary(b *testing.B) {
	telemetrybench.Run(b, func(b *testing.B) func(context.Context) error {
		srv, err := Start(context.Background(), Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, slog.New(slog.DiscardHandler), newFakeVaultB(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
		conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		client := vaultv1.NewVaultServiceClient(conn)
		return func(ctx context.Context) error {
			_, err := client.GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "OK"})
			return err
		}
	})
}

func newFakeVaultB(b *testing.B) *fakeVault {
	f := &fakeVault{started: make(chan struct{}, 1), release: make(chan struct{})}
	b.Cleanup(func() { close(f.release) })
	return f
}
