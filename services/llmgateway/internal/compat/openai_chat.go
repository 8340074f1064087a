package compat

import (
	"encoding/json"
	"net/http"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
type openaiError struct {
	Error openaiErrorBody `json:"error"`
}

type openaiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func newOpenAIError(typ, param, code, msg string) openaiError {
	e := openaiError{Error: openaiErrorBody{Message: msg, Type: typ}}
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	return e
}

func writeOpenAIError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	writeJSON(w, status, newOpenAIError(typ, param, code, msg))
}

// openaiBackendError is the OpenAI body of a gateway error.
func openaiBackendError(info errorInfo) openaiError {
	typ, code := "server_error", ""
	switch info.status {
	case http.StatusBadRequest:
		typ = "invalid_request_error"
		if info.kind == llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH {
			code = "context_length_exceeded"
		}
		if info.kind == llmv1.ErrorKind_ERROR_KIND_CONTENT_FILTER {
			code = "content_filter"
		}
	case http.StatusNotFound:
		typ, code = "invalid_request_error", "model_not_found"
	case http.StatusForbidden:
		typ, code = "invalid_request_error", "permission_denied"
	case http.StatusTooManyRequests:
		typ, code = "rate_limit_error", "rate_limit_exceeded"
	case http.StatusServiceUnavailable:
		code = "overloaded"
	case http.StatusGatewayTimeout:
		code = "timeout"
	case http.StatusBadGateway:
		code = "upstream_error"
	}
	return newOpenAIError(typ, "", code, info.message)
}

func (h *Handler) writeOpenAIBackendError(w http.ResponseWriter, r *http.Request, err error) {
	if re, ok := err.(*reqError); ok {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", re.param, re.code, re.msg)
		return
	}
	info := backendError(r.Context(), err)
	setRetryAfter(w, info.retryAfter)
	writeJSON(w, info.status, openaiBackendError(info))
}

