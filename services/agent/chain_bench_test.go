package agent

import (
	"context"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/toolchain"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// BenchmarkToolChain measures what the middleware chain (level, rules,
// hooks, approval) adds to a tool call with no rules and no hooks: the
// same cheap tool run straight on the tool set (what the loop did before)
// and through the session's chain, side by side in one run.
func BenchmarkToolChain(b *testing.B) {
	set := tools.NewSet("openai", tools.Full, tools.Env{Extra: []tools.Extra{{
		Name: "noop", Description: "does nothing", Parameters: `{"type":"object","properties":{"x":{"type":"string"}}}`,
		Run: func(context.Context, string, []byte) (string, bool) { return "ok", false },
	}}}, nil)
	pol, err := settings.Build()
	if err != nil {
		b.Fatal(err)
	}
	s := &Service{logger: testLogger(b)}
	sess := &session{svc: s, info: &agentv1.Session{SessionId: "s_bench"}, env: &agentv1.EnvironmentInfo{WorkingDirectory: "/work"},
		policy: pol, toolset: set, allowSession: map[string]bool{}}
	s.buildChain(sess)
	call := loop.ToolCall{ID: "c1", Name: "noop", Arguments: `{"x":"y"}`}
	ctx := context.Background()
	adapter := toolAdapter{set: set, chain: sess.chain, hidden: &pol.Rules}

	var direct, chained time.Duration
	const batch = 256
	for b.Loop() {
		start := time.Now()
		for range batch {
			_ = runSet(ctx, set, call)
		}
		mid := time.Now()
		for range batch {
			_ = adapter.Run(ctx, call)
		}
		direct += mid.Sub(start)
		chained += time.Since(mid)
	}
	n := float64(b.N * batch)
	b.ReportMetric(float64(direct.Nanoseconds())/n, "direct-ns/call")
	b.ReportMetric(float64(chained.Nanoseconds())/n, "chain-ns/call")
	b.ReportMetric(float64(chained-direct)/n, "overhead-ns/call")
	b.ReportMetric(float64(chained)/float64(direct), "ratio")
	if r := adapter.Run(ctx, call); r.IsError || r.Output != "ok" {
		b.Fatalf("chain result %+v", r)
	}

	// The links alone, around a tool that costs nothing.
	rules := toolchain.Rules(&pol.Rules, "/work", set.Refusal, set.Resolve)
	links := toolchain.Build(func(context.Context, toolchain.Call) loop.ToolResult { return loop.ToolResult{Output: "ok"} },
		rules, toolchain.HookLink(sess.hooks, rules), toolchain.Approval(sess))
	start := time.Now()
	for range 100000 {
		_ = links(ctx, toolchain.Call{ToolCall: call})
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/100000, "links-only-ns/call")
}
