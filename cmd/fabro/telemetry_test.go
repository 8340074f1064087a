package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/telemetry"
	"github.com/fabro-sh/fabro-go/platform/telemetry/otlpsink"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// canary is run through the prompt text, a file the agent reads and runs
// through the shell, and the provider key: it must not appear in any span.
const canary = "CANARY-7d1f2c9e"

// tracedScript answers the parent prompt with read_file and shell, then
// spawn_agent, then wait, then text; and the subagent with text.
func tracedScript() func(fakeprovider.Request) fakeprovider.Turn {
	var mu sync.Mutex
	parentTurns := 0
	return func(r fakeprovider.Request) fakeprovider.Turn {
		if !bytes.Contains(r.Body, []byte("What do my notes say")) {
			return fakeprovider.Turn{Text: "one two three", Usage: fakeprovider.Usage{Input: 50, Output: 5}}
		}
		mu.Lock()
		defer mu.Unlock()
		parentTurns++
		u := fakeprovider.Usage{Input: 100 * parentTurns, Output: 10, CacheRead: 7}
		switch parentTurns {
		case 1:
			return fakeprovider.Turn{Usage: u, ToolCalls: []fakeprovider.ToolCall{
				{ID: "toolu_1", Name: "read_file", Arguments: `{"file_path":"notes.txt"}`},
				{ID: "toolu_2", Name: "shell", Arguments: `{"command":"cat notes.txt"}`},
			}}
		case 2:
			return fakeprovider.Turn{Usage: u, ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_3", Name: "spawn_agent", Arguments: `{"task":"Count to three."}`}}}
		case 3:
			return fakeprovider.Turn{Usage: u, ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_4", Name: "wait", Arguments: `{}`}}}
		default:
			return fakeprovider.Turn{Usage: u, Text: "The notes say: remember the milk."}
		}
	}
}

// tracedRun is what one traced prompt left behind.
type tracedRun struct {
	traceID string
	report  *agentv1.PromptReport
	// children are the subagents' reports, relayed on the prompt's stream.
	children []*agentv1.PromptReport
	natsMsg  []*nats.Msg
	metrics  string // /metrics of the process serving the gateway
}

// runTracedPrompt runs the scripted prompt on the agent at agentAddr under
// a trace the test starts (its traceparent on the Prompt call), collecting
// the session's NATS messages and the gateway's /metrics.
func runTracedPrompt(t *testing.T, agentAddr, natsURL, natsKeyFile, metricsURL, ws, token string) tracedRun {
	t.Helper()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	key, err := nats.NkeyOptionFromSeed(natsKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL, key)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var (
		mu   sync.Mutex
		msgs []*nats.Msg
	)
	sub, err := nc.Subscribe("fabro.agent.v1.sessions.>", func(m *nats.Msg) {
		mu.Lock()
		msgs = append(msgs, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(agentAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := agentv1.NewAgentServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-b7ad6b7169203331-01", "authorization", "Bearer "+token)
	created, err := client.CreateSession(ctx, &agentv1.CreateSessionRequest{
		Model:           "anthropic/claude-sonnet-4.5",
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: ws}},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
		Options:         &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := client.Prompt(ctx, &agentv1.PromptRequest{SessionId: created.GetSession().GetSessionId(), Text: "What do my notes say? " + canary})
	if err != nil {
		t.Fatal(err)
	}
	var (
		report   *agentv1.PromptReport
		children []*agentv1.PromptReport
	)
	for report == nil {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("prompt stream: %v", err)
		}
		if pc := resp.GetEvent().GetPromptCompleted(); pc != nil {
			if resp.GetEvent().GetSessionId() == created.GetSession().GetSessionId() {
				report = pc.GetReport()
			} else {
				children = append(children, pc.GetReport())
			}
		}
	}
	if report.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || !strings.Contains(report.GetOutput(), "milk") {
		t.Fatalf("prompt report: %v", report)
	}
	mreq, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, metricsURL, nil)
	mreq.Header.Set("Authorization", "Bearer "+token) // /metrics is an admin's
	resp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	return tracedRun{traceID: traceID, report: report, children: children, natsMsg: append([]*nats.Msg(nil), msgs...), metrics: string(body)}
}

// checkTrace verifies the spans of run: one trace, with the parent links
// prompt > turn > (gateway attempt > vault resolve), prompt > turn >
// tool call > sandbox exec, and spawn_agent > the subagent's prompt; and
// no canary anywhere.
func checkTrace(t *testing.T, sink *otlpsink.Sink, run tracedRun, wantMetrics, wantServices []string) {
	t.Helper()
	spans := sink.Trace(run.traceID)
	byID := map[string]otlpsink.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	// under reports whether s has an ancestor whose name starts with prefix.
	under := func(s otlpsink.Span, prefix string) bool {
		for p, ok := byID[s.ParentSpanID]; ok; p, ok = byID[p.ParentSpanID] {
			if strings.HasPrefix(p.Name, prefix) {
				return true
			}
		}
		return false
	}
	find := func(prefix string, cond func(otlpsink.Span) bool) []otlpsink.Span {
		var out []otlpsink.Span
		for _, s := range spans {
			if strings.HasPrefix(s.Name, prefix) && (cond == nil || cond(s)) {
				out = append(out, s)
			}
		}
		return out
	}
	dump := func() string {
		var b strings.Builder
		for _, s := range spans {
			fmt.Fprintf(&b, "%s %s parent=%s [%s] %s\n", s.SpanID, s.Name, s.ParentSpanID, s.Service, s.Kind)
		}
		return b.String()
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"the prompt span", len(find("invoke_agent", nil)) >= 2},
		{"turn spans under the prompt", len(find("turn", func(s otlpsink.Span) bool { return under(s, "invoke_agent") })) >= 4},
		{"gateway attempts under a turn", len(find("chat ", func(s otlpsink.Span) bool { return under(s, "turn") && s.Kind == "SPAN_KIND_CLIENT" })) >= 5},
		{"the vault resolve under an attempt", len(find("fabro.vault.v1.VaultService/ResolveCredentials", func(s otlpsink.Span) bool {
			return s.Kind == "SPAN_KIND_SERVER" && under(s, "chat ")
		})) >= 1},
		{"tool calls under a turn", len(find("execute_tool ", func(s otlpsink.Span) bool { return under(s, "turn") })) >= 4},
		{"the sandbox exec under the shell call", len(find("sandbox.exec", func(s otlpsink.Span) bool { return under(s, "execute_tool shell") })) == 1},
		{"the subagent's prompt under spawn_agent", len(find("invoke_agent", func(s otlpsink.Span) bool { return under(s, "execute_tool spawn_agent") })) == 1},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("trace %s lacks %s:\n%s", run.traceID, c.what, dump())
		}
	}
	services := map[string]bool{}
	for _, s := range spans {
		services[s.Service] = true
	}
	for _, want := range wantServices {
		if !services[want] {
			t.Errorf("no span of service %s in the trace (have %v)", want, services)
		}
	}
	// GenAI attributes on the attempts; the tool spans' outcome.
	for _, s := range find("chat ", func(s otlpsink.Span) bool { return s.Kind == "SPAN_KIND_CLIENT" }) {
		for _, k := range []string{"gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
			"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.response.finish_reasons"} {
			if s.Attributes[k] == "" {
				t.Errorf("attempt span %s lacks %s: %v", s.Name, k, s.Attributes)
			}
		}
	}
	for _, s := range find("execute_tool ", nil) {
		if s.Attributes["fabro.tool.outcome"] == "" || s.Attributes["fabro.session.id"] == "" || s.Attributes["fabro.tool.truncated"] == "" {
			t.Errorf("tool span %s lacks outcome, session or truncation: %v", s.Name, s.Attributes)
		}
	}
	for _, s := range find("sandbox.exec", func(s otlpsink.Span) bool { return under(s, "execute_tool shell") }) {
		if s.Attributes["fabro.sandbox.driver"] != "local" || s.Attributes["process.exit.code"] != "0" || s.Attributes["fabro.exec.stdout_bytes"] == "0" {
			t.Errorf("sandbox span lacks driver, exit code or bytes: %v", s.Attributes)
		}
	}
	// Content capture is off: the canary is in no span of any trace.
	for _, s := range sink.Spans() {
		if strings.Contains(s.Raw, canary) || strings.Contains(s.Raw, "remember the milk") {
			t.Errorf("span %s [%s] holds prompt or file content: %s", s.Name, s.Service, s.Raw)
		}
	}
	// Every NATS event message of the prompt carries this trace.
	var traced, promptMsgs int
	for _, m := range run.natsMsg {
		if !strings.Contains(m.Subject, ".events.") {
			continue
		}
		var ev agentv1.AgentEvent
		if err := protoUnmarshal(m.Data, &ev); err != nil || ev.GetPromptId() == "" {
			continue
		}
		promptMsgs++
		if strings.Contains(m.Header.Get("traceparent"), run.traceID) {
			traced++
		}
	}
	if promptMsgs == 0 || traced != promptMsgs {
		t.Errorf("%d of %d prompt event messages carry a traceparent of trace %s", traced, promptMsgs, run.traceID)
	}
	// /metrics: the token and cost counters match the prompt's report.
	fams, err := telemetry.ParsePrometheus(strings.NewReader(run.metrics))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	sum := func(family string, labels map[string]string) float64 {
		var total float64
		for _, m := range fams[family].GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && have[k] == v
			}
			if match {
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
	// The report counts the parent's turns; each subagent's are in its own
	// report, relayed on the stream. Together they are every model call.
	if len(run.children) != 1 {
		t.Fatalf("%d subagent reports on the prompt's stream, want 1", len(run.children))
	}
	var in, out, cacheRead, cost float64
	for _, r := range append([]*agentv1.PromptReport{run.report}, run.children...) {
		in += float64(r.GetUsage().GetInputTokens())
		out += float64(r.GetUsage().GetOutputTokens())
		cacheRead += float64(r.GetUsage().GetCacheReadTokens())
		cost += float64(r.GetCost().GetTotalUsdMicros())
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"input tokens", sum("fabro_llm_tokens_total", map[string]string{"gen_ai_token_type": "input", "gen_ai_provider_name": "anthropic"}), in},
		{"output tokens", sum("fabro_llm_tokens_total", map[string]string{"gen_ai_token_type": "output", "gen_ai_request_model": "claude-sonnet-4.5"}), out},
		{"cache_read tokens", sum("fabro_llm_tokens_total", map[string]string{"gen_ai_token_type": "cache_read"}), cacheRead},
		{"cost (USD micros)", sum("fabro_llm_cost_total", nil), cost},
	} {
		if c.got != c.want || c.want == 0 {
			t.Errorf("%s on /metrics = %v, want %v, the reports' sum", c.what, c.got, c.want)
		}
	}
	for _, want := range wantMetrics {
		if fams[want] == nil {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// checkLogs verifies that log lines written during the traced call carry
// its trace id (and the RPC method).
func checkLogs(t *testing.T, logs, traceID string) {
	t.Helper()
	var n, withSession int
	for _, line := range strings.Split(logs, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		if l["trace_id"] == traceID && l["span_id"] != nil && l["rpc_method"] != nil {
			n++
			if l["session_id"] != nil {
				withSession++
			}
		}
	}
	if n == 0 || withSession == 0 {
		t.Errorf("%d log lines carry trace_id %s with span_id and rpc_method, %d of them session_id:\n%s", n, traceID, withSession, logs)
	}
}

// gatewayMetrics are on the /metrics of the process serving the gateway.
var gatewayMetrics = []string{"rpc_server_call_duration_seconds", "fabro_llm_tokens_total", "fabro_llm_cost_total",
	"gen_ai_client_time_to_first_token_seconds", "gen_ai_client_operation_duration_seconds"}

func startSink(t *testing.T) *otlpsink.Listeners {
	t.Helper()
	sink, err := otlpsink.Listen(otlpsink.New(100000, nil), "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	return sink
}

func fakeAnthropic(t *testing.T, dir string) string {
	t.Helper()
	fp := fakeprovider.New()
	fp.Script(tracedScript())
	fake, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	overlay := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return overlay
}

func workspace(t *testing.T, dir string) string {
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("remember the milk "+canary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestServeTracesAPrompt: one prompt through `fabro serve`, exported over
// OTLP/gRPC to an in-test receiver.
func TestServeTracesAPrompt(t *testing.T) {
	sink := startSink(t)
	dir := t.TempDir()
	overlay := fakeAnthropic(t, dir)
	s := startTracedProc(t, fabroBin, []string{"serve", "-nats-listen", "127.0.0.1:-1"}, "FABRO_DATA_DIR="+filepath.Join(dir, "data"),
		"FABRO_SANDBOX_ALLOWED_ROOTS="+filepath.Join(dir, "ws"), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+sink.GRPCAddr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_SERVICE_NAME=")
	adminFile := filepath.Join(dir, "data", "auth", "admin.token")
	if _, errOut, code := fabro(t, "sk-ant-"+canary, "secret", "set", "ANTHROPIC_API_KEY", "-no-probe", "-server", s.grpcAddr, "-token-file", adminFile); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	natsURL := logField(t, s.startLogs, "embedded nats-server started", "nats_url")
	run := runTracedPrompt(t, s.grpcAddr, natsURL, filepath.Join(dir, "data", "agent", "nats-subscriber.nk"), "http://"+s.httpAddr+"/metrics", workspace(t, dir), readToken(t, adminFile))
	s.stop(t) // flushes the spans
	checkTrace(t, sink.Sink, run, append(gatewayMetrics, "fabro_agent_tool_calls_total", "fabro_agent_sessions", "fabro_agent_event_publish_duration_seconds",
		"fabro_agent_event_publish_backlog", "fabro_sandbox_execs_total", "fabro_sandbox_exec_duration_seconds", "fabro_vault_resolves_total"), []string{"fabro"})
	checkLogs(t, s.logs.String(), run.traceID)
}

// TestServicesTraceAPrompt: the same prompt through the four service
// binaries as separate processes, exporting over OTLP/HTTP.
func TestServicesTraceAPrompt(t *testing.T) {
	sink := startSink(t)
	dir := t.TempDir()
	overlay := fakeAnthropic(t, dir)
	bins := t.TempDir()
	for _, svc := range []string{"vault", "llmgateway", "sandbox", "agent"} {
		pkg := "github.com/fabro-sh/fabro-go/services/" + svc + "/cmd/" + svc
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bins, svc), pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", svc, err, out)
		}
	}
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + sink.HTTPAddr, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_SERVICE_NAME="}
	// One token store for every process; the vault issues the admin's and
	// each service's token into its own file.
	otel = append(otel, "FABRO_AUTH_TOKENS_FILE="+filepath.Join(dir, "auth", "tokens.json"))
	issue := filepath.Join(dir, "issue")
	vault := startService(t, filepath.Join(bins, "vault"), append(otel, "FABRO_DATA_DIR="+filepath.Join(dir, "data"), "FABRO_AUTH_ISSUE_DIR="+issue)...)
	adminFile := filepath.Join(issue, "admin", "token")
	if _, errOut, code := fabro(t, "sk-ant-"+canary, "secret", "set", "ANTHROPIC_API_KEY", "-no-probe", "-server", vault.grpcAddr, "-token-file", adminFile); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	gw := startService(t, filepath.Join(bins, "llmgateway"), append(otel, "FABRO_VAULT_ADDR="+vault.grpcAddr,
		"FABRO_TOKEN_FILE="+filepath.Join(issue, "llmgateway", "token"), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=")...)
	sb := startService(t, filepath.Join(bins, "sandbox"), append(otel, "FABRO_DATA_DIR="+filepath.Join(dir, "sandbox"), "FABRO_SANDBOX_ALLOWED_ROOTS="+filepath.Join(dir, "ws"))...)
	ag := startService(t, filepath.Join(bins, "agent"), append(otel, "FABRO_DATA_DIR="+filepath.Join(dir, "agent"),
		"FABRO_TOKEN_FILE="+filepath.Join(issue, "agent", "token"),
		"FABRO_LLM_ADDR="+gw.grpcAddr, "FABRO_SANDBOX_ADDR="+sb.grpcAddr, "FABRO_NATS_LISTEN=127.0.0.1:-1")...)
	natsURL := logField(t, ag.startLogs, "embedded nats-server started", "nats_url")
	run := runTracedPrompt(t, ag.grpcAddr, natsURL, filepath.Join(dir, "agent", "agent", "nats-subscriber.nk"), "http://"+gw.httpAddr+"/metrics", workspace(t, dir), readToken(t, adminFile))
	for _, p := range []*serveProc{ag, sb, gw, vault} {
		p.stop(t)
	}
	checkTrace(t, sink.Sink, run, gatewayMetrics, []string{"fabro-agent", "fabro-llmgateway", "fabro-sandbox", "fabro-vault"})
	checkLogs(t, ag.logs.String()+gw.logs.String()+sb.logs.String(), run.traceID)
}

// startService runs one service binary on free ports with JSON logs and
// waits for its "server started" line.
func startService(t *testing.T, bin string, env ...string) *serveProc {
	t.Helper()
	return startTracedProc(t, bin, nil, env...)
}

// startTracedProc runs bin with args and the shared server flags on free ports
// and waits for its "server started" line; the log lines before it stay
// in startLogs, readable while the process runs.
func startTracedProc(t *testing.T, bin string, args []string, env ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(bin, append(args, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-log-format", "json", "-log-level", "debug")...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		s.logs.Write(append(sc.Bytes(), '\n'))
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "server started" {
			s.grpcAddr, s.httpAddr = line.GRPCAddr, line.HTTPAddr
			break
		}
	}
	if s.grpcAddr == "" {
		cmd.Process.Kill()
		t.Fatalf("%s did not start:\n%s", bin, s.logs)
	}
	s.startLogs = s.logs.String()
	go func() {
		io.Copy(s.logs, stderr)
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
			}
		}
	})
	return s
}

func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// logField finds the first JSON log line with message msg and returns its
// field.
func logField(t *testing.T, logs, msg, field string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
			if v, ok := l[field].(string); ok && v != "" {
				return v
			}
		}
	}
	t.Fatalf("no %q line with %s in:\n%s", msg, field, logs)
	return ""
}

func protoUnmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