// Chat Completions request types (the fields the gateway carries).
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Refusal    *string         `json:"refusal"`
	Audio      json.RawMessage `json:"audio"`
	// reasoning_content is what DeepSeek-style servers return; accepted
	// back as unsigned reasoning.
	ReasoningContent string          `json:"reasoning_content"`
	FunctionCall     json.RawMessage `json:"function_call"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatContentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// chatFields are the request fields the Chat front accepts; each unknown or
// uncarryable one is refused by name.
var chatFields = map[string]bool{
	"model": true, "messages": true, "tools": true, "tool_choice": true, "max_tokens": true,
	"max_completion_tokens": true, "temperature": true, "top_p": true, "stop": true,
	"reasoning_effort": true, "response_format": true, "stream": true, "stream_options": true,
	"n": true, "logprobs": true, "top_logprobs": true, "parallel_tool_calls": true, "user": true,
	"metadata": true, "store": true, "presence_penalty": true, "frequency_penalty": true,
	"modalities": true, "seed": true, "service_tier": true, "safety_identifier": true,
	"prompt_cache_key": true, "logit_bias": true, "audio": true, "prediction": true,
	"web_search_options": true, "functions": true, "function_call": true, "verbosity": true,
	"prompt_cache_retention": true,
}

// chatRequest translates a Chat Completions body; stream and include_usage
// are returned beside it.
func chatRequest(fields map[string]json.RawMessage) (req *llmv1.Request, stream, includeUsage bool, err error) {
	for k := range fields {
		if !chatFields[k] {
			return nil, false, false, unsupported(k, "Unrecognized request argument supplied: %s", k)
		}
	}
	req = &llmv1.Request{}
	if err := decodeField(fields, "model", &req.Model); err != nil {
		return nil, false, false, err
	}
	if req.Model == "" {
		return nil, false, false, badParam("model", "you must provide a model parameter")
	}
	if err := refuseChatFeatures(fields); err != nil {
		return nil, false, false, err
	}
	var msgs []chatMessage
	if err := decodeField(fields, "messages", &msgs); err != nil {
		return nil, false, false, err
	}
	if len(msgs) == 0 {
		return nil, false, false, badParam("messages", "'messages' must contain at least one message")
	}
	names := toolNames{}
	for i, m := range msgs {
		if err := chatMessageInto(req, names, m, i); err != nil {
			return nil, false, false, err
		}
	}
	names.fill(req)

	var tools []chatTool
	if err := decodeField(fields, "tools", &tools); err != nil {
		return nil, false, false, err
	}
	for i, t := range tools {
		if t.Type != "function" {
			return nil, false, false, unsupported("tools", "tools[%d]: tool type %q is not supported; only function tools are", i, t.Type)
		}
		params := string(t.Function.Parameters)
		if params == "null" {
			params = ""
		}
		req.Tools = append(req.Tools, &llmv1.ToolDefinition{Name: t.Function.Name, Description: t.Function.Description, Parameters: params})
	}
	if raw, ok := fields["tool_choice"]; ok && string(raw) != "null" {
		tc, err := openaiToolChoice(raw, "tool_choice", func(m map[string]json.RawMessage) (string, bool) {
			var fn struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(m["function"], &fn) != nil || fn.Name == "" {
				return "", false
			}
			return fn.Name, true
		})
		if err != nil {
			return nil, false, false, err
		}
		req.ToolChoice = tc
	}
	if err := maxTokensInto(req, fields, "max_completion_tokens", "max_tokens"); err != nil {
		return nil, false, false, err
	}
	if err := samplingInto(req, fields); err != nil {
		return nil, false, false, err
	}
	if err := stopInto(req, fields); err != nil {
		return nil, false, false, err
	}
	var effort string
	if err := decodeField(fields, "reasoning_effort", &effort); err != nil {
		return nil, false, false, err
	}
	e, ok := effortFromName(effort)
	if !ok {
		return nil, false, false, badParam("reasoning_effort", "Invalid value for 'reasoning_effort': %q", effort)
	}
	req.ReasoningEffort = e
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := decodeField(fields, "response_format", &rf); err != nil {
		return nil, false, false, err
	}
	switch rf.Type {
	case "", "text":
	case "json_object":
		req.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, false, false, badParam("response_format", "Missing required parameter: 'response_format.json_schema.schema'")
		}
		req.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: rf.JSONSchema.Name, Schema: string(rf.JSONSchema.Schema)}
	default:
		return nil, false, false, badParam("response_format", "Invalid value for 'response_format.type': %q", rf.Type)
	}
	if err := decodeField(fields, "stream", &stream); err != nil {
		return nil, false, false, err
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := decodeField(fields, "stream_options", &so); err != nil {
		return nil, false, false, err
	}
	if err := metadataInto(req, fields); err != nil {
		return nil, false, false, err
	}
	return req, stream, so.IncludeUsage, nil
}

// refuseChatFeatures names the Chat features the gateway cannot carry,
// accepting only their no-op values.
func refuseChatFeatures(fields map[string]json.RawMessage) error {
	is := func(name string, allowed ...string) bool {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return true
		}
		for _, a := range allowed {
			if string(raw) == a {
				return true
			}
		}
		return false
	}
	switch {
	case !is("n", "1"):
		return unsupported("n", "n > 1 is not supported: the gateway returns one choice")
	case !is("logprobs", "false"), !is("top_logprobs", "0"):
		return unsupported("logprobs", "logprobs are not supported by the gateway")
	case !is("audio"), !is("modalities", `["text"]`):
		return unsupported("modalities", "audio output is not supported by the gateway")
	case !is("presence_penalty", "0"), !is("frequency_penalty", "0"):
		return unsupported("presence_penalty", "presence_penalty and frequency_penalty are not supported by the gateway")
	case !is("logit_bias", "{}"):
		return unsupported("logit_bias", "logit_bias is not supported by the gateway")
	case !is("seed"):
		return unsupported("seed", "seed is not supported by the gateway")
	case !is("prediction"):
		return unsupported("prediction", "predicted outputs are not supported by the gateway")
	case !is("web_search_options"):
		return unsupported("web_search_options", "web search is not supported by the gateway")
	case !is("functions"), !is("function_call"):
		return unsupported("functions", "the deprecated functions parameters are not supported: use tools")
	case !is("parallel_tool_calls", "true"):
		return unsupported("parallel_tool_calls", "parallel_tool_calls=false is not supported by the gateway")
	case !is("store", "false"):
		return unsupported("store", "stored completions are not supported by the gateway")
	}
	return nil
}

func chatMessageInto(req *llmv1.Request, names toolNames, m chatMessage, i int) error {
	param := sprintf("messages[%d]", i)
	if len(m.Audio) > 0 && string(m.Audio) != "null" {
		return unsupported(param+".audio", "%s: audio is not supported by the gateway", param)
	}
	if len(m.FunctionCall) > 0 && string(m.FunctionCall) != "null" {
		return unsupported(param+".function_call", "%s: function_call is deprecated and not supported: use tool_calls", param)
	}
	parts, err := chatContent(m.Content, param+".content", m.Role)
	if err != nil {
		return err
	}
	switch m.Role {
	case "system", "developer":
		var texts []string
		for _, p := range parts {
			texts = append(texts, p.GetText().GetText())
		}
		role := llmv1.Role_ROLE_SYSTEM
		if m.Role == "developer" {
			role = llmv1.Role_ROLE_DEVELOPER
		}
		if len(req.Messages) == 0 && req.System == "" && role == llmv1.Role_ROLE_SYSTEM {
			req.System = strings.Join(texts, "\n")
			return nil
		}
		req.Messages = append(req.Messages, &llmv1.Message{Role: role, Parts: parts})
	case "user":
		req.Messages = append(req.Messages, &llmv1.Message{Role: llmv1.Role_ROLE_USER, Parts: parts, Name: m.Name})
	case "assistant":
		msg := &llmv1.Message{Role: llmv1.Role_ROLE_ASSISTANT, Name: m.Name}
		if m.ReasoningContent != "" {
			msg.Parts = append(msg.Parts, &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: m.ReasoningContent}}})
		}
		msg.Parts = append(msg.Parts, parts...)
		if m.Refusal != nil && *m.Refusal != "" {
			msg.Parts = append(msg.Parts, textPart(*m.Refusal))
		}
		for j, tc := range m.ToolCalls {
			if tc.Type != "" && tc.Type != "function" {
				return unsupported(sprintf("%s.tool_calls[%d].type", param, j), "%s.tool_calls[%d]: tool call type %q is not supported", param, j, tc.Type)
			}
			if tc.ID == "" || tc.Function.Name == "" {
				return badParam(sprintf("%s.tool_calls[%d]", param, j), "%s.tool_calls[%d]: id and function.name are required", param, j)
			}
			names[tc.ID] = tc.Function.Name
			msg.Parts = append(msg.Parts, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{
				Id: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
			}}})
		}
		req.Messages = append(req.Messages, msg)
	case "tool":
		if m.ToolCallID == "" {
			return badParam(param+".tool_call_id", "Missing required parameter: '%s.tool_call_id'", param)
		}
		tr := &llmv1.ToolResult{ToolCallId: m.ToolCallID, Content: parts}
		part := &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: tr}}
		// Consecutive tool messages answer one turn's parallel calls.
		if n := len(req.Messages); n > 0 && req.Messages[n-1].GetRole() == llmv1.Role_ROLE_TOOL {
			req.Messages[n-1].Parts = append(req.Messages[n-1].Parts, part)
		} else {
			req.Messages = append(req.Messages, &llmv1.Message{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{part}})
		}
	case "function":
		return unsupported(param+".role", "%s: the deprecated function role is not supported: use tool", param)
	default:
		return badParam(param+".role", "Invalid value for '%s.role': %q", param, m.Role)
	}
	return nil
}

// chatContent reads a message's content: a string or an array of parts.
func chatContent(raw json.RawMessage, param, role string) ([]*llmv1.ContentPart, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []*llmv1.ContentPart{textPart(s)}, nil
	}
	var items []chatContentPart
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badParam(param, "Invalid type for '%s': expected a string or an array of content parts", param)
	}
	var out []*llmv1.ContentPart
	for j, it := range items {
		p := sprintf("%s[%d]", param, j)
		switch it.Type {
		case "text":
			out = append(out, textPart(it.Text))
		case "refusal":
			out = append(out, textPart(it.Refusal))
		case "image_url":
			if role != "user" && role != "tool" {
				return nil, badParam(p, "%s: image content is only allowed in user messages", p)
			}
			if it.ImageURL == nil {
				return nil, badParam(p+".image_url", "Missing required parameter: '%s.image_url'", p)
			}
			img, err := imageFromURL(it.ImageURL.URL, p+".image_url.url")
			if err != nil {
				return nil, err
			}
			out = append(out, &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: img}})
		case "input_audio":
			return nil, unsupported(p, "%s: audio input is not supported by the gateway", p)
		case "file":
			return nil, unsupported(p, "%s: file input is not supported by the gateway", p)
		default:
			return nil, badParam(p+".type", "Invalid value for '%s.type': %q", p, it.Type)
		}
	}
	return out, nil
}

// openaiToolChoice reads "none" | "auto" | "required" | a named-tool object
// (whose name named extracts).
func openaiToolChoice(raw json.RawMessage, param string, named func(map[string]json.RawMessage) (string, bool)) (*llmv1.ToolChoice, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none":
			return &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}, nil
		case "auto":
			return &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}, nil
		case "required":
			return &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED}, nil
		}
		return nil, badParam(param, "Invalid value for '%s': %q", param, s)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badParam(param, "Invalid type for '%s'", param)
	}
	var typ string
	_ = json.Unmarshal(m["type"], &typ)
	if typ != "function" {
		return nil, unsupported(param, "%s of type %q is not supported; use \"function\"", param, typ)
	}
	name, ok := named(m)
	if !ok {
		return nil, badParam(param, "Missing required parameter: the tool name of '%s'", param)
	}
	return &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: name}, nil
}

func maxTokensInto(req *llmv1.Request, fields map[string]json.RawMessage, names ...string) error {
	for _, n := range names {
		var v *int32
		if err := decodeField(fields, n, &v); err != nil {
			return err
		}
		if v != nil {
			if *v < 1 {
				return badParam(n, "Invalid '%s': integer below minimum value 1", n)
			}
			req.MaxOutputTokens = v
			return nil
		}
	}
	return nil
}

func samplingInto(req *llmv1.Request, fields map[string]json.RawMessage) error {
	var t *float64
	if err := decodeField(fields, "temperature", &t); err != nil {
		return err
	}
	if t != nil && (*t < 0 || *t > 2) {
		return badParam("temperature", "Invalid 'temperature': must be between 0 and 2")
	}
	req.Temperature = t
	var topP *float64
	if err := decodeField(fields, "top_p", &topP); err != nil {
		return err
	}
	if topP != nil && *topP != 1 {
		return unsupported("top_p", "top_p is not supported by the gateway (only 1)")
	}
	return nil
}

func stopInto(req *llmv1.Request, fields map[string]json.RawMessage) error {
	raw, ok := fields["stop"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		req.StopSequences = []string{one}
		return nil
	}
	if err := json.Unmarshal(raw, &req.StopSequences); err != nil {
		return badParam("stop", "Invalid type for 'stop': expected a string or an array of strings")
	}
	return nil
}

func metadataInto(req *llmv1.Request, fields map[string]json.RawMessage) error {
	var md map[string]string
	if err := decodeField(fields, "metadata", &md); err != nil {
		return err
	}
	var user string
	if err := decodeField(fields, "user", &user); err != nil {
		return err
	}
	if user != "" {
		if md == nil {
			md = map[string]string{}
		}
		md["user"] = user
	}
	req.Metadata = md
	return nil
}

// Chat Completions response types.
type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             *chatUsage   `json:"usage,omitempty"`
	ServiceTier       *string      `json:"service_tier"`
	SystemFingerprint *string      `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int              `json:"index"`
	Message      *chatOutMessage  `json:"message,omitempty"`
	Delta        *chatOutMessage  `json:"delta,omitempty"`
	Logprobs     *json.RawMessage `json:"logprobs"`
	FinishReason *string          `json:"finish_reason"`
}

