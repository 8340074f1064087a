package bedrock

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// captured is one request the SDK sent.
type captured struct {
	req  *http.Request
	body []byte
}

// captureSDK runs send with an SDK client pointed at a server that records
// the request and answers 400 (the answer does not matter).
func captureSDK(t *testing.T, send func(*bedrockruntime.Client)) captured {
	t.Helper()
	var c captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.req = r
		c.body, _ = io.ReadAll(r.Body)
		w.Header().Set("X-Amzn-Errortype", "ValidationException")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"message":"captured"}`))
	}))
	defer srv.Close()
	creds := sigv4Creds()
	send(bedrockruntime.New(bedrockruntime.Options{
		Region:       creds[CredRegion],
		BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: creds[CredAccessKeyID], SecretAccessKey: creds[CredSecretKey], Source: "test"}, nil
		}),
		RetryMaxAttempts: 1,
	}))
	if c.req == nil {
		t.Fatal("the SDK sent no request")
	}
	return c
}

// TestSDKRequestOracle has the official SDK serialize the same conversation
// and checks our body, path escaping and signing against what it sends.
func TestSDKRequestOracle(t *testing.T) {
	const model = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
	sdk := captureSDK(t, func(c *bedrockruntime.Client) {
		c.ConverseStream(t.Context(), &bedrockruntime.ConverseStreamInput{
			ModelId: aws.String(model),
			System:  []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "You are terse."}},
			Messages: []types.Message{
				{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
					&types.ContentBlockMemberText{Value: "Weather in Paris?"},
					&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormatPng, Source: &types.ImageSourceMemberBytes{Value: []byte{0x89, 'P', 'N', 'G'}}}},
				}},
				{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{
					&types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberReasoningText{Value: types.ReasoningTextBlock{Text: aws.String("Need weather."), Signature: aws.String("EqQB")}}},
					&types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String("tooluse_1"), Name: aws.String("get_weather"), Input: document.NewLazyDocument(map[string]any{"city": "Paris"})}},
				}},
				{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
					&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{ToolUseId: aws.String("tooluse_1"), Status: types.ToolResultStatusError,
						Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "no network"}}}},
				}},
			},
			ToolConfig: &types.ToolConfiguration{
				Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{
					Name: aws.String("get_weather"), Description: aws.String("Current weather."),
					InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{
						"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"},
					})},
				}}},
				ToolChoice: &types.ToolChoiceMemberAny{Value: types.AnyToolChoice{}},
			},
			InferenceConfig: &types.InferenceConfiguration{MaxTokens: aws.Int32(1024), Temperature: aws.Float32(0.5)},
			OutputConfig: &types.OutputConfig{TextFormat: &types.OutputFormat{
				Type:      types.OutputFormatTypeJsonSchema,
				Structure: &types.OutputFormatStructureMemberJsonSchema{Value: types.JsonSchemaDefinition{Schema: aws.String(`{"type":"object"}`), Name: aws.String("answer")}},
			}},
		})
	})

	ours := &llmv1.Request{
		System: "You are terse.",
		Messages: []*llmv1.Message{
			{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{
				text("Weather in Paris?"),
				{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte{0x89, 'P', 'N', 'G'}}, MediaType: "image/png"}}},
			}},
			{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "Need weather.", Signature: "EqQB"}}},
				{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "tooluse_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
			}},
			{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "tooluse_1", IsError: true, Content: []*llmv1.ContentPart{text("no network")}}}},
			}},
		},
		Tools:           []*llmv1.ToolDefinition{{Name: "get_weather", Description: "Current weather.", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}},
		ToolChoice:      &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
		MaxOutputTokens: proto.Int32(1024),
		Temperature:     proto.Float64(0.5),
		ResponseFormat:  &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "answer", Schema: `{"type":"object"}`},
	}
	req, err := New().NewRequest(t.Context(), &codec.Call{Provider: provider(""), Model: model, Request: ours, Credentials: sigv4Creds(), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	body := requestBody(t, req)

	if diff := cmp.Diff(jsonValue(t, sdk.body), jsonValue(t, body)); diff != "" {
		t.Errorf("body differs from the SDK's (-sdk +ours):\n%s", diff)
	}
	if got, want := req.URL.EscapedPath(), sdk.req.URL.EscapedPath(); got != want {
		t.Errorf("escaped path = %s, SDK sends %s", got, want)
	}
	// The verifier must accept the SDK's own signature (so it is right),
	// then ours.
	sdk.req.URL.Host = sdk.req.Host
	verifySigV4(t, sdk.req, sdk.body, sigv4Creds()[CredSecretKey])
	verifySigV4(t, req, body, sigv4Creds()[CredSecretKey])
}
