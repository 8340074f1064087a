package llmgateway

import (
	"context"
	"io"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/server/malformedtest"
)

var gatewayService = llmv1.File_fabro_llm_v1_llm_proto.Services().ByName("LLMGatewayService")

// servedGateway runs the gateway (test upstream) in the real server runtime.
func servedGateway(t *testing.T) *grpc.ClientConn {
	t.Helper()
	gw := newGateway(t, newUpstream(t))
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, discardLogger(), gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestMalformedWire(t *testing.T) {
	conn := servedGateway(t)
	malformedtest.Wire(t, func(string) context.Context { return t.Context() }, conn, gatewayService)
}

// TestMalformedInput: every field of every gateway request with a rule, at
// a zero, unknown or out-of-range value. None reaches the upstream.
func TestMalformedInput(t *testing.T) {
	c := llmv1.NewLLMGatewayServiceClient(servedGateway(t))
	const invalid = grpcerr.ReasonInvalidArgument
	ia := codes.InvalidArgument
	ok := func() *llmv1.Request { return userReq("fake/fake-1", "hi") }
	with := func(f func(r *llmv1.Request)) *llmv1.Request { r := ok(); f(r); return r }
	complete := func(r *llmv1.Request) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Complete(ctx, &llmv1.CompleteRequest{Request: r})
			return err
		}
	}
	stream := func(r *llmv1.Request) func(context.Context) error {
		return func(ctx context.Context) error {
			st, err := c.Stream(ctx, &llmv1.StreamRequest{Request: r})
			if err != nil {
				return err
			}
			for {
				if _, err := st.Recv(); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		}
	}
	object := func(r *llmv1.CompleteObjectRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := c.CompleteObject(ctx, r); return err }
	}
	tool := func(name, params string) *llmv1.ToolDefinition {
		return &llmv1.ToolDefinition{Name: name, Parameters: params}
	}
	// The request rules, for each of the three RPCs that carry a Request.
	// CompleteObject replaces the request's response_format with its own
	// schema: those cases are not its.
	requestCases := []struct {
		name, field, reason string
		code                codes.Code
		req                 *llmv1.Request
	}{
		{"no request", "request", invalid, ia, nil},
		{"no model", "request.model", invalid, ia, with(func(r *llmv1.Request) { r.Model = "" })},
		{"unknown model", "", "MODEL_NOT_FOUND", codes.NotFound, with(func(r *llmv1.Request) { r.Model = "nope/nope-9" })},
		{"disabled model", "", "MODEL_DISABLED", codes.FailedPrecondition, with(func(r *llmv1.Request) { r.Model = "off/off-1" })},
		{"no messages", "request.messages", invalid, ia, with(func(r *llmv1.Request) { r.Messages = nil })},
		{"unset role", "request.messages[1].role", invalid, ia, with(func(r *llmv1.Request) {
			r.Messages = append(r.Messages, &llmv1.Message{Parts: userText("x").Parts})
		})},
		{"zero max_output_tokens", "request.max_output_tokens", invalid, ia, with(func(r *llmv1.Request) { r.MaxOutputTokens = proto.Int32(0) })},
		{"negative max_output_tokens", "request.max_output_tokens", invalid, ia, with(func(r *llmv1.Request) { r.MaxOutputTokens = proto.Int32(-5) })},
		{"NaN temperature", "request.temperature", invalid, ia, with(func(r *llmv1.Request) { r.Temperature = proto.Float64(math.NaN()) })},
		{"negative temperature", "request.temperature", invalid, ia, with(func(r *llmv1.Request) { r.Temperature = proto.Float64(-1) })},
		{"bad tool name", "request.tools[0].name", invalid, ia, with(func(r *llmv1.Request) { r.Tools = []*llmv1.ToolDefinition{tool("a b", "")} })},
		{"empty tool name", "request.tools[0].name", invalid, ia, with(func(r *llmv1.Request) { r.Tools = []*llmv1.ToolDefinition{tool("", "")} })},
		{"duplicate tool", "request.tools[1].name", invalid, ia, with(func(r *llmv1.Request) { r.Tools = []*llmv1.ToolDefinition{tool("t", ""), tool("t", "")} })},
		{"tool schema not an object", "request.tools[0].parameters", invalid, ia, with(func(r *llmv1.Request) { r.Tools = []*llmv1.ToolDefinition{tool("t", `[1]`)} })},
		{"tool schema not JSON", "request.tools[0].parameters", invalid, ia, with(func(r *llmv1.Request) { r.Tools = []*llmv1.ToolDefinition{tool("t", `{`)} })},
		{"tool choice naming no tool", "request.tool_choice.tool_name", invalid, ia, with(func(r *llmv1.Request) {
			r.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "ghost"}
		})},
		{"unknown tool choice mode", "request.tool_choice.mode", server.ReasonUnknownEnumValue, ia, with(func(r *llmv1.Request) { r.ToolChoice = &llmv1.ToolChoice{Mode: 42} })},
		{"unknown role", "request.messages[0].role", server.ReasonUnknownEnumValue, ia, with(func(r *llmv1.Request) { r.Messages[0].Role = 77 })},
		{"unknown reasoning effort", "request.reasoning_effort", server.ReasonUnknownEnumValue, ia, with(func(r *llmv1.Request) { r.ReasoningEffort = 99 })},
		{"bad response schema name", "request.response_format.name", invalid, ia, with(func(r *llmv1.Request) {
			r.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "", Schema: `{"type":"object"}`}
		})},
		{"malformed response schema", "request.response_format.schema", invalid, ia, with(func(r *llmv1.Request) {
			r.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "s", Schema: `{"type": 5}`}
		})},
		{"unknown response format type", "request.response_format.type", server.ReasonUnknownEnumValue, ia, with(func(r *llmv1.Request) { r.ResponseFormat = &llmv1.ResponseFormat{Type: 9} })},
	}
	notObject := map[string]bool{"bad response schema name": true, "malformed response schema": true}
	var cases []malformedtest.Case
	for _, rc := range requestCases {
		dom := ""
		if rc.reason == server.ReasonUnknownEnumValue {
			dom = string(server.Domain)
		}
		cases = append(cases,
			malformedtest.Case{Method: "Complete", Name: rc.name, Call: complete(rc.req), Code: rc.code, Reason: rc.reason, Domain: dom, Field: rc.field},
			malformedtest.Case{Method: "Stream", Name: rc.name, Call: stream(rc.req), Code: rc.code, Reason: rc.reason, Domain: dom, Field: rc.field},
		)
		if notObject[rc.name] {
			continue
		}
		cases = append(cases,
			malformedtest.Case{Method: "CompleteObject", Name: rc.name, Code: rc.code, Reason: rc.reason, Domain: dom, Field: rc.field,
				Call: object(&llmv1.CompleteObjectRequest{Request: rc.req, SchemaName: "s", Schema: `{"type":"object"}`})},
		)
	}
	cases = append(cases, []malformedtest.Case{
		{Method: "CompleteObject", Name: "bad schema name", Code: ia, Reason: invalid, Field: "schema_name",
			Call: object(&llmv1.CompleteObjectRequest{Request: ok(), SchemaName: "a b", Schema: `{"type":"object"}`})},
		{Method: "CompleteObject", Name: "no schema name", Code: ia, Reason: invalid, Field: "schema_name",
			Call: object(&llmv1.CompleteObjectRequest{Request: ok(), Schema: `{"type":"object"}`})},
		{Method: "CompleteObject", Name: "malformed schema", Code: ia, Reason: invalid, Field: "schema",
			Call: object(&llmv1.CompleteObjectRequest{Request: ok(), SchemaName: "s", Schema: `{"type":`})},
		{Method: "ListModels", Name: "unknown provider", Code: codes.NotFound, Reason: "PROVIDER_UNKNOWN", Call: func(ctx context.Context) error {
			_, err := c.ListModels(ctx, &llmv1.ListModelsRequest{ProviderId: "nope"})
			return err
		}},
		{Method: "ListModels", Name: "zero request", Code: codes.OK, Call: func(ctx context.Context) error {
			_, err := c.ListModels(ctx, &llmv1.ListModelsRequest{})
			return err
		}},
		{Method: "ListModels", Name: "forged page token", Code: ia, Reason: invalid, Field: "page_token", Call: func(ctx context.Context) error {
			_, err := c.ListModels(ctx, &llmv1.ListModelsRequest{PageToken: "b2Zmc2V0OjI"}) // base64 "offset:2"
			return err
		}},
		{Method: "ListModels", Name: "token of another provider", Code: ia, Reason: invalid, Field: "page_token", Call: func(ctx context.Context) error {
			first, err := c.ListModels(ctx, &llmv1.ListModelsRequest{PageSize: 1})
			if err != nil {
				return err
			}
			_, err = c.ListModels(ctx, &llmv1.ListModelsRequest{PageToken: first.GetNextPageToken(), ProviderId: "fake"})
			return err
		}},
		{Method: "ListProviders", Name: "token with other filters", Code: ia, Reason: invalid, Field: "page_token", Call: func(ctx context.Context) error {
			first, err := c.ListProviders(ctx, &llmv1.ListProvidersRequest{PageSize: 1, IncludeDisabled: true})
			if err != nil {
				return err
			}
			_, err = c.ListProviders(ctx, &llmv1.ListProvidersRequest{PageToken: first.GetNextPageToken()})
			return err
		}},
		{Method: "ListProviders", Name: "negative page size", Code: ia, Reason: invalid, Field: "page_size", Call: func(ctx context.Context) error {
			_, err := c.ListProviders(ctx, &llmv1.ListProvidersRequest{PageSize: -1})
			return err
		}},
		{Method: "GetModel", Name: "no provider", Code: ia, Reason: invalid, Field: "provider_id", Call: func(ctx context.Context) error {
			_, err := c.GetModel(ctx, &llmv1.GetModelRequest{ModelId: "x"})
			return err
		}},
		{Method: "GetModel", Name: "no model", Code: ia, Reason: invalid, Field: "model_id", Call: func(ctx context.Context) error {
			_, err := c.GetModel(ctx, &llmv1.GetModelRequest{ProviderId: "fake"})
			return err
		}},
		{Method: "GetModel", Name: "unknown provider", Code: codes.NotFound, Reason: "PROVIDER_UNKNOWN", Call: func(ctx context.Context) error {
			_, err := c.GetModel(ctx, &llmv1.GetModelRequest{ProviderId: "nope", ModelId: "x"})
			return err
		}},
		{Method: "GetModel", Name: "unknown model", Code: codes.NotFound, Reason: "MODEL_NOT_FOUND", Call: func(ctx context.Context) error {
			_, err := c.GetModel(ctx, &llmv1.GetModelRequest{ProviderId: "fake", ModelId: "nope"})
			return err
		}},
		{Method: "GetProvider", Name: "no provider", Code: ia, Reason: invalid, Field: "provider_id", Call: func(ctx context.Context) error {
			_, err := c.GetProvider(ctx, &llmv1.GetProviderRequest{})
			return err
		}},
		{Method: "GetProvider", Name: "unknown provider", Code: codes.NotFound, Reason: "PROVIDER_UNKNOWN", Call: func(ctx context.Context) error {
			_, err := c.GetProvider(ctx, &llmv1.GetProviderRequest{ProviderId: "nope"})
			return err
		}},
		{Method: "ListProviders", Name: "zero request", Code: codes.OK, Call: func(ctx context.Context) error {
			_, err := c.ListProviders(ctx, &llmv1.ListProvidersRequest{})
			return err
		}},
		{Method: "ResolveModel", Name: "no selector", Code: ia, Reason: invalid, Field: "selector", Call: func(ctx context.Context) error {
			_, err := c.ResolveModel(ctx, &llmv1.ResolveModelRequest{})
			return err
		}},
		{Method: "ResolveModel", Name: "unknown selector", Code: codes.NotFound, Reason: "MODEL_NOT_FOUND", Call: func(ctx context.Context) error {
			_, err := c.ResolveModel(ctx, &llmv1.ResolveModelRequest{Selector: "nope/none"})
			return err
		}},
		{Method: "Probe", Name: "no model", Code: ia, Reason: invalid, Field: "model", Call: func(ctx context.Context) error {
			_, err := c.Probe(ctx, &llmv1.ProbeRequest{})
			return err
		}},
		{Method: "Probe", Name: "negative timeout", Code: ia, Reason: invalid, Field: "timeout", Call: func(ctx context.Context) error {
			_, err := c.Probe(ctx, &llmv1.ProbeRequest{Model: "fake/fake-1", Timeout: durationpb.New(-time.Second)})
			return err
		}},
		{Method: "Probe", Name: "invalid timeout", Code: ia, Reason: invalid, Field: "timeout", Call: func(ctx context.Context) error {
			_, err := c.Probe(ctx, &llmv1.ProbeRequest{Model: "fake/fake-1", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -5}})
			return err
		}},
		{Method: "Probe", Name: "unknown mode", Code: ia, Reason: server.ReasonUnknownEnumValue, Domain: string(server.Domain), Field: "mode", Call: func(ctx context.Context) error {
			_, err := c.Probe(ctx, &llmv1.ProbeRequest{Model: "fake/fake-1", Mode: 12})
			return err
		}},
	}...)
	malformedtest.Table(t, t.Context(), gatewayService, domain, cases)
}
