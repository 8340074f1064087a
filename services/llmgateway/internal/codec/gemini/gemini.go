// Package gemini is the gemini-generate codec: the Gemini API's
// generateContent and streamGenerateContent?alt=sse
// (POST {base}/models/{model}:...), written by hand against the published
// wire format.
//
// Mapping notes:
//   - System and developer messages join Request.system in
//     systemInstruction; assistant turns are role "model"; tool results are
//     functionResponse parts in a user turn, {"output": text} or, for a
//     failed call, {"error": text}, as the API documents; images in a tool
//     result follow it as inlineData parts.
//   - Gemini has no call ids: a functionCall without an id gets one made
//     from the responseId and the call's ordinal ("gc_<responseId>_<n>",
//     or a random stem when there is no responseId), stable for the
//     response. Ids with that prefix are not sent back, since the API never
//     issued them; ids the API did issue are.
//   - thoughtSignature is carried on the block of the part it arrived on
//     (TextPart, ToolCall or ReasoningPart signature) and sent back on that
//     part untouched. Text parts merge into one block until a part with a
//     signature, which closes the block so that a signed part is never
//     merged with a later one.
//   - Reasoning effort maps to thinkingConfig: thinkingLevel for Gemini 3
//     and later, thinkingBudget for gemini-1.x/2.x, with includeThoughts.
//   - Response formats use responseMimeType application/json, with
//     responseJsonSchema (plain JSON Schema) for JSON_SCHEMA.
//   - Usage: promptTokenCount includes cachedContentTokenCount, so
//     Input = promptTokenCount - cachedContentTokenCount +
//     toolUsePromptTokenCount and CacheRead = cachedContentTokenCount;
//     candidatesTokenCount excludes thoughtsTokenCount, so
//     Output = candidatesTokenCount + thoughtsTokenCount and
//     Reasoning = thoughtsTokenCount. Gemini reports no cache writes.
//   - The stream has no terminator: the chunk carrying finishReason (or a
//     promptFeedback.blockReason) is the end marker; Finish is emitted at
//     EOF so that a trailing usage-only chunk still counts.
package gemini

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
	Name = "gemini-generate"
	// SyntheticIDPrefix starts the tool call ids this codec makes up.
	SyntheticIDPrefix = "gc_"
	opaquePrefix      = "gemini."
)

// New returns the gemini-generate codec.
func New() codec.Codec { return geminiCodec{} }

type geminiCodec struct{}

var _ codec.Codec = geminiCodec{}

func (geminiCodec) Name() string { return Name }

// NewRequest implements codec.Codec.
func (geminiCodec) NewRequest(ctx context.Context, call *codec.Call) (*http.Request, error) {
	body, err := buildBody(call)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint(call.Provider.GetBaseUrl(), call.Model, call.Stream), bytes.NewReader(body))
	if err != nil {
		return nil, invalid("build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if call.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	codec.ApplyAuth(req.Header, call.Provider, codec.ResolveCredential(call, authDefaults))
	return req, nil
}

func endpoint(base, model string, stream bool) string {
	base = strings.TrimRight(base, "/")
	model = strings.TrimPrefix(model, "models/")
	if stream {
		return base + "/models/" + model + ":streamGenerateContent?alt=sse"
	}
	return base + "/models/" + model + ":generateContent"
}

// authDefaults: Gemini's key goes in x-goog-api-key unless the catalog
// says otherwise.
var authDefaults = codec.AuthDefaults{
	Names: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, Scheme: llmv1.AuthScheme_AUTH_SCHEME_HEADER, Header: "x-goog-api-key",
}

func invalid(format string, args ...any) *codec.Error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, Message: "gemini: " + fmt.Sprintf(format, args...)}
}

type wireRequest struct {
	SystemInstruction *wireContent       `json:"systemInstruction,omitempty"`
	Contents          []wireContent      `json:"contents"`
	Tools             []wireTool         `json:"tools,omitempty"`
	ToolConfig        *wireToolConfig    `json:"toolConfig,omitempty"`
	GenerationConfig  *wireGenerationCfg `json:"generationConfig,omitempty"`
}

