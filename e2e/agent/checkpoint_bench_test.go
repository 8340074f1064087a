package agent_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// BenchmarkWorkspaceCheckpoint measures the workspace checkpoint of a turn
// on a 10,000-file repository through the real agent on the local driver:
// prompts of two turns (a shell call changing one file, then the answer)
// with checkpoints and without, interleaved in the same run. The
// difference of the p50s over the two turns is the cost per turn (one
// records a change, one finds none).
func BenchmarkWorkspaceCheckpoint(b *testing.B) {
	type side struct {
		st   *stack
		id   string
		took []time.Duration
	}
	files := map[string]string{}
	for i := range 10_000 {
		files[fmt.Sprintf("pkg%03d/file%04d.go", i/100, i)] = fmt.Sprintf("package pkg%03d\n\n// File %d.\nconst V%d = %d\n", i/100, i, i, i)
	}
	sides := make([]*side, 2)
	for i, off := range []bool{false, true} {
		st := newStack(b, func(c *agent.Config) { c.NoWorkspaceCheckpoints = off })
		_, sbID := st.workspace(b, files)
		var n atomic.Int64
		st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
			k := n.Add(1)
			if k%2 == 1 {
				return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: fmt.Sprintf("call_%d", k), Name: "shell",
					Arguments: args(map[string]any{"command": fmt.Sprintf("echo %d > pkg042/changed.txt", k)})}}}
			}
			return fakeprovider.Turn{Text: "Changed."}
		})
		created, err := st.agent.CreateSession(b.Context(), &agentv1.CreateSessionRequest{
			Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
			PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL})
		if err != nil {
			b.Fatal(err)
		}
		sd := &side{st: st, id: created.GetSession().GetSessionId()}
		st.prompt(b, sd.id, "Change it.") // the baseline of the 10,000 files, once
		sides[i] = sd
	}
	run := func(sd *side) {
		start := time.Now()
		evs := sd.st.prompt(b, sd.id, "Change it.")
		sd.took = append(sd.took, time.Since(start))
		if rep := lastReport(b, evs); rep.GetTurns() != 2 {
			b.Fatalf("the prompt took %d turns, want 2", rep.GetTurns())
		}
	}
	for i := 0; b.Loop(); i++ {
		run(sides[i%2])
		run(sides[(i+1)%2])
	}
	list, err := sides[0].st.agent.ListCheckpoints(b.Context(), &agentv1.ListCheckpointsRequest{SessionId: sides[0].id})
	if err != nil || len(list.GetCheckpoints()) < 2 {
		b.Fatalf("the checkpointing side recorded %d checkpoints (%v)", len(list.GetCheckpoints()), err)
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	with, without := med(sides[0].took), med(sides[1].took)
	b.ReportMetric(with, "ms/prompt-checkpoints")
	b.ReportMetric(without, "ms/prompt-none")
	b.ReportMetric((with-without)/2, "ms/turn-checkpoint-cost")
	b.ReportMetric(with/without, "ratio-checkpoints/none")
}
