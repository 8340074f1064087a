// Package anthropic is the anthropic-messages codec: the Anthropic Messages
// API (POST {base}/v1/messages), streaming over SSE or not, written by hand
// against the published wire format.
//
// Mapping notes:
//   - System and developer messages join Request.system in the top-level
//     "system"; tool messages become user turns of tool_result blocks, and
//     consecutive turns of one role merge (tool results must directly follow
//     the assistant turn that called them).
//   - max_tokens is required: Request.max_output_tokens (the core fills it
//     from the catalog's max output), else DefaultMaxTokens.
//   - Reasoning effort enables extended thinking with a budget (see
//     thinkingBudget), clamped below max_tokens; with thinking on,
//     temperature is not sent, since the API rejects it.
//   - JSON_SCHEMA response format uses output_config.format (structured
//     outputs); JSON_OBJECT, which the API cannot express natively, adds an
//     instruction to the system prompt.
//   - Reasoning parts replay as thinking blocks with their signature, or as
//     redacted_thinking with the signature as data; a reasoning part with no
//     signature is dropped, since the API rejects unsigned thinking.
//   - A redacted_thinking block is decoded as a REASONING block marked
//     Redacted (on its BlockStart and signature) whose signature is the
//     block's data. A thinking block with a signature and no text (display
//     "omitted") is not redacted: it replays as thinking.
//   - Blocks with no neutral form (server_tool_use, web_search_tool_result,
//     ...) are OPAQUE "anthropic.<type>" parts carrying the block's JSON and
//     replay byte for byte.
package anthropic

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

const (
	// Name is the catalog codec name.
	Name = "anthropic-messages"
	// APIVersion is sent as anthropic-version unless the provider's extra
	// headers set one.
	APIVersion = "2023-06-01"
	// DefaultMaxTokens is max_tokens when the request has no
	// max_output_tokens (the core normally passes the catalog's max output).
	DefaultMaxTokens = 8192
	// opaquePrefix namespaces opaque parts this codec produces and accepts.
	opaquePrefix = "anthropic."
	// jsonObjectInstruction stands in for a JSON-object response format.
	jsonObjectInstruction = "Respond with a single JSON object and nothing else: no prose, no code fences."
)

// New returns the anthropic-messages codec.
func New() codec.Codec { return anthropicCodec{} }

// FastModeBeta is the anthropic-beta value a request with a speed carries.
const FastModeBeta = "fast-mode-2026-02-01"

type anthropicCodec struct{}

var _ codec.Codec = anthropicCodec{}

func (anthropicCodec) Name() string { return Name }

// NewRequest implements codec.Codec.
func (anthropicCodec) NewRequest(ctx context.Context, call *codec.Call) (*http.Request, error) {
	body, err := buildBody(call)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint(call.Provider.GetBaseUrl()), bytes.NewReader(body))
	if err != nil {
		return nil, invalid("build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", APIVersion)
	if call.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if call.Request.GetSpeed() != "" {
		// Fast mode is a beta: the request names it (docs: build-with-claude/fast-mode).
		req.Header.Add("anthropic-beta", FastModeBeta)
	}
	codec.ApplyAuth(req.Header, call.Provider, codec.ResolveCredential(call, authDefaults))
	return req, nil
}

// endpoint accepts a base URL with or without the /v1 suffix (the catalog
// documents "https://api.anthropic.com/v1"; bare hosts are common too).
func endpoint(base string) string {
	base = strings.TrimRight(base, "/")
	if strings.HasSuffix(base, "/v1") {
		return base + "/messages"
	}
	return base + "/v1/messages"
}

// authDefaults: Anthropic's key goes in x-api-key unless the catalog says
// otherwise.
var authDefaults = codec.AuthDefaults{
	Names: []string{"ANTHROPIC_API_KEY"}, Scheme: llmv1.AuthScheme_AUTH_SCHEME_HEADER, Header: "x-api-key",
}

func invalid(format string, args ...any) *codec.Error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, Message: "anthropic: " + fmt.Sprintf(format, args...)}
}

// Wire types of the request. Content blocks are marshalled from the
// specific structs below; raw JSON (tool input, schemas, opaque blocks)
// travels as json.RawMessage so its bytes are kept.
type wireRequest struct {
	Model        string          `json:"model"`
	MaxTokens    int32           `json:"max_tokens"`
	System       string          `json:"system,omitempty"`
	Messages     []wireMessage   `json:"messages"`
	Tools        []wireTool      `json:"tools,omitempty"`
	ToolChoice   *wireToolChoice `json:"tool_choice,omitempty"`
	Temperature  *float64        `json:"temperature,omitempty"`
	StopSeqs     []string        `json:"stop_sequences,omitempty"`
	Thinking     *wireThinking   `json:"thinking,omitempty"`
	Speed        string          `json:"speed,omitempty"`
	OutputConfig *wireOutput     `json:"output_config,omitempty"`
	Stream       bool            `json:"stream,omitempty"`
}

