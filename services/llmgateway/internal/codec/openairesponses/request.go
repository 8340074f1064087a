package openairesponses

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire"
)

// OpaqueReasoning is the OpaquePart kind of a Responses reasoning item.
const OpaqueReasoning = "openai.reasoning"

type request struct {
	Model           string        `json:"model"`
	Instructions    string        `json:"instructions,omitempty"`
	Input           []any         `json:"input"`
	Tools           []tool        `json:"tools,omitempty"`
	ToolChoice      any           `json:"tool_choice,omitempty"`
	Reasoning       *reasoningCfg `json:"reasoning,omitempty"`
	Include         []string      `json:"include,omitempty"`
	Store           bool          `json:"store"`
	Text            *textCfg      `json:"text,omitempty"`
	MaxOutputTokens *int32        `json:"max_output_tokens,omitempty"`
	Temperature     *float64      `json:"temperature,omitempty"`
	Stream          bool          `json:"stream,omitempty"`
}

type message struct {
	Type    string `json:"type"`
	Role    string `json:"role"`
	Content any    `json:"content"` // string or []inputPart
}

type inputText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type inputImage struct {
	Type     string `json:"type"`
	ImageURL string `json:"image_url"`
	Detail   string `json:"detail"`
}

type functionCall struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type functionCallOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output any    `json:"output"` // string or []inputPart
}

type tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	// Strict is sent as false: strict mode rejects schemas with optional
	// properties, and the gateway validates arguments itself.
	Strict bool `json:"strict"`
}

type namedToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type reasoningCfg struct {
	Effort  string `json:"effort,omitempty"`
	Summary string `json:"summary,omitempty"`
}

type textCfg struct {
	Format format `json:"format"`
}

