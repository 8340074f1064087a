package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// BenchmarkTakeover: the time from stopping the replica that owns a
// session in the middle of a prompt to the first event of the replica
// that takes the prompt over, as a subscriber of the stream sees it (p50
// over the iterations), with a lease TTL of 1 s: SIGKILL (the lease must
// expire) side by side with a graceful stop, SIGTERM (the lease is
// released), the baseline; and "restart", a single agent process (no
// cluster) killed with SIGKILL and started again on its data directory,
// which continues the prompt itself (the time includes the new process's
// start).
func BenchmarkTakeover(b *testing.B) {
	for _, mode := range []struct {
		name    string
		sig     syscall.Signal
		restart bool
	}{{"sigkill", syscall.SIGKILL, false}, {"sigterm", syscall.SIGTERM, false}, {"restart", syscall.SIGKILL, true}} {
		b.Run(mode.name, func(b *testing.B) {
			d := startDeps(b)
			natsURL := natstest.StartServer(b)
			const ttl = time.Second
			if !mode.restart {
				startReplicaProc(b, d, natsURL, "b", ttl) // the one that takes over
			}
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
				single := replicaSpec{ID: fmt.Sprintf("s%d", i), LLMAddr: d.addr, SandboxAddr: d.addr, NATSURL: natsURL, DataDir: b.TempDir(), Single: true}
				var owner *replicaProc
				if mode.restart {
					owner = startAgentProc(b, single)
				} else {
					owner = startReplicaProc(b, d, natsURL, fmt.Sprintf("a%d", i), ttl)
				}
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
				if mode.restart {
					_ = owner.cmd.Wait()
					single.ID += "-again"
					startAgentProc(b, single)
				}
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

// BenchmarkTurnCheckpoint: a 6-turn prompt (5 turns of tool calls, then
// the answer) with the record's checkpoint before every turn, side by
// side with the same prompt without it (Config.NoTurnCheckpoint), the
// two alternating in each iteration so that the machine's load falls on
// both alike: the checkpoint's cost is their ratio (ratio-checkpoint/none,
// of the medians).
func BenchmarkTurnCheckpoint(b *testing.B) {
	type side struct {
		st   *stack
		sbID string
		took []time.Duration
	}
	sides := make([]*side, 2)
	for i, off := range []bool{false, true} {
		st := newStack(b, func(c *agent.Config) { c.NoTurnCheckpoint = off })
		_, sbID := st.workspace(b, map[string]string{"notes.txt": strings.Repeat("a line of notes\n", 200)})
		st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
			if n := bytes.Count(r.Body, []byte("a line of notes")); n < 5*200 {
				return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: fmt.Sprintf("call_%d", n), Name: "read_file",
					Arguments: args(map[string]any{"file_path": "notes.txt"})}}}
			}
			return fakeprovider.Turn{Text: "Read it five times."}
		})
		sides[i] = &side{st: st, sbID: sbID}
	}
	run := func(sd *side) {
		// Each prompt starts from the same history: a fresh session.
		created, err := sd.st.agent.CreateSession(b.Context(), &agentv1.CreateSessionRequest{
			Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sd.sbID}})
		if err != nil {
			b.Fatal(err)
		}
		id := created.GetSession().GetSessionId()
		start := time.Now()
		evs := sd.st.prompt(b, id, "Read notes.txt five times.")
		sd.took = append(sd.took, time.Since(start))
		if rep := lastReport(b, evs); rep.GetTurns() != 6 {
			b.Fatalf("the prompt took %d turns, want 6", rep.GetTurns())
		}
		if _, err := sd.st.agent.CloseSession(b.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		run(sides[i%2])
		run(sides[(i+1)%2])
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	with, without := med(sides[0].took), med(sides[1].took)
	b.ReportMetric(with, "ms-checkpoint")
	b.ReportMetric(without, "ms-none")
	b.ReportMetric(with/without, "ratio-checkpoint/none")
}