type wireMessage struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type wireToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

type wireThinking struct {
	Type         string `json:"type"`
	BudgetTokens int32  `json:"budget_tokens"`
}

type wireOutput struct {
	Format wireFormat `json:"format"`
}

type wireFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema"`
}

type textBlock struct {
	Type string `json:"type"` // text
	Text string `json:"text"`
}

type imageBlock struct {
	Type   string      `json:"type"` // image
	Source imageSource `json:"source"`
}

type imageSource struct {
	Type      string `json:"type"` // base64 | url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type toolUseBlock struct {
	Type  string          `json:"type"` // tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type toolResultBlock struct {
	Type      string `json:"type"` // tool_result
	ToolUseID string `json:"tool_use_id"`
	Content   []any  `json:"content,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`
}

type thinkingBlock struct {
	Type      string `json:"type"` // thinking
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

type redactedBlock struct {
	Type string `json:"type"` // redacted_thinking
	Data string `json:"data"`
}

func buildBody(call *codec.Call) ([]byte, error) {
	r := call.Request
	if r == nil {
		return nil, invalid("no request")
	}
	w := wireRequest{Model: call.Model, MaxTokens: DefaultMaxTokens, Stream: call.Stream, StopSeqs: r.GetStopSequences(), Speed: r.GetSpeed()}
	if r.MaxOutputTokens != nil && r.GetMaxOutputTokens() > 0 {
		w.MaxTokens = r.GetMaxOutputTokens()
	}
	system := []string{}
	if r.GetSystem() != "" {
		system = append(system, r.GetSystem())
	}
	for i, m := range r.GetMessages() {
		var role string
		switch m.GetRole() {
		case llmv1.Role_ROLE_SYSTEM, llmv1.Role_ROLE_DEVELOPER:
			for _, p := range m.GetParts() {
				if t := p.GetText(); t != nil && t.GetText() != "" {
					system = append(system, t.GetText())
				}
			}
			continue
		case llmv1.Role_ROLE_USER, llmv1.Role_ROLE_TOOL:
			role = "user"
		case llmv1.Role_ROLE_ASSISTANT:
			role = "assistant"
		default:
			return nil, invalid("message %d: role %v", i, m.GetRole())
		}
		content, err := blocks(m.GetParts(), i)
		if err != nil {
			return nil, err
		}
		if len(content) == 0 {
			continue
		}
		if n := len(w.Messages); n > 0 && w.Messages[n-1].Role == role {
			w.Messages[n-1].Content = append(w.Messages[n-1].Content, content...)
			continue
		}
		w.Messages = append(w.Messages, wireMessage{Role: role, Content: content})
	}
	if w.Messages == nil {
		w.Messages = []wireMessage{}
	}
	for _, t := range r.GetTools() {
		schema, err := objectSchema(t.GetParameters())
		if err != nil {
			return nil, invalid("tool %q: parameters: %v", t.GetName(), err)
		}
		w.Tools = append(w.Tools, wireTool{Name: t.GetName(), Description: t.GetDescription(), InputSchema: schema})
	}
	if len(w.Tools) > 0 {
		switch tc := r.GetToolChoice(); tc.GetMode() {
		case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
			w.ToolChoice = &wireToolChoice{Type: "none"}
		case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
			w.ToolChoice = &wireToolChoice{Type: "any"}
		case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
			if tc.GetToolName() == "" {
				return nil, invalid("tool_choice TOOL without a tool name")
			}
			w.ToolChoice = &wireToolChoice{Type: "tool", Name: tc.GetToolName()}
		}
	}
	if budget := thinkingBudget(r.GetReasoningEffort(), w.MaxTokens); budget > 0 {
		w.Thinking = &wireThinking{Type: "enabled", BudgetTokens: budget}
	} else if r.Temperature != nil {
		t := r.GetTemperature()
		w.Temperature = &t
	}
	switch rf := r.GetResponseFormat(); rf.GetType() {
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
		schema, err := objectSchema(rf.GetSchema())
		if err != nil {
			return nil, invalid("response_format schema: %v", err)
		}
		w.OutputConfig = &wireOutput{Format: wireFormat{Type: "json_schema", Schema: schema}}
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT:
		system = append(system, jsonObjectInstruction)
	}
	w.System = strings.Join(system, "\n\n")
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, invalid("encode body: %v", err)
	}
	return b, nil
}

// thinkingBudget maps an effort to budget_tokens. The API wants at least
// 1024 and less than max_tokens; the budget leaves a quarter of max_tokens
// for the answer, and thinking stays off when max_tokens cannot fit it.
func thinkingBudget(e llmv1.ReasoningEffort, maxTokens int32) int32 {
	var b int32
	switch e {
	case llmv1.ReasoningEffort_REASONING_EFFORT_LOW:
		b = 1024
	case llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM:
		b = 4096
	case llmv1.ReasoningEffort_REASONING_EFFORT_HIGH:
		b = 16384
	case llmv1.ReasoningEffort_REASONING_EFFORT_XHIGH:
		b = 32768
	case llmv1.ReasoningEffort_REASONING_EFFORT_MAX:
		b = 65536
	default:
		return 0
	}
	if limit := maxTokens - maxTokens/4; b > limit {
		b = limit
	}
	if b < 1024 {
		return 0
	}
	return b
}

