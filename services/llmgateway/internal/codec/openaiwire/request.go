package openaiwire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
)

// NewHTTPRequest posts body to the provider's base URL + path with the
// provider's auth and extra headers.
func NewHTTPRequest(ctx context.Context, call *codec.Call, path string, body []byte) (*http.Request, error) {
	p := call.Provider
	if p == nil || p.GetBaseUrl() == "" {
		return nil, Invalid("provider has no base URL")
	}
	url := strings.TrimRight(p.GetBaseUrl(), "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, Invalid(fmt.Sprintf("build request: %v", err))
	}
	req.Header.Set("Content-Type", "application/json")
	if call.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	// OpenAI-style hosts have no default: the catalog names scheme and
	// credentials for each.
	codec.ApplyAuth(req.Header, p, codec.ResolveCredential(call, codec.AuthDefaults{}))
	return req, nil
}

// Invalid is an INVALID_REQUEST error for a request the protocol cannot
// express.
func Invalid(msg string) *codec.Error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, Message: msg}
}

// JSONObject checks that text is a JSON object (a tool schema, a response
// schema) and returns it as raw JSON, so its bytes are sent unchanged.
func JSONObject(what, text string) (json.RawMessage, error) {
	raw := json.RawMessage(text)
	var s jsonscan.Scanner
	s.Reset(raw)
	if s.Peek() != '{' {
		return nil, Invalid(what + ": not a JSON object")
	}
	s.Skip()
	if err := s.End(); err != nil {
		return nil, Invalid(fmt.Sprintf("%s: %v", what, err))
	}
	return raw, nil
}

// Effort is the OpenAI reasoning_effort value.
func Effort(e llmv1.ReasoningEffort) string {
	switch e {
	case llmv1.ReasoningEffort_REASONING_EFFORT_LOW:
		return "low"
	case llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM:
		return "medium"
	case llmv1.ReasoningEffort_REASONING_EFFORT_HIGH:
		return "high"
	case llmv1.ReasoningEffort_REASONING_EFFORT_XHIGH:
		return "xhigh"
	case llmv1.ReasoningEffort_REASONING_EFFORT_MAX:
		return "max"
	}
	return ""
}

// DataURL renders an image part as the URL OpenAI takes: its URL, or its
// bytes as a base64 data: URL.
func DataURL(img *llmv1.ImagePart) (string, error) {
	if u := img.GetUrl(); u != "" {
		return u, nil
	}
	if len(img.GetData()) == 0 {
		return "", Invalid("image part has neither url nor data")
	}
	if img.GetMediaType() == "" {
		return "", Invalid("image part with data needs media_type")
	}
	return "data:" + img.GetMediaType() + ";base64," + base64Std(img.GetData()), nil
}

// ToolParameters checks that each tool's parameters are a JSON object and
// returns them in the tools' order.
func ToolParameters(tools []*llmv1.ToolDefinition) ([]json.RawMessage, error) {
	params := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		p, err := JSONObject(fmt.Sprintf("tools[%d] %q parameters", i, t.GetName()), t.GetParameters())
		if err != nil {
			return nil, err
		}
		params[i] = p
	}
	return params, nil
}

// ToolChoice checks a tool choice against the tools. It returns the
// tool_choice string ("none", "required"; "" for auto, and for none with
// no tools: send nothing), or named true and the tool's name for a named
// choice, which each API spells its own way.
func ToolChoice(tc *llmv1.ToolChoice, tools []*llmv1.ToolDefinition) (choice string, named bool, err error) {
	switch tc.GetMode() {
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
		if len(tools) > 0 {
			return "none", false, nil
		}
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
		if len(tools) == 0 {
			return "", false, Invalid("tool_choice required with no tools")
		}
		return "required", false, nil
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
		for _, t := range tools {
			if t.GetName() == tc.GetToolName() {
				return tc.GetToolName(), true, nil
			}
		}
		return "", false, Invalid(fmt.Sprintf("tool_choice names %q, which is not among the tools", tc.GetToolName()))
	}
	return "", false, nil
}

// ResponseSchema checks a json_schema response format's schema and returns
// its name ("response" when unset) and the schema.
func ResponseSchema(rf *llmv1.ResponseFormat) (name string, schema json.RawMessage, err error) {
	schema, err = JSONObject("response_format schema", rf.GetSchema())
	if err != nil {
		return "", nil, err
	}
	name = rf.GetName()
	if name == "" {
		name = "response"
	}
	return name, schema, nil
}
