package llmgateway

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/telemetry/telemetrybench"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// BenchmarkTelemetryStream: one gateway stream (64 text chunks from the
// fake provider, through the platform server with its interceptors and a
// traced client) with telemetry off, unset, sampled at 100% to a local
// OTLP receiver and at 0%, interleaved; ratios to off.
//
//	go test -run '^$' -bench TelemetryStream .
func BenchmarkTelemetryStream(b *testing.B) {
	turn := fakeprovider.Turn{Text: strings.Repeat("abcd", 64), ChunkRunes: 4, Usage: fakeprovider.Usage{Input: 12, Output: 64}}
	fp := fakeprovider.New()
	fp.Script(func(fakeprovider.Request) fakeprovider.Turn { return turn })
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	overlay := b.TempDir() + "/overlay.json"
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		b.Fatal(err)
	}
	req := &llmv1.StreamRequest{Request: &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("Say hello.")}, DisableFallbacks: true}}
	telemetrybench.Run(b, func(b *testing.B) func(context.Context) error {
		gw, err := New(context.Background(), Config{CatalogOverlay: overlay, LookupEnv: func(k string) (string, bool) {
			v, ok := e2eEnv[k]
			return v, ok
		}}, discardLogger())
		if err != nil {
			b.Fatal(err)
		}
		srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, discardLogger(), gw)
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
		client := llmv1.NewLLMGatewayServiceClient(conn)
		return func(ctx context.Context) error {
			st, err := client.Stream(ctx, req)
			if err != nil {
				return err
			}
			for {
				msg, err := st.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if e := msg.GetError(); e != nil {
					return errors.New(e.GetError().GetMessage())
				}
			}
		}
	})
}