// objectSchema checks that s is a JSON object and returns it raw.
func objectSchema(s string) (json.RawMessage, error) {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	return json.RawMessage(s), nil
}

func blocks(parts []*llmv1.ContentPart, msg int) ([]any, error) {
	out := make([]any, 0, len(parts))
	for j, p := range parts {
		switch v := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			// The API rejects empty text blocks.
			if v.Text.GetText() != "" {
				out = append(out, textBlock{Type: "text", Text: v.Text.GetText()})
			}
		case *llmv1.ContentPart_Image:
			b, err := image(v.Image)
			if err != nil {
				return nil, invalid("message %d part %d: %v", msg, j, err)
			}
			out = append(out, b)
		case *llmv1.ContentPart_ToolCall:
			args := strings.TrimSpace(v.ToolCall.GetArguments())
			if args == "" {
				args = "{}"
			}
			if !json.Valid([]byte(args)) {
				return nil, invalid("message %d part %d: tool call %q arguments are not JSON", msg, j, v.ToolCall.GetId())
			}
			out = append(out, toolUseBlock{Type: "tool_use", ID: v.ToolCall.GetId(), Name: v.ToolCall.GetName(), Input: json.RawMessage(args)})
		case *llmv1.ContentPart_ToolResult:
			tr := toolResultBlock{Type: "tool_result", ToolUseID: v.ToolResult.GetToolCallId(), IsError: v.ToolResult.GetIsError()}
			for k, c := range v.ToolResult.GetContent() {
				switch cv := c.GetPart().(type) {
				case *llmv1.ContentPart_Text:
					if cv.Text.GetText() != "" {
						tr.Content = append(tr.Content, textBlock{Type: "text", Text: cv.Text.GetText()})
					}
				case *llmv1.ContentPart_Image:
					b, err := image(cv.Image)
					if err != nil {
						return nil, invalid("message %d part %d content %d: %v", msg, j, k, err)
					}
					tr.Content = append(tr.Content, b)
				default:
					return nil, invalid("message %d part %d content %d: tool results hold text and images only", msg, j, k)
				}
			}
			out = append(out, tr)
		case *llmv1.ContentPart_Reasoning:
			rp := v.Reasoning
			switch {
			case rp.GetRedacted():
				out = append(out, redactedBlock{Type: "redacted_thinking", Data: rp.GetSignature()})
			case rp.GetSignature() != "":
				out = append(out, thinkingBlock{Type: "thinking", Thinking: rp.GetText(), Signature: rp.GetSignature()})
			}
		case *llmv1.ContentPart_Opaque:
			if strings.HasPrefix(v.Opaque.GetKind(), opaquePrefix) {
				raw, err := codec.OpaqueItem(v.Opaque.GetKind(), opaquePrefix, v.Opaque.GetData())
				if err != nil {
					return nil, invalid("message %d part %d: %v", msg, j, err)
				}
				out = append(out, raw)
			}
		default:
			return nil, invalid("message %d part %d: empty part", msg, j)
		}
	}
	return out, nil
}

func image(img *llmv1.ImagePart) (imageBlock, error) {
	if u := img.GetUrl(); u != "" {
		if strings.HasPrefix(u, "data:") {
			mt, data, ok := parseDataURL(u)
			if !ok {
				return imageBlock{}, fmt.Errorf("malformed data URL")
			}
			return imageBlock{Type: "image", Source: imageSource{Type: "base64", MediaType: mt, Data: data}}, nil
		}
		return imageBlock{Type: "image", Source: imageSource{Type: "url", URL: u}}, nil
	}
	if len(img.GetData()) == 0 {
		return imageBlock{}, fmt.Errorf("image has neither url nor data")
	}
	if img.GetMediaType() == "" {
		return imageBlock{}, fmt.Errorf("image data without media_type")
	}
	return imageBlock{Type: "image", Source: imageSource{Type: "base64", MediaType: img.GetMediaType(), Data: base64.StdEncoding.EncodeToString(img.GetData())}}, nil
}

// parseDataURL splits "data:<media type>;base64,<data>".
func parseDataURL(u string) (mediaType, data string, ok bool) {
	meta, data, found := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	if !found {
		return "", "", false
	}
	mediaType, isB64 := strings.CutSuffix(meta, ";base64")
	if !isB64 || mediaType == "" {
		return "", "", false
	}
	return mediaType, data, true
}

// NewDecoder implements codec.Codec.
func (anthropicCodec) NewDecoder(body io.Reader) codec.Decoder { return newStreamDecoder(body) }