type wireContent struct {
	Role  string `json:"role,omitempty"`
	Parts []any  `json:"parts"`
}

type wirePart struct {
	Text             *string           `json:"text,omitempty"`
	Thought          bool              `json:"thought,omitempty"`
	InlineData       *wireBlob         `json:"inlineData,omitempty"`
	FileData         *wireFileData     `json:"fileData,omitempty"`
	FunctionCall     *wireFunctionCall `json:"functionCall,omitempty"`
	FunctionResponse *wireFunctionResp `json:"functionResponse,omitempty"`
	ThoughtSignature string            `json:"thoughtSignature,omitempty"`
}

type wireBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type wireFileData struct {
	MimeType string `json:"mimeType,omitempty"`
	FileURI  string `json:"fileUri"`
}

type wireFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type wireFunctionResp struct {
	ID       string            `json:"id,omitempty"`
	Name     string            `json:"name"`
	Response map[string]string `json:"response"`
}

type wireTool struct {
	FunctionDeclarations []wireFunctionDecl `json:"functionDeclarations"`
}

type wireFunctionDecl struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

type wireToolConfig struct {
	FunctionCallingConfig wireFunctionCallingConfig `json:"functionCallingConfig"`
}

type wireFunctionCallingConfig struct {
	Mode                 string   `json:"mode"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

type wireGenerationCfg struct {
	MaxOutputTokens    *int32          `json:"maxOutputTokens,omitempty"`
	Temperature        *float64        `json:"temperature,omitempty"`
	StopSequences      []string        `json:"stopSequences,omitempty"`
	ResponseMimeType   string          `json:"responseMimeType,omitempty"`
	ResponseJSONSchema json.RawMessage `json:"responseJsonSchema,omitempty"`
	ThinkingConfig     *wireThinking   `json:"thinkingConfig,omitempty"`
}

type wireThinking struct {
	IncludeThoughts bool   `json:"includeThoughts,omitempty"`
	ThinkingBudget  *int32 `json:"thinkingBudget,omitempty"`
	ThinkingLevel   string `json:"thinkingLevel,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func buildBody(call *codec.Call) ([]byte, error) {
	r := call.Request
	if r == nil {
		return nil, invalid("no request")
	}
	var w wireRequest
	var system []string
	if r.GetSystem() != "" {
		system = append(system, r.GetSystem())
	}
	// Tool results need the call's name; find it by id when they omit it.
	names := map[string]string{}
	for _, m := range r.GetMessages() {
		for _, p := range m.GetParts() {
			if tc := p.GetToolCall(); tc != nil {
				names[tc.GetId()] = tc.GetName()
			}
		}
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
			role = "model"
		default:
			return nil, invalid("message %d: role %v", i, m.GetRole())
		}
		parts, err := wireParts(m.GetParts(), i, names)
		if err != nil {
			return nil, err
		}
		if len(parts) == 0 {
			continue
		}
		if n := len(w.Contents); n > 0 && w.Contents[n-1].Role == role {
			w.Contents[n-1].Parts = append(w.Contents[n-1].Parts, parts...)
			continue
		}
		w.Contents = append(w.Contents, wireContent{Role: role, Parts: parts})
	}
	if w.Contents == nil {
		w.Contents = []wireContent{}
	}
	if len(system) > 0 {
		w.SystemInstruction = &wireContent{Parts: []any{wirePart{Text: ptr(strings.Join(system, "\n\n"))}}}
	}
	if len(r.GetTools()) > 0 {
		var decls []wireFunctionDecl
		for _, t := range r.GetTools() {
			schema, err := objectSchema(t.GetParameters())
			if err != nil {
				return nil, invalid("tool %q: parameters: %v", t.GetName(), err)
			}
			decls = append(decls, wireFunctionDecl{Name: t.GetName(), Description: t.GetDescription(), ParametersJSONSchema: schema})
		}
		w.Tools = []wireTool{{FunctionDeclarations: decls}}
		switch tc := r.GetToolChoice(); tc.GetMode() {
		case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
			w.ToolConfig = &wireToolConfig{wireFunctionCallingConfig{Mode: "NONE"}}
		case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
			w.ToolConfig = &wireToolConfig{wireFunctionCallingConfig{Mode: "ANY"}}
		case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
			if tc.GetToolName() == "" {
				return nil, invalid("tool_choice TOOL without a tool name")
			}
			w.ToolConfig = &wireToolConfig{wireFunctionCallingConfig{Mode: "ANY", AllowedFunctionNames: []string{tc.GetToolName()}}}
		}
	}
	var g wireGenerationCfg
	set := false
	if r.MaxOutputTokens != nil && r.GetMaxOutputTokens() > 0 {
		g.MaxOutputTokens, set = ptr(r.GetMaxOutputTokens()), true
	}
	if r.Temperature != nil {
		g.Temperature, set = ptr(r.GetTemperature()), true
	}
	if len(r.GetStopSequences()) > 0 {
		g.StopSequences, set = r.GetStopSequences(), true
	}
	if r.GetSpeed() != "" {
		return nil, invalid("speed %q is not supported by the Gemini API", r.GetSpeed())
	}
	switch rf := r.GetResponseFormat(); rf.GetType() {
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT:
		g.ResponseMimeType, set = "application/json", true
	case llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
		schema, err := objectSchema(rf.GetSchema())
		if err != nil {
			return nil, invalid("response_format schema: %v", err)
		}
		g.ResponseMimeType, g.ResponseJSONSchema, set = "application/json", schema, true
	}
	if tc := thinking(r.GetReasoningEffort(), call.Model); tc != nil {
		g.ThinkingConfig, set = tc, true
	}
	if set {
		w.GenerationConfig = &g
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, invalid("encode body: %v", err)
	}
	return b, nil
}

