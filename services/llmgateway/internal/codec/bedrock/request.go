package bedrock

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// Converse request shapes. ContentBlock is a union: exactly one member set.
type converseRequest struct {
	System                       []systemBlock   `json:"system,omitempty"`
	Messages                     []message       `json:"messages"`
	ToolConfig                   *toolConfig     `json:"toolConfig,omitempty"`
	InferenceConfig              *inference      `json:"inferenceConfig,omitempty"`
	AdditionalModelRequestFields json.RawMessage `json:"additionalModelRequestFields,omitempty"`
	OutputConfig                 *outputConfig   `json:"outputConfig,omitempty"`
}

type systemBlock struct {
	Text string `json:"text"`
}

type message struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

type toolConfig struct {
	Tools      []tool      `json:"tools"`
	ToolChoice *toolChoice `json:"toolChoice,omitempty"`
}

type tool struct {
	ToolSpec toolSpec `json:"toolSpec"`
}

type toolSpec struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	InputSchema inputSchema `json:"inputSchema"`
}

type inputSchema struct {
	JSON json.RawMessage `json:"json"`
}

type toolChoice struct {
	Auto *struct{}  `json:"auto,omitempty"`
	Any  *struct{}  `json:"any,omitempty"`
	Tool *namedTool `json:"tool,omitempty"`
}

type namedTool struct {
	Name string `json:"name"`
}

type inference struct {
	MaxTokens     *int32   `json:"maxTokens,omitempty"`
	Temperature   *float64 `json:"temperature,omitempty"`
	StopSequences []string `json:"stopSequences,omitempty"`
}

type outputConfig struct {
	TextFormat textFormat `json:"textFormat"`
}

type textFormat struct {
	Type      string    `json:"type"`
	Structure structure `json:"structure"`
}

type structure struct {
	JSONSchema jsonSchema `json:"jsonSchema"`
}

type jsonSchema struct {
	// Schema is JSON text inside a JSON string, as Converse requires.
	Schema string `json:"schema"`
	Name   string `json:"name,omitempty"`
}

func invalid(format string, args ...any) *codec.Error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, Message: "bedrock: " + fmt.Sprintf(format, args...)}
}

