package openaichat

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire"
)

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Tools               []chatTool      `json:"tools,omitempty"`
	ToolChoice          any             `json:"tool_choice,omitempty"`
	MaxCompletionTokens *int32          `json:"max_completion_tokens,omitempty"`
	MaxTokens           *int32          `json:"max_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	Stop                []string        `json:"stop,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
	ResponseFormat      *responseFormat `json:"response_format,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *streamOptions  `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // string, []contentPart, or nil for an assistant turn of tool calls only
	Name    string `json:"name,omitempty"`
	// ReasoningContent replays reasoning to OpenAI-compatible hosts that
	// require it in tool loops (DeepSeek, Moonshot); OpenAI never gets it.
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string         `json:"tool_call_id,omitempty"`
}

// contentPart is textPart or imagePart.
type contentPart any

type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type imagePart struct {
	Type     string   `json:"type"`
	ImageURL imageURL `json:"image_url"`
}

type imageURL struct {
	URL string `json:"url"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type namedToolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

type responseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *jsonSchema `json:"json_schema,omitempty"`
}

type jsonSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

// isOpenAI reports whether the provider speaks OpenAI's own dialect
// (max_completion_tokens, the developer role, no reasoning_content) rather
// than the compatible hosts' one: the catalog's chat_dialect, inferred
// from the id and base URL when unset.
func isOpenAI(p *llmv1.Provider) bool {
	switch p.GetChatDialect() {
	case llmv1.ChatDialect_CHAT_DIALECT_OPENAI:
		return true
	case llmv1.ChatDialect_CHAT_DIALECT_COMPATIBLE:
		return false
	}
	u := p.GetBaseUrl()
	return p.GetProviderId() == "openai" || strings.Contains(u, "api.openai.com") || strings.Contains(u, ".openai.azure.com")
}

// buildBody renders the Chat Completions request body.
func buildBody(call *codec.Call) ([]byte, error) {
	r := call.Request
	openai := isOpenAI(call.Provider)
	body := chatRequest{Model: call.Model, Stream: call.Stream}
	if call.Stream {
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if r.GetSystem() != "" {
		body.Messages = append(body.Messages, chatMessage{Role: "system", Content: r.GetSystem()})
	}
	for i, m := range r.GetMessages() {
		msgs, err := convertMessage(m, openai)
		if err != nil {
			return nil, openaiwire.Invalid(fmt.Sprintf("messages[%d]: %s", i, err.Error()))
		}
		body.Messages = append(body.Messages, msgs...)
	}
	params, err := openaiwire.ToolParameters(r.GetTools())
	if err != nil {
		return nil, err
	}
	for i, t := range r.GetTools() {
		body.Tools = append(body.Tools, chatTool{Type: "function", Function: functionDef{Name: t.GetName(), Description: t.GetDescription(), Parameters: params[i]}})
	}
	choice, named, err := openaiwire.ToolChoice(r.GetToolChoice(), r.GetTools())
	switch {
	case err != nil:
		return nil, err
	case named:
		var n namedToolChoice
		n.Type = "function"
		n.Function.Name = choice
		body.ToolChoice = n
	case choice != "":
		body.ToolChoice = choice
	}
	if r.MaxOutputTokens != nil {
		v := r.GetMaxOutputTokens()
		if openai {
			body.MaxCompletionTokens = &v
		} else {
			body.MaxTokens = &v
		}
	}
	if r.Temperature != nil {
		v := r.GetTemperature()
		body.Temperature = &v
	}
	body.Stop = r.GetStopSequences()
	if r.GetSpeed() != "" {
		return nil, openaiwire.Invalid("speed " + strconv.Quote(r.GetSpeed()) + " is not supported by the Chat Completions API")
	}
	body.ReasoningEffort = openaiwire.Effort(r.GetReasoningEffort())
	switch rf := r.GetResponseFormat(); rf.GetType() {
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT:
		body.ResponseFormat = &responseFormat{Type: "json_object"}
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
		name, schema, err := openaiwire.ResponseSchema(rf)
		if err != nil {
			return nil, err
		}
		// Not strict: strict mode rejects schemas that leave properties
		// optional; the gateway validates the reply against the schema.
		body.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &jsonSchema{Name: name, Schema: schema}}
	}
	b, err := openaiwire.Marshal(body)
	if err != nil {
		return nil, openaiwire.Invalid("encode request: " + err.Error())
	}
	return b, nil
}

type convError string

func (e convError) Error() string { return string(e) }

// convertMessage maps one message to chat messages: a tool message becomes
// one "tool" message per result (plus a user message carrying any images,
// which tool messages cannot hold).
func convertMessage(m *llmv1.Message, openai bool) ([]chatMessage, error) {
	switch m.GetRole() {
	case llmv1.Role_ROLE_SYSTEM, llmv1.Role_ROLE_DEVELOPER:
		role := "system"
		if m.GetRole() == llmv1.Role_ROLE_DEVELOPER && openai {
			role = "developer"
		}
		text, err := textOnly(m.GetParts())
		if err != nil {
			return nil, err
		}
		return []chatMessage{{Role: role, Content: text, Name: m.GetName()}}, nil
	case llmv1.Role_ROLE_USER:
		content, err := userContent(m.GetParts())
		if err != nil {
			return nil, err
		}
		return []chatMessage{{Role: "user", Content: content, Name: m.GetName()}}, nil
	case llmv1.Role_ROLE_ASSISTANT:
		msg := chatMessage{Role: "assistant", Name: m.GetName()}
		var text, reasoning strings.Builder
		for _, p := range m.GetParts() {
			switch x := p.GetPart().(type) {
			case *llmv1.ContentPart_Text:
				text.WriteString(x.Text.GetText())
			case *llmv1.ContentPart_ToolCall:
				args := x.ToolCall.GetArguments()
				if args == "" {
					args = "{}"
				}
				msg.ToolCalls = append(msg.ToolCalls, chatToolCall{ID: x.ToolCall.GetId(), Type: "function", Function: functionCall{Name: x.ToolCall.GetName(), Arguments: args}})
			case *llmv1.ContentPart_Reasoning:
				reasoning.WriteString(x.Reasoning.GetText())
			case *llmv1.ContentPart_Opaque:
				// Other protocols' state (Responses reasoning items) has no
				// Chat Completions form.
			case *llmv1.ContentPart_Image:
				return nil, convError("assistant messages cannot carry images")
			case *llmv1.ContentPart_ToolResult:
				return nil, convError("tool results belong in tool messages")
			}
		}
		if text.Len() > 0 {
			msg.Content = text.String()
		} else if len(msg.ToolCalls) == 0 {
			msg.Content = ""
		}
		if !openai {
			msg.ReasoningContent = reasoning.String()
		}
		return []chatMessage{msg}, nil
	case llmv1.Role_ROLE_TOOL:
		var out []chatMessage
		var images []contentPart
		for _, p := range m.GetParts() {
			tr := p.GetToolResult()
			if tr == nil {
				return nil, convError("tool messages carry tool results only")
			}
			var text strings.Builder
			for _, c := range tr.GetContent() {
				switch x := c.GetPart().(type) {
				case *llmv1.ContentPart_Text:
					text.WriteString(x.Text.GetText())
				case *llmv1.ContentPart_Image:
					u, err := openaiwire.DataURL(x.Image)
					if err != nil {
						return nil, err
					}
					images = append(images, imagePart{Type: "image_url", ImageURL: imageURL{URL: u}})
				default:
					return nil, convError("tool results hold text and images only")
				}
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: tr.GetToolCallId(), Content: text.String()})
		}
		if len(images) > 0 {
			out = append(out, chatMessage{Role: "user", Content: images})
		}
		return out, nil
	}
	return nil, convError(fmt.Sprintf("unsupported role %v", m.GetRole()))
}

func textOnly(parts []*llmv1.ContentPart) (string, error) {
	var b strings.Builder
	for _, p := range parts {
		t := p.GetText()
		if t == nil {
			return "", convError("system messages hold text only")
		}
		b.WriteString(t.GetText())
	}
	return b.String(), nil
}

// userContent is a plain string for a single text part (accepted by every
// compatible host) and an array of parts otherwise.
func userContent(parts []*llmv1.ContentPart) (any, error) {
	if len(parts) == 1 && parts[0].GetText() != nil {
		return parts[0].GetText().GetText(), nil
	}
	out := make([]contentPart, 0, len(parts))
	for _, p := range parts {
		switch x := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			out = append(out, textPart{Type: "text", Text: x.Text.GetText()})
		case *llmv1.ContentPart_Image:
			u, err := openaiwire.DataURL(x.Image)
			if err != nil {
				return nil, err
			}
			out = append(out, imagePart{Type: "image_url", ImageURL: imageURL{URL: u}})
		default:
			return nil, convError("user messages hold text and images only")
		}
	}
	return out, nil
}