// thinking maps an effort: Gemini 3 takes a thinkingLevel (low or high;
// medium where offered), older models a token budget. The 2.x budgets stay
// within what both 2.5 Flash (24576) and 2.5 Pro (32768) accept.
func thinking(e llmv1.ReasoningEffort, model string) *wireThinking {
	if e == llmv1.ReasoningEffort_REASONING_EFFORT_UNSPECIFIED {
		return nil
	}
	m := strings.TrimPrefix(model, "models/")
	if strings.HasPrefix(m, "gemini-1") || strings.HasPrefix(m, "gemini-2") {
		var b int32
		switch e {
		case llmv1.ReasoningEffort_REASONING_EFFORT_LOW:
			b = 1024
		case llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM:
			b = 8192
		default:
			b = 24576
		}
		return &wireThinking{IncludeThoughts: true, ThinkingBudget: &b}
	}
	level := "HIGH" // enum names, as the SDK sends them
	switch e {
	case llmv1.ReasoningEffort_REASONING_EFFORT_LOW:
		level = "LOW"
	case llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM:
		level = "MEDIUM"
	}
	return &wireThinking{IncludeThoughts: true, ThinkingLevel: level}
}

func objectSchema(s string) (json.RawMessage, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	return json.RawMessage(s), nil
}

