package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// BenchmarkTakeover: the time from stopping the replica that owns a
// session in the middle of a prompt to the first event of the replica
// that takes the prompt over, as a subscriber of the stream sees it (p50
// over the iterations), with a lease TTL of 1 s: SIGKILL (the lease must
// expire) side by side with a graceful stop, SIGTERM (the lease is
// released), the baseline.
func BenchmarkTakeover(b *testing.B) {
	for _, mode := range []struct {
		name string
		sig  syscall.Signal
	}{{"sigkill", syscall.SIGKILL}, {"sigterm", syscall.SIGTERM}} {
		b.Run(mode.name, func(b *testing.B) {
			d := startDeps(b)
			natsURL := natstest.StartServer(b)
			const ttl = time.Second
			startReplicaProc(b, d, natsURL, "b", ttl) // the one that takes over
			d.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
				if bytes.Contains(r.Body, []byte("slept well")) {
					return fakeprovider.Turn{Text: "All done."}
				}
				return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "shell",
					Arguments: args(map[string]any{"command": "sleep 3 && echo slept well"})}}}
			})
			nc, err := nats.Connect(natsURL)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				owner := startReplicaProc(b, d, natsURL, fmt.Sprintf("a%d", i), ttl)
				sb, err := d.sandbox.CreateSandbox(b.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: b.TempDir()}})
				if err != nil {
					b.Fatal(err)
				}
				created, err := owner.client.CreateSession(b.Context(), &agentv1.CreateSessionRequest{
					Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sb.GetSandbox().GetSandboxId()},
					PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
				})
				if err != nil {
					b.Fatal(err)
				}
				id := created.GetSession().GetSessionId()
				ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
				stream, err := owner.client.Prompt(ctx, &agentv1.PromptRequest{SessionId: id, Text: "Sleep."})
				if err != nil {
					b.Fatal(err)
				}
				var last uint64
				for {
					resp, err := stream.Recv()
					if err != nil {
						b.Fatal(err)
					}
					last = resp.GetEvent().GetSequence()
					if resp.GetEvent().GetToolCallStarted() != nil {
						break
					}
				}
				cons, err := js.OrderedConsumer(ctx, "FABRO_AGENT_EVENTS", jetstream.OrderedConsumerConfig{
					FilterSubjects: []string{"fabro.agent.v1.sessions." + id + ".events.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
				if err != nil {
					b.Fatal(err)
				}
				it, err := cons.Messages()
				if err != nil {
					b.Fatal(err)
				}
				if err := owner.cmd.Process.Signal(mode.sig); err != nil {
					b.Fatal(err)
				}
				stopped := time.Now()
				for {
					msg, err := it.Next()
					if err != nil {
						b.Fatal(err)
					}
					ev := &agentv1.AgentEvent{}
					if proto.Unmarshal(msg.Data(), ev) == nil && ev.GetSequence() > last && ev.GetMemoryLoaded() != nil {
						took = append(took, time.Since(stopped))
						break
					}
				}
				it.Stop()
				cancel()
				_ = owner.cmd.Wait()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "ms-p50")
		})
	}
}