type chatOutMessage struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	Refusal          *string        `json:"refusal,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
	Annotations      *[]struct{}    `json:"annotations,omitempty"`
}

type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func openaiUsage(u *llmv1.Usage) *chatUsage {
	in := u.GetInputTokens() + u.GetCacheReadTokens() + u.GetCacheWriteTokens()
	cu := &chatUsage{PromptTokens: in, CompletionTokens: u.GetOutputTokens(), TotalTokens: in + u.GetOutputTokens()}
	cu.PromptTokensDetails.CachedTokens = u.GetCacheReadTokens()
	cu.CompletionTokensDetails.ReasoningTokens = u.GetReasoningTokens()
	return cu
}

func chatFinish(f llmv1.FinishReason) string {
	switch f {
	case llmv1.FinishReason_FINISH_REASON_LENGTH, llmv1.FinishReason_FINISH_REASON_INCOMPLETE:
		return "length"
	case llmv1.FinishReason_FINISH_REASON_TOOL_CALLS:
		return "tool_calls"
	case llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER:
		return "content_filter"
	}
	return "stop"
}

func chatID(id string) string {
	if strings.HasPrefix(id, "chatcmpl-") {
		return id
	}
	return "chatcmpl-" + id
}

func (h *Handler) chatCompletions(w http.ResponseWriter, r *http.Request) {
	fields, err := readJSONObject(w, r)
	if err != nil {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", "", err.Error())
		return
	}
	req, stream, includeUsage, err := chatRequest(fields)
	if err == nil {
		_, err = h.checkCapabilities(r.Context(), req)
	}
	if err != nil {
		h.writeOpenAIBackendError(w, r, err)
		return
	}
	created := h.now().Unix()
	if !stream {
		resp, err := h.backend.Generate(r.Context(), req, nil)
		if err != nil {
			h.writeOpenAIBackendError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, chatCompletionOf(resp, created))
		return
	}
	cs := &chatStream{sse: newSSE(w), created: created, includeUsage: includeUsage}
	if _, err := h.stream(r.Context(), req, cs.handle); err != nil && !cs.sse.started {
		h.writeOpenAIBackendError(w, r, err)
	}
}

func chatCompletionOf(resp *llmv1.Response, created int64) *chatCompletion {
	msg := &chatOutMessage{Role: "assistant", Annotations: &[]struct{}{}}
	var text, reasoning strings.Builder
	for _, p := range resp.GetParts() {
		switch x := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			text.WriteString(x.Text.GetText())
		case *llmv1.ContentPart_Reasoning:
			reasoning.WriteString(x.Reasoning.GetText())
		case *llmv1.ContentPart_ToolCall:
			tc := chatToolCall{ID: x.ToolCall.GetId(), Type: "function"}
			tc.Function.Name, tc.Function.Arguments = x.ToolCall.GetName(), x.ToolCall.GetArguments()
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
	}
	if text.Len() > 0 || len(msg.ToolCalls) == 0 {
		s := text.String()
		msg.Content = &s
	}
	msg.ReasoningContent = reasoning.String()
	fr := chatFinish(resp.GetFinishReason())
	return &chatCompletion{
		ID: chatID(resp.GetId()), Object: "chat.completion", Created: created, Model: resp.GetProviderId() + "/" + resp.GetModelId(),
		Choices: []chatChoice{{Index: 0, Message: msg, FinishReason: &fr}},
		Usage:   openaiUsage(resp.GetUsage()),
	}
}

// chatStream renders gateway events as chat.completion.chunk events.
type chatStream struct {
	sse          *sse
	created      int64
	includeUsage bool
	id, model    string
	chunk        chatCompletion
}

func (c *chatStream) send(delta *chatOutMessage, finish *string) error {
	c.chunk = chatCompletion{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		Choices: []chatChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
	return c.sse.event("", &c.chunk)
}

func (c *chatStream) handle(ev *llmv1.StreamResponse) error {
	empty := ""
	switch x := ev.GetEvent().(type) {
	case *llmv1.StreamResponse_Started:
		c.id, c.model = chatID(x.Started.GetId()), x.Started.GetProviderId()+"/"+x.Started.GetModelId()
		c.sse.hold = true // the role chunk goes out with the first content
		return c.send(&chatOutMessage{Role: "assistant", Content: &empty}, nil)
	case *llmv1.StreamResponse_TextDelta:
		t := x.TextDelta.GetText()
		return c.send(&chatOutMessage{Content: &t}, nil)
	case *llmv1.StreamResponse_ReasoningDelta:
		return c.send(&chatOutMessage{ReasoningContent: x.ReasoningDelta.GetText()}, nil)
	case *llmv1.StreamResponse_ContentBlockStart:
		b := x.ContentBlockStart
		if b.GetKind() != llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL {
			return nil
		}
		idx := int(b.GetToolCallIndex())
		tc := chatToolCall{Index: &idx, ID: b.GetToolCallId(), Type: "function"}
		tc.Function.Name = b.GetToolName()
		return c.send(&chatOutMessage{ToolCalls: []chatToolCall{tc}}, nil)
	case *llmv1.StreamResponse_ToolCallDelta:
		idx := int(x.ToolCallDelta.GetToolCallIndex())
		tc := chatToolCall{Index: &idx}
		tc.Function.Arguments = x.ToolCallDelta.GetArgumentsDelta()
		return c.send(&chatOutMessage{ToolCalls: []chatToolCall{tc}}, nil)
	case *llmv1.StreamResponse_Ended:
		resp := x.Ended.GetResponse()
		if !c.sse.started { // a reply with no visible output has no Started
			if err := c.handle(startedOf(resp)); err != nil {
				return err
			}
		}
		fr := chatFinish(resp.GetFinishReason())
		if err := c.send(&chatOutMessage{}, &fr); err != nil {
			return err
		}
		if c.includeUsage {
			c.chunk = chatCompletion{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
				Choices: []chatChoice{}, Usage: openaiUsage(resp.GetUsage())}
			if err := c.sse.event("", &c.chunk); err != nil {
				return err
			}
		}
		return c.sse.raw("", []byte("[DONE]"))
	case *llmv1.StreamResponse_Error:
		// OpenAI's own mid-stream failure: an error object in a data line,
		// and no [DONE], so clients report it instead of a short answer.
		d := x.Error.GetError()
		info := errorInfo{status: statusForKind(d.GetKind(), 0), kind: d.GetKind(), message: d.GetMessage()}
		return c.sse.event("", openaiBackendError(info))
	}
	return nil
}

// startedOf is the Started event of a response, for a stream whose reply
// had no visible output (the gateway then sends Ended alone).
func startedOf(resp *llmv1.Response) *llmv1.StreamResponse {
	return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Started{Started: &llmv1.Started{
		Id: resp.GetId(), ModelId: resp.GetModelId(), ProviderId: resp.GetProviderId(),
	}}}
}