func wireParts(parts []*llmv1.ContentPart, msg int, names map[string]string) ([]any, error) {
	var out []any
	for j, p := range parts {
		switch v := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			if v.Text.GetText() == "" && v.Text.GetSignature() == "" {
				continue
			}
			out = append(out, wirePart{Text: ptr(v.Text.GetText()), ThoughtSignature: v.Text.GetSignature()})
		case *llmv1.ContentPart_Image:
			wp, err := image(v.Image)
			if err != nil {
				return nil, invalid("message %d part %d: %v", msg, j, err)
			}
			out = append(out, wp)
		case *llmv1.ContentPart_Reasoning:
			rp := v.Reasoning
			// A signature-only thought (never redacted: Gemini does not
			// redact) is still Gemini's to check: foreign signatures never
			// reach here.
			if rp.GetText() == "" && rp.GetSignature() == "" {
				continue
			}
			out = append(out, wirePart{Text: ptr(rp.GetText()), Thought: true, ThoughtSignature: rp.GetSignature()})
		case *llmv1.ContentPart_ToolCall:
			tc := v.ToolCall
			args := strings.TrimSpace(tc.GetArguments())
			if args == "" {
				args = "{}"
			}
			var probe map[string]json.RawMessage
			if json.Unmarshal([]byte(args), &probe) != nil {
				return nil, invalid("message %d part %d: tool call %q arguments are not a JSON object", msg, j, tc.GetId())
			}
			out = append(out, wirePart{
				FunctionCall:     &wireFunctionCall{ID: sendableID(tc.GetId()), Name: tc.GetName(), Args: json.RawMessage(args)},
				ThoughtSignature: tc.GetSignature(),
			})
		case *llmv1.ContentPart_ToolResult:
			tr := v.ToolResult
			name := tr.GetName()
			if name == "" {
				name = names[tr.GetToolCallId()]
			}
			if name == "" {
				return nil, invalid("message %d part %d: tool result %q has no tool name", msg, j, tr.GetToolCallId())
			}
			var text []string
			var images []any
			for k, c := range tr.GetContent() {
				switch cv := c.GetPart().(type) {
				case *llmv1.ContentPart_Text:
					text = append(text, cv.Text.GetText())
				case *llmv1.ContentPart_Image:
					wp, err := image(cv.Image)
					if err != nil {
						return nil, invalid("message %d part %d content %d: %v", msg, j, k, err)
					}
					images = append(images, wp)
				default:
					return nil, invalid("message %d part %d content %d: tool results hold text and images only", msg, j, k)
				}
			}
			key := "output"
			if tr.GetIsError() {
				key = "error"
			}
			out = append(out, wirePart{FunctionResponse: &wireFunctionResp{
				ID: sendableID(tr.GetToolCallId()), Name: name,
				Response: map[string]string{key: strings.Join(text, "\n")},
			}})
			out = append(out, images...)
		case *llmv1.ContentPart_Opaque:
			if strings.HasPrefix(v.Opaque.GetKind(), opaquePrefix) {
				if !json.Valid([]byte(v.Opaque.GetData())) {
					return nil, invalid("message %d part %d: opaque %s is not JSON", msg, j, v.Opaque.GetKind())
				}
				out = append(out, json.RawMessage(v.Opaque.GetData()))
			}
		default:
			return nil, invalid("message %d part %d: empty part", msg, j)
		}
	}
	return out, nil
}

// sendableID drops ids this codec made up: the API never issued them.
func sendableID(id string) string {
	if strings.HasPrefix(id, SyntheticIDPrefix) {
		return ""
	}
	return id
}

func image(img *llmv1.ImagePart) (wirePart, error) {
	if u := img.GetUrl(); u != "" {
		if strings.HasPrefix(u, "data:") {
			meta, data, found := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
			mt, isB64 := strings.CutSuffix(meta, ";base64")
			if !found || !isB64 || mt == "" {
				return wirePart{}, fmt.Errorf("malformed data URL")
			}
			return wirePart{InlineData: &wireBlob{MimeType: mt, Data: data}}, nil
		}
		return wirePart{FileData: &wireFileData{MimeType: img.GetMediaType(), FileURI: u}}, nil
	}
	if len(img.GetData()) == 0 {
		return wirePart{}, fmt.Errorf("image has neither url nor data")
	}
	if img.GetMediaType() == "" {
		return wirePart{}, fmt.Errorf("image data without media_type")
	}
	return wirePart{InlineData: &wireBlob{MimeType: img.GetMediaType(), Data: base64.StdEncoding.EncodeToString(img.GetData())}}, nil
}

// NewDecoder implements codec.Codec.
func (geminiCodec) NewDecoder(body io.Reader) codec.Decoder { return newStreamDecoder(body) }