type format struct {
	Type   string          `json:"type"`
	Name   string          `json:"name,omitempty"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Strict *bool           `json:"strict,omitempty"`
}

// buildBody renders the Responses request. The conversation is sent whole
// and nothing is stored upstream (store:false): reasoning items come back
// with encrypted_content and are replayed from opaque parts, so the gateway
// stays stateless.
func buildBody(call *codec.Call) ([]byte, error) {
	r := call.Request
	body := request{
		Model:        call.Model,
		Instructions: r.GetSystem(),
		Input:        []any{},
		Include:      []string{"reasoning.encrypted_content"},
		Stream:       call.Stream,
	}
	if r.GetSpeed() != "" {
		return nil, openaiwire.Invalid("speed " + strconv.Quote(r.GetSpeed()) + " is not supported by the OpenAI Responses API")
	}
	if len(r.GetStopSequences()) > 0 {
		// The Responses API has no stop parameter: refusing beats ignoring.
		return nil, openaiwire.Invalid("stop sequences are not supported by the OpenAI Responses API")
	}
	for i, m := range r.GetMessages() {
		items, err := convertMessage(m)
		if err != nil {
			return nil, openaiwire.Invalid(fmt.Sprintf("messages[%d]: %s", i, err.Error()))
		}
		body.Input = append(body.Input, items...)
	}
	params, err := openaiwire.ToolParameters(r.GetTools())
	if err != nil {
		return nil, err
	}
	for i, t := range r.GetTools() {
		body.Tools = append(body.Tools, tool{Type: "function", Name: t.GetName(), Description: t.GetDescription(), Parameters: params[i]})
	}
	choice, named, err := openaiwire.ToolChoice(r.GetToolChoice(), r.GetTools())
	switch {
	case err != nil:
		return nil, err
	case named:
		body.ToolChoice = namedToolChoice{Type: "function", Name: choice}
	case choice != "":
		body.ToolChoice = choice
	}
	if e := openaiwire.Effort(r.GetReasoningEffort()); e != "" {
		body.Reasoning = &reasoningCfg{Effort: e, Summary: "auto"}
	}
	if r.MaxOutputTokens != nil {
		v := r.GetMaxOutputTokens()
		body.MaxOutputTokens = &v
	}
	if r.Temperature != nil {
		v := r.GetTemperature()
		body.Temperature = &v
	}
	switch rf := r.GetResponseFormat(); rf.GetType() {
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT:
		body.Text = &textCfg{Format: format{Type: "json_object"}}
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
		name, schema, err := openaiwire.ResponseSchema(rf)
		if err != nil {
			return nil, err
		}
		strict := false
		body.Text = &textCfg{Format: format{Type: "json_schema", Name: name, Schema: schema, Strict: &strict}}
	}
	b, err := openaiwire.Marshal(body)
	if err != nil {
		return nil, openaiwire.Invalid("encode request: " + err.Error())
	}
	return b, nil
}

type convError string

func (e convError) Error() string { return string(e) }

// convertMessage maps one message to input items, keeping the order of an
// assistant turn's parts: reasoning items, text and function calls
// interleave as the model produced them.
func convertMessage(m *llmv1.Message) ([]any, error) {
	switch m.GetRole() {
	case llmv1.Role_ROLE_SYSTEM, llmv1.Role_ROLE_DEVELOPER:
		role := "system"
		if m.GetRole() == llmv1.Role_ROLE_DEVELOPER {
			role = "developer"
		}
		var b strings.Builder
		for _, p := range m.GetParts() {
			if p.GetText() == nil {
				return nil, convError(role + " messages hold text only")
			}
			b.WriteString(p.GetText().GetText())
		}
		return []any{message{Type: "message", Role: role, Content: b.String()}}, nil
	case llmv1.Role_ROLE_USER:
		parts, err := inputParts(m.GetParts())
		if err != nil {
			return nil, err
		}
		return []any{message{Type: "message", Role: "user", Content: parts}}, nil
	case llmv1.Role_ROLE_ASSISTANT:
		var items []any
		for _, p := range m.GetParts() {
			switch x := p.GetPart().(type) {
			case *llmv1.ContentPart_Text:
				if x.Text.GetText() != "" {
					items = append(items, message{Type: "message", Role: "assistant", Content: x.Text.GetText()})
				}
			case *llmv1.ContentPart_ToolCall:
				args := x.ToolCall.GetArguments()
				if args == "" {
					args = "{}"
				}
				items = append(items, functionCall{Type: "function_call", CallID: x.ToolCall.GetId(), Name: x.ToolCall.GetName(), Arguments: args})
			case *llmv1.ContentPart_Opaque:
				// Our own items (reasoning with encrypted_content) go back
				// byte for byte; other providers' state is not ours to send.
				if !strings.HasPrefix(x.Opaque.GetKind(), "openai.") {
					continue
				}
				raw, err := codec.OpaqueItem(x.Opaque.GetKind(), "openai.", x.Opaque.GetData())
				if err != nil {
					return nil, err
				}
				items = append(items, raw)
			case *llmv1.ContentPart_Reasoning:
				// Readable reasoning is a summary of a reasoning item; the
				// item itself travels as the opaque part.
			default:
				return nil, convError("assistant messages hold text, tool calls, reasoning and opaque parts only")
			}
		}
		return items, nil
	case llmv1.Role_ROLE_TOOL:
		var items []any
		for _, p := range m.GetParts() {
			tr := p.GetToolResult()
			if tr == nil {
				return nil, convError("tool messages carry tool results only")
			}
			var out any
			images := false
			for _, c := range tr.GetContent() {
				if c.GetImage() != nil {
					images = true
				}
			}
			if images {
				parts, err := inputParts(tr.GetContent())
				if err != nil {
					return nil, err
				}
				out = parts
			} else {
				var b strings.Builder
				for _, c := range tr.GetContent() {
					if c.GetText() == nil {
						return nil, convError("tool results hold text and images only")
					}
					b.WriteString(c.GetText().GetText())
				}
				out = b.String()
			}
			items = append(items, functionCallOutput{Type: "function_call_output", CallID: tr.GetToolCallId(), Output: out})
		}
		return items, nil
	}
	return nil, convError(fmt.Sprintf("unsupported role %v", m.GetRole()))
}

func inputParts(parts []*llmv1.ContentPart) ([]any, error) {
	out := make([]any, 0, len(parts))
	for _, p := range parts {
		switch x := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			out = append(out, inputText{Type: "input_text", Text: x.Text.GetText()})
		case *llmv1.ContentPart_Image:
			u, err := openaiwire.DataURL(x.Image)
			if err != nil {
				return nil, err
			}
			out = append(out, inputImage{Type: "input_image", ImageURL: u, Detail: "auto"})
		default:
			return nil, convError("user content holds text and images only")
		}
	}
	return out, nil
}
