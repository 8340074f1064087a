package goswagger

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/runtime"
	httptransport "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"

	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client/agent_service"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client/l_l_m_gateway_service"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/models"
)

// ndjsonReader replaces a generated streaming operation's Reader (through
// the generated ClientOption hook): go-swagger's own Reader hands the whole
// body to one runtime.Consumer call that fills one Payload, so it can only
// ever yield the first line of an application/x-ndjson body. This one
// decodes the body line by line, each line strictly (no unknown field) into
// the generated line type T, validated by its generated Validate; a non-200
// answer decodes as the generated google.rpc.Status.
type ndjsonReader[T any, PT interface {
	*T
	Validate(strfmt.Registry) error
}] struct {
	ok    any // the generated OK response the operation type-asserts
	lines []PT
	raw   []string
}

func (r *ndjsonReader[T, PT]) ReadResponse(resp runtime.ClientResponse, _ runtime.Consumer) (any, error) {
	if resp.Code() != 200 {
		var st models.GoogleRPCStatus
		if err := json.NewDecoder(resp.Body()).Decode(&st); err != nil {
			return nil, fmt.Errorf("status %d: %w", resp.Code(), err)
		}
		return nil, fmt.Errorf("status %d: code %d %s", resp.Code(), st.Code, st.Message)
	}
	if ct := resp.GetHeader("Content-Type"); ct != "application/x-ndjson" {
		return nil, fmt.Errorf("Content-Type %q, want application/x-ndjson", ct)
	}
	sc := bufio.NewScanner(resp.Body())
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := PT(new(T))
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields() // a line is exactly {"result": ...} or {"error": ...}
		if err := dec.Decode(line); err != nil {
			return nil, fmt.Errorf("line %d: %w\n%s", len(r.lines)+1, err, sc.Text())
		}
		if err := line.Validate(strfmt.Default); err != nil {
			return nil, fmt.Errorf("line %d does not validate: %w\n%s", len(r.lines)+1, err, sc.Text())
		}
		r.lines = append(r.lines, line)
		r.raw = append(r.raw, sc.Text())
	}
	return r.ok, sc.Err()
}

func (r *ndjsonReader[T, PT]) option(op *runtime.ClientOperation) { op.Reader = r }