// buildBody renders the Converse (and ConverseStream: same body) request.
func buildBody(call *codec.Call) ([]byte, error) {
	r := call.Request
	out := converseRequest{Messages: []message{}}
	if s := r.GetSystem(); s != "" {
		out.System = append(out.System, systemBlock{Text: s})
	}
	usesTools := false
	for i, m := range r.GetMessages() {
		var role string
		switch m.GetRole() {
		case llmv1.Role_ROLE_SYSTEM, llmv1.Role_ROLE_DEVELOPER:
			// Converse has no system turns: they join the system blocks.
			for _, p := range m.GetParts() {
				if t := p.GetText(); t != nil && t.GetText() != "" {
					out.System = append(out.System, systemBlock{Text: t.GetText()})
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
		var content []json.RawMessage
		for j, p := range m.GetParts() {
			b, err := contentJSON(p, call.Provider.GetProviderId())
			if err != nil {
				return nil, invalid("message %d part %d: %v", i, j, err)
			}
			if b == nil {
				continue
			}
			if p.GetToolCall() != nil || p.GetToolResult() != nil {
				usesTools = true
			}
			content = append(content, b)
		}
		if len(content) == 0 {
			continue
		}
		// Converse requires alternating roles: tool results following a user
		// turn, or parallel results sent as several messages, merge into one.
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			out.Messages[n-1].Content = append(out.Messages[n-1].Content, content...)
			continue
		}
		out.Messages = append(out.Messages, message{Role: role, Content: content})
	}

	tc, err := buildTools(r, usesTools)
	if err != nil {
		return nil, err
	}
	out.ToolConfig = tc

	var inf inference
	if r.MaxOutputTokens != nil {
		v := r.GetMaxOutputTokens()
		inf.MaxTokens = &v
	}
	if r.Temperature != nil {
		v := r.GetTemperature()
		inf.Temperature = &v
	}
	extra, err := reasoningFields(call.Model, r.GetReasoningEffort(), &inf)
	if err != nil {
		return nil, err
	}
	out.AdditionalModelRequestFields = extra
	inf.StopSequences = r.GetStopSequences()
	if r.GetSpeed() != "" {
		return nil, invalid("speed %q is not supported by Bedrock Converse", r.GetSpeed())
	}
	if inf.MaxTokens != nil || inf.Temperature != nil || len(inf.StopSequences) > 0 {
		out.InferenceConfig = &inf
	}

	if rf := r.GetResponseFormat(); rf.GetType() == llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA {
		if !json.Valid([]byte(rf.GetSchema())) {
			return nil, invalid("response format schema is not valid JSON")
		}
		out.OutputConfig = &outputConfig{TextFormat: textFormat{
			Type:      "json_schema",
			Structure: structure{JSONSchema: jsonSchema{Schema: rf.GetSchema(), Name: rf.GetName()}},
		}}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("bedrock: encode request: %w", err)
	}
	return b, nil
}

// buildTools renders toolConfig. Converse has no "none" tool choice: with
// NONE the tools are left out, unless the conversation already holds
// toolUse/toolResult blocks, which Converse rejects without a toolConfig.
func buildTools(r *llmv1.Request, usesTools bool) (*toolConfig, error) {
	mode := r.GetToolChoice().GetMode()
	if len(r.GetTools()) == 0 || (mode == llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE && !usesTools) {
		if mode == llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL || mode == llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED {
			return nil, invalid("tool choice %v without tools", mode)
		}
		return nil, nil
	}
	tc := &toolConfig{}
	names := map[string]bool{}
	for _, t := range r.GetTools() {
		schema := strings.TrimSpace(t.GetParameters())
		if schema == "" {
			schema = `{"type":"object","properties":{}}`
		}
		var probe map[string]any
		if err := json.Unmarshal([]byte(schema), &probe); err != nil {
			return nil, invalid("tool %q: parameters are not a JSON object schema: %v", t.GetName(), err)
		}
		names[t.GetName()] = true
		tc.Tools = append(tc.Tools, tool{ToolSpec: toolSpec{
			Name: t.GetName(), Description: t.GetDescription(), InputSchema: inputSchema{JSON: json.RawMessage(schema)},
		}})
	}
	switch mode {
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED, llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
		tc.ToolChoice = &toolChoice{Auto: &struct{}{}}
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
		tc.ToolChoice = &toolChoice{Any: &struct{}{}}
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
		name := r.GetToolChoice().GetToolName()
		if !names[name] {
			return nil, invalid("tool choice names %q, which is not among the tools", name)
		}
		tc.ToolChoice = &toolChoice{Tool: &namedTool{Name: name}}
	}
	return tc, nil
}

// Reasoning budgets for Claude's extended thinking, by effort.
var thinkingBudget = map[llmv1.ReasoningEffort]int32{
	llmv1.ReasoningEffort_REASONING_EFFORT_LOW:    2048,
	llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM: 8192,
	llmv1.ReasoningEffort_REASONING_EFFORT_HIGH:   16384,
	llmv1.ReasoningEffort_REASONING_EFFORT_XHIGH:  32768,
	llmv1.ReasoningEffort_REASONING_EFFORT_MAX:    63999,
}

// reasoningFields renders additionalModelRequestFields for the reasoning
// effort, in the dialect of the model family behind the id:
//   - Anthropic Claude: thinking {type: enabled, budget_tokens}; the budget
//     must stay below maxTokens, and Claude rejects a temperature with
//     thinking, so it is dropped.
//   - Amazon Nova: reasoningConfig {type: enabled, maxReasoningEffort}.
//   - OpenAI gpt-oss: reasoning_effort.
//
// Other families either always reason (DeepSeek R1) or take no knob, so the
// effort is not sent.
func reasoningFields(model string, effort llmv1.ReasoningEffort, inf *inference) (json.RawMessage, error) {
	if effort == llmv1.ReasoningEffort_REASONING_EFFORT_UNSPECIFIED {
		return nil, nil
	}
	id := strings.ToLower(model)
	level := map[llmv1.ReasoningEffort]string{
		llmv1.ReasoningEffort_REASONING_EFFORT_LOW:    "low",
		llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM: "medium",
	}[effort]
	if level == "" {
		level = "high"
	}
	var v any
	switch {
	case strings.Contains(id, "anthropic.claude"):
		budget := thinkingBudget[effort]
		if inf.MaxTokens == nil {
			// Converse needs maxTokens above the budget; leave room for the answer.
			mt := budget + 8192
			inf.MaxTokens = &mt
		} else if budget >= *inf.MaxTokens {
			budget = *inf.MaxTokens - 1
		}
		if budget < 1024 {
			// Claude's minimum thinking budget; below it thinking is off.
			return nil, nil
		}
		inf.Temperature = nil
		v = map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": budget}}
	case strings.Contains(id, "amazon.nova"):
		v = map[string]any{"reasoningConfig": map[string]any{"type": "enabled", "maxReasoningEffort": level}}
	case strings.Contains(id, "openai.gpt-oss"):
		v = map[string]any{"reasoning_effort": level}
	default:
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("bedrock: encode reasoning fields: %w", err)
	}
	return b, nil
}

// contentJSON renders one part as a Converse ContentBlock, or nil to leave
// it out. providerID is the provider the request goes to.
func contentJSON(p *llmv1.ContentPart, providerID string) (json.RawMessage, error) {
	var v any
	switch x := p.GetPart().(type) {
	case *llmv1.ContentPart_Text:
		// Converse rejects blank text blocks.
		if x.Text.GetText() == "" {
			return nil, nil
		}
		v = map[string]string{"text": x.Text.GetText()}
	case *llmv1.ContentPart_Image:
		img, err := imageBlock(x.Image)
		if err != nil {
			return nil, err
		}
		v = map[string]any{"image": img}
	case *llmv1.ContentPart_ToolCall:
		args := strings.TrimSpace(x.ToolCall.GetArguments())
		if args == "" {
			args = "{}"
		}
		if !json.Valid([]byte(args)) {
			return nil, fmt.Errorf("tool call %q: arguments are not JSON", x.ToolCall.GetId())
		}
		v = map[string]any{"toolUse": map[string]any{
			"toolUseId": x.ToolCall.GetId(), "name": x.ToolCall.GetName(), "input": json.RawMessage(args),
		}}
	case *llmv1.ContentPart_ToolResult:
		tr := x.ToolResult
		content := []any{}
		for _, c := range tr.GetContent() {
			switch {
			case c.GetText() != nil:
				content = append(content, map[string]string{"text": c.GetText().GetText()})
			case c.GetImage() != nil:
				img, err := imageBlock(c.GetImage())
				if err != nil {
					return nil, err
				}
				content = append(content, map[string]any{"image": img})
			default:
				return nil, fmt.Errorf("tool result %q: only text and image content", tr.GetToolCallId())
			}
		}
		if len(content) == 0 {
			// Converse requires at least one content item.
			content = append(content, map[string]string{"text": ""})
		}
		res := map[string]any{"toolUseId": tr.GetToolCallId(), "content": content}
		if tr.GetIsError() {
			res["status"] = "error"
		}
		v = map[string]any{"toolResult": res}
	case *llmv1.ContentPart_Reasoning:
		r := x.Reasoning
		if o := r.GetSignatureOrigin(); o != "" && providerID != "" && o != providerID {
			// Another provider's signature would be rejected; the gateway
			// core drops these too, this is the codec's own guard.
			return nil, nil
		}
		if r.GetRedacted() {
			if _, err := base64.StdEncoding.DecodeString(r.GetSignature()); err != nil {
				return nil, fmt.Errorf("redacted reasoning is not base64: %v", err)
			}
			v = map[string]any{"reasoningContent": map[string]string{"redactedContent": r.GetSignature()}}
			break
		}
		if r.GetSignature() == "" {
			// Unsigned reasoning cannot be replayed to Bedrock (Claude
			// rejects it); the text is the model's own scratch, not input.
			return nil, nil
		}
		v = map[string]any{"reasoningContent": map[string]any{
			"reasoningText": map[string]string{"text": r.GetText(), "signature": r.GetSignature()},
		}}
	case *llmv1.ContentPart_Opaque:
		if x.Opaque.GetKind() != OpaqueKind {
			return nil, nil // another provider's state
		}
		if !json.Valid([]byte(x.Opaque.GetData())) {
			return nil, fmt.Errorf("opaque %s part is not JSON", OpaqueKind)
		}
		// Byte for byte, as the provider sent it.
		return json.RawMessage(x.Opaque.GetData()), nil
	default:
		return nil, fmt.Errorf("empty content part")
	}
	return json.Marshal(v)
}

// imageBlock renders an ImageBlock: inline bytes (from data or a data: URL)
// or an s3:// location. Converse cannot fetch http(s) URLs.
func imageBlock(img *llmv1.ImagePart) (map[string]any, error) {
	mediaType, data := img.GetMediaType(), img.GetData()
	if u := img.GetUrl(); u != "" {
		switch {
		case strings.HasPrefix(u, "data:"):
			meta, payload, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
			if !ok || !strings.HasSuffix(meta, ";base64") {
				return nil, fmt.Errorf("image data URL must be base64")
			}
			if mediaType == "" {
				mediaType = strings.TrimSuffix(meta, ";base64")
			}
			b, err := base64.StdEncoding.DecodeString(payload)
			if err != nil {
				return nil, fmt.Errorf("image data URL: %v", err)
			}
			data = b
		case strings.HasPrefix(u, "s3://"):
			f, err := imageFormat(mediaType, u)
			if err != nil {
				return nil, err
			}
			return map[string]any{"format": f, "source": map[string]any{"s3Location": map[string]string{"uri": u}}}, nil
		default:
			return nil, fmt.Errorf("bedrock cannot fetch image URLs; send the bytes or an s3:// URI")
		}
	}
	f, err := imageFormat(mediaType, "")
	if err != nil {
		return nil, err
	}
	return map[string]any{"format": f, "source": map[string]any{"bytes": data}}, nil // []byte marshals as base64
}

// imageFormat maps a media type (or a URI's extension) to Converse's format.
func imageFormat(mediaType, uri string) (string, error) {
	t := strings.ToLower(strings.TrimPrefix(mediaType, "image/"))
	if t == "" && uri != "" {
		t = strings.ToLower(uri[strings.LastIndexByte(uri, '.')+1:])
	}
	switch t {
	case "png", "gif", "webp":
		return t, nil
	case "jpeg", "jpg":
		return "jpeg", nil
	}
	return "", fmt.Errorf("image media type %q: Converse takes png, jpeg, gif or webp", mediaType)
}