// TestGoSwaggerStreams: the NDJSON streaming routes through go-swagger's
// generated client (its URL, parameters, body and auth), read line by line
// into its generated line types: an LLM stream (text deltas, one ended
// event), an agent Prompt stream and StreamEvents replaying the session.
// It also pins why the generated Reader alone cannot do this: the runtime
// has no consumer for application/x-ndjson, and with one registered the
// generated Reader decodes a single value.
func TestGoSwaggerStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fabro serve")
	}
	base, tok := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	auth := httptransport.BearerToken(tok)
	host := strings.TrimPrefix(base, "http://")
	role := models.FabroLlmV1RoleROLEUSER
	model := "anthropic/claude-sonnet-4.5"
	llmBody := func(text string) *models.FabroLlmV1StreamRequest {
		return &models.FabroLlmV1StreamRequest{Request: &models.FabroLlmV1Request{
			Model: &model, DisableFallbacks: true,
			Messages: []*models.FabroLlmV1Message{{Role: &role, Parts: []*models.FabroLlmV1ContentPart{{Text: &models.FabroLlmV1TextPart{Text: text}}}}},
		}}
	}

	// The generated code as generated: the stock runtime refuses the
	// response's media type before any Reader runs (the request is sent
	// and answered; it spends the fake's first scripted turn).
	plain := client.NewHTTPClientWithConfig(strfmt.Default, client.DefaultTransportConfig().WithHost(host).WithSchemes([]string{"http"}))
	_, err := plain.LlmGatewayService.LLMGatewayServiceStreamContext(ctx,
		l_l_m_gateway_service.NewLLMGatewayServiceStreamParams().WithBody(llmBody("Hi.")), auth)
	if err == nil || !strings.Contains(err.Error(), `no consumer: "application/x-ndjson"`) {
		t.Errorf("the stock go-swagger runtime on an NDJSON route: %v, want no consumer for application/x-ndjson", err)
	}

	// A runtime that accepts the media type; the line decoding is ndjsonReader's.
	rt := httptransport.New(host, client.DefaultBasePath, []string{"http"})
	rt.Consumers["application/x-ndjson"] = runtime.JSONConsumer()
	c := client.New(rt, strfmt.Default)

	llm := &ndjsonReader[l_l_m_gateway_service.LLMGatewayServiceStreamOKBody, *l_l_m_gateway_service.LLMGatewayServiceStreamOKBody]{ok: &l_l_m_gateway_service.LLMGatewayServiceStreamOK{}}
	_, err = c.LlmGatewayService.LLMGatewayServiceStreamContext(ctx,
		l_l_m_gateway_service.NewLLMGatewayServiceStreamParams().WithBody(llmBody("Say hello.")), auth, llm.option)
	if err != nil {
		t.Fatalf("LLM Stream: %v", err)
	}
	var text strings.Builder
	var ended int
	for i, l := range llm.lines {
		if l.Error != nil || l.Result == nil {
			t.Fatalf("LLM stream line %d is not a result: %s", i+1, llm.raw[i])
		}
		if l.Result.TextDelta != nil {
			text.WriteString(l.Result.TextDelta.Text)
		}
		if l.Result.Ended != nil {
			ended++
		}
	}
	if ended != 1 || text.String() != "Hello from the fake provider." || len(llm.lines) < 3 {
		t.Errorf("LLM stream of %d lines: %d ended, text %q; want 1 ended and the fake's text", len(llm.lines), ended, text.String())
	}

	// An error before the first line is the generated default response.
	_, err = c.LlmGatewayService.LLMGatewayServiceStreamContext(ctx,
		l_l_m_gateway_service.NewLLMGatewayServiceStreamParams().WithBody(&models.FabroLlmV1StreamRequest{Request: &models.FabroLlmV1Request{Model: strPtr("nobody/no-such-model"),
			Messages: []*models.FabroLlmV1Message{{Role: &role, Parts: []*models.FabroLlmV1ContentPart{{Text: &models.FabroLlmV1TextPart{Text: "Hi."}}}}}}}), auth)
	var def *l_l_m_gateway_service.LLMGatewayServiceStreamDefault
	if !asDefault(err, &def) || def.Code() != 404 || def.Payload.Code != 5 {
		t.Errorf("a stream failing before it starts: %v, want the generated default response 404 NOT_FOUND", err)
	}

	// The agent: a session, a Prompt stream, then StreamEvents replaying it.
	created, err := c.AgentService.AgentServiceCreateSessionContext(ctx, agent_service.NewAgentServiceCreateSessionParams().WithBody(
		&models.FabroAgentV1CreateSessionRequest{Model: model, SandboxSpec: &models.FabroSandboxV1SandboxSpec{Driver: "local", WorkingDirectory: os.Getenv("T25_WS")}}), auth)
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	id := created.Payload.Session.SessionID
	prompt := &ndjsonReader[agent_service.AgentServicePromptOKBody, *agent_service.AgentServicePromptOKBody]{ok: &agent_service.AgentServicePromptOK{}}
	_, err = c.AgentService.AgentServicePromptContext(ctx, agent_service.NewAgentServicePromptParams().WithSessionID(id).
		WithBody(&models.FabroAgentV1AgentServicePromptBody{Text: "Say done."}), auth, prompt.option)
	if err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	var completed int
	for i, l := range prompt.lines {
		if l.Error != nil || l.Result == nil || l.Result.Event == nil {
			t.Fatalf("Prompt line %d is not an event: %s", i+1, prompt.raw[i])
		}
		if l.Result.Event.PromptCompleted != nil {
			completed++
		}
	}
	if completed != 1 {
		t.Errorf("Prompt stream of %d lines: %d prompt_completed, want 1:\n%s", len(prompt.lines), completed, strings.Join(prompt.raw, "\n"))
	}

	events := &ndjsonReader[agent_service.AgentServiceStreamEventsOKBody, *agent_service.AgentServiceStreamEventsOKBody]{ok: &agent_service.AgentServiceStreamEventsOK{}}
	_, err = c.AgentService.AgentServiceStreamEventsContext(ctx, agent_service.NewAgentServiceStreamEventsParams().WithSessionID(id), auth, events.option)
	if err != nil {
		t.Fatalf("StreamEvents: %v", err)
	}
	var started, promptDone int
	var last string
	for i, l := range events.lines {
		if l.Error != nil || l.Result == nil || l.Result.Event == nil {
			t.Fatalf("StreamEvents line %d is not an event: %s", i+1, events.raw[i])
		}
		ev := l.Result.Event
		if ev.SessionID != id {
			t.Errorf("StreamEvents line %d: session %q, want %q", i+1, ev.SessionID, id)
		}
		if ev.Sequence == last {
			t.Errorf("StreamEvents line %d repeats sequence %s", i+1, last)
		}
		last = ev.Sequence
		if ev.SessionStarted != nil {
			started++
		}
		if ev.PromptCompleted != nil {
			promptDone++
		}
	}
	if started != 1 || promptDone != 1 {
		t.Errorf("StreamEvents replay of %d lines: %d session_started, %d prompt_completed; want 1 and 1", len(events.lines), started, promptDone)
	}

	// And the generated Reader itself, given the JSON consumer: one
	// Consume call, one value: the stream's first line, nothing after it.
	first, err := c.LlmGatewayService.LLMGatewayServiceStreamContext(ctx,
		l_l_m_gateway_service.NewLLMGatewayServiceStreamParams().WithBody(llmBody("Again.")), auth)
	if err != nil {
		t.Fatalf("LLM Stream through the generated Reader: %v", err)
	}
	if first.Payload == nil || first.Payload.Result == nil || first.Payload.Result.Ended != nil {
		t.Errorf("the generated Reader on NDJSON = %+v, want the first line (not the end)", first.Payload)
	}
}

func strPtr(s string) *string { return &s }

func asDefault[T error](err error, target *T) bool {
	if err == nil {
		return false
	}
	d, ok := err.(T)
	if ok {
		*target = d
	}
	return ok
}
