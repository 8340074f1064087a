package compat

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// Anthropic's error body: {"type":"error","error":{"type","message"}}.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func newAnthropicError(typ, msg string) anthropicError {
	e := anthropicError{Type: "error"}
	e.Error.Type, e.Error.Message = typ, msg
	return e
}

func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, newAnthropicError(typ, msg))
}

// anthropicErrorType is the error type Anthropic uses for an HTTP status;
// overload is its own 529.
func anthropicErrorType(status int, kind llmv1.ErrorKind) (int, string) {
	switch {
	case kind == llmv1.ErrorKind_ERROR_KIND_OVERLOADED:
		return 529, "overloaded_error"
	case status == http.StatusBadRequest:
		return status, "invalid_request_error"
	case status == http.StatusUnauthorized:
		return status, "authentication_error"
	case status == http.StatusForbidden:
		return status, "permission_error"
	case status == http.StatusNotFound:
		return status, "not_found_error"
	case status == http.StatusTooManyRequests:
		return status, "rate_limit_error"
	case status == http.StatusGatewayTimeout:
		return status, "timeout_error"
	case status == http.StatusServiceUnavailable:
		return 529, "overloaded_error"
	}
	return status, "api_error"
}

func (h *Handler) writeAnthropicBackendError(w http.ResponseWriter, r *http.Request, err error) {
	if re, ok := err.(*reqError); ok {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", re.msg)
		return
	}
	info := backendError(r.Context(), err)
	setRetryAfter(w, info.retryAfter)
	status, typ := anthropicErrorType(info.status, info.kind)
	writeAnthropicError(w, status, typ, info.message)
}

var messagesFields = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "system": true, "tools": true,
	"tool_choice": true, "stop_sequences": true, "temperature": true, "top_p": true, "top_k": true,
	"thinking": true, "output_config": true, "output_format": true, "metadata": true, "stream": true,
	"service_tier": true, "container": true, "mcp_servers": true, "context_management": true,
	"inference_geo": true, "speed": true, "cache_control": true, "diagnostics": true,
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Source    *anthropicSrc   `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Data      string          `json:"data"`
}

type anthropicSrc struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// messagesRequest translates a Messages request; the envelopes it carries
// are collected in rs, to be opened once the model is resolved.
func messagesRequest(fields map[string]json.RawMessage, rs *replays) (req *llmv1.Request, stream bool, err error) {
	for k := range fields {
		if !messagesFields[k] {
			return nil, false, badParam(k, "%s: Extra inputs are not permitted", k)
		}
	}
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
	case !is("container"):
		return nil, false, unsupported("container", "container: code execution containers are not supported by the gateway")
	case !is("mcp_servers", "[]"):
		return nil, false, unsupported("mcp_servers", "mcp_servers: the MCP connector is not supported by the gateway")
	case !is("context_management"):
		return nil, false, unsupported("context_management", "context_management is not supported by the gateway")
	case !is("top_k"):
		return nil, false, unsupported("top_k", "top_k is not supported by the gateway")
	}
	req = &llmv1.Request{}
	if err := decodeField(fields, "model", &req.Model); err != nil {
		return nil, false, err
	}
	if req.Model == "" {
		return nil, false, badParam("model", "model: Field required")
	}
	var maxTokens *int32
	if err := decodeField(fields, "max_tokens", &maxTokens); err != nil {
		return nil, false, err
	}
	if maxTokens == nil {
		return nil, false, badParam("max_tokens", "max_tokens: Field required")
	}
	if *maxTokens < 1 {
		return nil, false, badParam("max_tokens", "max_tokens: must be greater than or equal to 1")
	}
	req.MaxOutputTokens = maxTokens

	if raw := fields["system"]; len(raw) > 0 && string(raw) != "null" {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			req.System = s
		} else {
			var blocks []anthropicBlock
			if err := json.Unmarshal(raw, &blocks); err != nil {
				return nil, false, badParam("system", "system: Input should be a valid string or a list of text blocks")
			}
			var texts []string
			for i, b := range blocks {
				if b.Type != "text" {
					return nil, false, badParam("system", "system.%d: only text blocks are allowed", i)
				}
				texts = append(texts, b.Text)
			}
			req.System = strings.Join(texts, "\n")
		}
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := decodeField(fields, "messages", &msgs); err != nil {
		return nil, false, err
	}
	if len(msgs) == 0 {
		return nil, false, badParam("messages", "messages: at least one message is required")
	}
	names := toolNames{}
	for i, m := range msgs {
		param := sprintf("messages.%d", i)
		var role llmv1.Role
		switch m.Role {
		case "user":
			role = llmv1.Role_ROLE_USER
		case "assistant":
			role = llmv1.Role_ROLE_ASSISTANT
		default:
			return nil, false, badParam(param+".role", "%s.role: Input should be 'user' or 'assistant'", param)
		}
		blocks, err := anthropicContent(m.Content, param+".content")
		if err != nil {
			return nil, false, err
		}
		if err := anthropicMessageInto(req, names, role, blocks, param+".content", rs); err != nil {
			return nil, false, err
		}
	}
	names.fill(req)

	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := decodeField(fields, "tools", &tools); err != nil {
		return nil, false, err
	}
	for i, t := range tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, false, unsupported("tools", "tools.%d: server tool %q is not supported by the gateway; only custom tools are", i, t.Type)
		}
		req.Tools = append(req.Tools, &llmv1.ToolDefinition{Name: t.Name, Description: t.Description, Parameters: string(t.InputSchema)})
	}
	var tc *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if err := decodeField(fields, "tool_choice", &tc); err != nil {
		return nil, false, err
	}
	if tc != nil {
		if tc.DisableParallelToolUse {
			return nil, false, unsupported("tool_choice", "tool_choice.disable_parallel_tool_use is not supported by the gateway")
		}
		switch tc.Type {
		case "auto":
			req.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
		case "any":
			req.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED}
		case "none":
			req.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}
		case "tool":
			req.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: tc.Name}
		default:
			return nil, false, badParam("tool_choice", "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
		}
	}
	if err := decodeField(fields, "stop_sequences", &req.StopSequences); err != nil {
		return nil, false, err
	}
	var t *float64
	if err := decodeField(fields, "temperature", &t); err != nil {
		return nil, false, err
	}
	if t != nil && (*t < 0 || *t > 1) {
		return nil, false, badParam("temperature", "temperature: Input should be less than or equal to 1")
	}
	req.Temperature = t
	var topP *float64
	if err := decodeField(fields, "top_p", &topP); err != nil {
		return nil, false, err
	}
	if topP != nil && *topP != 1 {
		return nil, false, unsupported("top_p", "top_p is not supported by the gateway")
	}
	var thinking struct {
		Type         string `json:"type"`
		BudgetTokens int64  `json:"budget_tokens"`
	}
	if err := decodeField(fields, "thinking", &thinking); err != nil {
		return nil, false, err
	}
	switch thinking.Type {
	case "", "disabled":
	case "enabled":
		// The gateway carries an effort, which each codec turns back into
		// a budget; the budget's order of magnitude picks the effort.
		switch {
		case thinking.BudgetTokens < 1024:
			return nil, false, badParam("thinking.budget_tokens", "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		case thinking.BudgetTokens <= 4096:
			req.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_LOW
		case thinking.BudgetTokens <= 16384:
			req.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM
		default:
			req.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_HIGH
		}
	case "adaptive":
		req.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM
	default:
		return nil, false, badParam("thinking.type", "thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
	}
	var oc struct {
		Effort string `json:"effort"`
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	}
	if err := decodeField(fields, "output_config", &oc); err != nil {
		return nil, false, err
	}
	if oc.Format == nil { // the structured-outputs beta's spelling
		if err := decodeField(fields, "output_format", &oc.Format); err != nil {
			return nil, false, err
		}
	}
	if oc.Effort != "" {
		e, ok := effortFromName(oc.Effort)
		if !ok {
			return nil, false, badParam("output_config.effort", "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'")
		}
		req.ReasoningEffort = e
	}
	if f := oc.Format; f != nil {
		if f.Type != "json_schema" || len(f.Schema) == 0 {
			return nil, false, badParam("output_config.format", "output_config.format: type must be 'json_schema' with a schema")
		}
		req.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "output", Schema: string(f.Schema)}
	}
	var md struct {
		UserID string `json:"user_id"`
	}
	if err := decodeField(fields, "metadata", &md); err != nil {
		return nil, false, err
	}
	if md.UserID != "" {
		req.Metadata = map[string]string{"user": md.UserID}
	}
	if err := decodeField(fields, "stream", &stream); err != nil {
		return nil, false, err
	}
	return req, stream, nil
}

func anthropicContent(raw json.RawMessage, param string) ([]anthropicBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badParam(param, "%s: Input should be a valid string or a list of content blocks", param)
	}
	return blocks, nil
}

func anthropicImage(b anthropicBlock, param string) (*llmv1.ContentPart, error) {
	if b.Source == nil {
		return nil, badParam(param+".source", "%s.source: Field required", param)
	}
	switch b.Source.Type {
	case "base64":
		data, err := base64.StdEncoding.DecodeString(b.Source.Data)
		if err != nil {
			return nil, badParam(param+".source.data", "%s.source.data: invalid base64 data", param)
		}
		return &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: data}, MediaType: b.Source.MediaType}}}, nil
	case "url":
		img, err := imageFromURL(b.Source.URL, param+".source.url")
		if err != nil {
			return nil, err
		}
		return &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: img}}, nil
	}
	return nil, unsupported(param+".source.type", "%s.source: image source %q is not supported by the gateway", param, b.Source.Type)
}

func anthropicMessageInto(req *llmv1.Request, names toolNames, role llmv1.Role, blocks []anthropicBlock, param string, rs *replays) error {
	var parts, results []*llmv1.ContentPart
	for j, b := range blocks {
		p := sprintf("%s.%d", param, j)
		switch b.Type {
		case "text":
			parts = append(parts, textPart(b.Text))
		case "image":
			ip, err := anthropicImage(b, p)
			if err != nil {
				return err
			}
			parts = append(parts, ip)
		case "tool_use":
			if role != llmv1.Role_ROLE_ASSISTANT {
				return badParam(p, "%s: tool_use blocks are only allowed in assistant messages", p)
			}
			names[b.ID] = b.Name
			args := string(b.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			parts = append(parts, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: b.ID, Name: b.Name, Arguments: args}}})
		case "tool_result":
			if role != llmv1.Role_ROLE_USER {
				return badParam(p, "%s: tool_result blocks are only allowed in user messages", p)
			}
			tr := &llmv1.ToolResult{ToolCallId: b.ToolUseID, IsError: b.IsError}
			if len(b.Content) > 0 && string(b.Content) != "null" {
				inner, err := anthropicContent(b.Content, p+".content")
				if err != nil {
					return err
				}
				for k, ib := range inner {
					switch ib.Type {
					case "text":
						tr.Content = append(tr.Content, textPart(ib.Text))
					case "image":
						ip, err := anthropicImage(ib, sprintf("%s.content.%d", p, k))
						if err != nil {
							return err
						}
						tr.Content = append(tr.Content, ip)
					default:
						return unsupported(p, "%s.content.%d: %s blocks in tool results are not supported by the gateway", p, k, ib.Type)
					}
				}
			}
			results = append(results, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: tr}})
		case "thinking":
			if b.Signature == "" { // unsigned reasoning: the model's notes, no provider state
				parts = append(parts, &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: b.Thinking}}})
				continue
			}
			parts = append(parts, rs.add(p+".signature", b.Signature, b.Thinking, false))
		case "redacted_thinking":
			parts = append(parts, rs.add(p+".data", b.Data, "", true))
		case "document":
			return unsupported(p, "%s: document blocks are not supported by the gateway", p)
		default:
			return unsupported(p, "%s: content block type %q is not supported by the gateway", p, b.Type)
		}
	}
	// Tool results go first as a tool turn, the rest of the user's content
	// after them, as Anthropic requires results to lead the message.
	if len(results) > 0 {
		req.Messages = append(req.Messages, &llmv1.Message{Role: llmv1.Role_ROLE_TOOL, Parts: results})
	}
	if len(parts) > 0 {
		req.Messages = append(req.Messages, &llmv1.Message{Role: role, Parts: parts})
	}
	return nil
}

// Messages response types.
type anthropicMessage struct {
	ID           string            `json:"id"`
	Type         string            `json:"type"`
	Role         string            `json:"role"`
	Model        string            `json:"model"`
	Content      []json.RawMessage `json:"content"`
	StopReason   *string           `json:"stop_reason"`
	StopSequence *string           `json:"stop_sequence"`
	Usage        anthropicUsage    `json:"usage"`
}

type anthropicUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

func anthUsage(u *llmv1.Usage) anthropicUsage {
	return anthropicUsage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(),
		CacheCreationInputTokens: u.GetCacheWriteTokens(), CacheReadInputTokens: u.GetCacheReadTokens()}
}

func stopReason(resp *llmv1.Response) string {
	switch resp.GetFinishReason() {
	case llmv1.FinishReason_FINISH_REASON_LENGTH, llmv1.FinishReason_FINISH_REASON_INCOMPLETE:
		return "max_tokens"
	case llmv1.FinishReason_FINISH_REASON_TOOL_CALLS:
		return "tool_use"
	case llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER:
		return "refusal"
	}
	if r := resp.GetRawFinishReason(); r == "stop_sequence" || r == "STOP_SEQUENCE" {
		return "stop_sequence"
	}
	return "end_turn"
}

func msgID(id string) string {
	if strings.HasPrefix(id, "msg_") {
		return id
	}
	return "msg_" + id
}

// contentBlock renders one part; ok is false for parts with no Anthropic
// form (which are then carried as redacted_thinking, see roundTripState).
func (h *Handler) contentBlock(p *llmv1.ContentPart, route string) json.RawMessage {
	switch x := p.GetPart().(type) {
	case *llmv1.ContentPart_Text:
		return mustJSON(map[string]any{"type": "text", "text": x.Text.GetText()})
	case *llmv1.ContentPart_ToolCall:
		input := json.RawMessage(x.ToolCall.GetArguments())
		if !json.Valid(input) {
			input = json.RawMessage(`{}`)
		}
		return mustJSON(map[string]any{"type": "tool_use", "id": x.ToolCall.GetId(), "name": x.ToolCall.GetName(), "input": input})
	case *llmv1.ContentPart_Reasoning:
		r := x.Reasoning
		if r.GetRedacted() {
			return mustJSON(map[string]any{"type": "redacted_thinking", "data": h.roundTripState(p, route)})
		}
		return mustJSON(map[string]any{"type": "thinking", "thinking": r.GetText(), "signature": h.roundTripState(p, route)})
	case *llmv1.ContentPart_Opaque:
		return mustJSON(map[string]any{"type": "redacted_thinking", "data": h.roundTripState(p, route)})
	}
	return nil
}

func (h *Handler) messages(w http.ResponseWriter, r *http.Request) {
	// Required by the API on every Messages call (the SDKs always send it).
	if r.Header.Get("anthropic-version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	fields, err := readJSONObject(w, r)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var rs replays
	req, stream, err := messagesRequest(fields, &rs)
	if err == nil {
		err = h.resolveRequest(r.Context(), req, rs)
	}
	if err != nil {
		h.writeAnthropicBackendError(w, r, err)
		return
	}
	if !stream {
		resp, err := h.backend.Generate(r.Context(), req, nil)
		if err != nil {
			h.writeAnthropicBackendError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, h.anthropicMessageOf(resp))
		return
	}
	ms := &messagesStream{h: h, sse: newSSE(w)}
	if _, err := h.stream(r.Context(), req, ms.handle); err != nil && !ms.sse.started {
		h.writeAnthropicBackendError(w, r, err)
	}
}

func (h *Handler) anthropicMessageOf(resp *llmv1.Response) *anthropicMessage {
	m := &anthropicMessage{ID: msgID(resp.GetId()), Type: "message", Role: "assistant", Model: resp.GetProviderId() + "/" + resp.GetModelId(),
		Content: []json.RawMessage{}, Usage: anthUsage(resp.GetUsage())}
	for _, p := range resp.GetParts() {
		if b := h.contentBlock(p, resp.GetProviderId()+"/"+resp.GetModelId()); b != nil {
			m.Content = append(m.Content, b)
		}
	}
	sr := stopReason(resp)
	m.StopReason = &sr
	return m
}

// messagesStream renders gateway events as Messages streaming events.
type messagesStream struct {
	h     *Handler
	sse   *sse
	id    string
	model string
	usage *llmv1.Usage
	index map[int32]int // gateway block index -> Anthropic index
	kinds map[int32]llmv1.ContentBlockKind
	next  int
}

func (s *messagesStream) handle(ev *llmv1.StreamResponse) error {
	switch x := ev.GetEvent().(type) {
	case *llmv1.StreamResponse_Started:
		s.id = msgID(x.Started.GetId())
		s.model = x.Started.GetProviderId() + "/" + x.Started.GetModelId()
		s.index, s.kinds = map[int32]int{}, map[int32]llmv1.ContentBlockKind{}
		return nil // message_start waits for the usage known so far
	case *llmv1.StreamResponse_Usage:
		s.usage = x.Usage
		return nil
	case *llmv1.StreamResponse_RateLimits, *llmv1.StreamResponse_Retrying:
		return nil
	case *llmv1.StreamResponse_Ended:
		if s.index == nil { // a reply with no visible output has no Started
			resp := x.Ended.GetResponse()
			s.id, s.model = msgID(resp.GetId()), resp.GetProviderId()+"/"+resp.GetModelId()
			s.index, s.kinds = map[int32]int{}, map[int32]llmv1.ContentBlockKind{}
			s.usage = resp.GetUsage()
		}
	}
	if err := s.ensureStarted(); err != nil {
		return err
	}
	switch x := ev.GetEvent().(type) {
	case *llmv1.StreamResponse_ContentBlockStart:
		b := x.ContentBlockStart
		s.kinds[b.GetIndex()] = b.GetKind()
		var block map[string]any
		switch b.GetKind() {
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT:
			block = map[string]any{"type": "text", "text": ""}
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL:
			block = map[string]any{"type": "tool_use", "id": b.GetToolCallId(), "name": b.GetToolName(), "input": struct{}{}}
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING:
			block = map[string]any{"type": "thinking", "thinking": "", "signature": ""}
		default:
			return nil // opaque: sent whole at its end
		}
		s.index[b.GetIndex()] = s.next
		s.next++
		return s.sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": s.index[b.GetIndex()], "content_block": block})
	case *llmv1.StreamResponse_TextDelta:
		return s.delta(x.TextDelta.GetIndex(), map[string]any{"type": "text_delta", "text": x.TextDelta.GetText()})
	case *llmv1.StreamResponse_ReasoningDelta:
		return s.delta(x.ReasoningDelta.GetIndex(), map[string]any{"type": "thinking_delta", "thinking": x.ReasoningDelta.GetText()})
	case *llmv1.StreamResponse_ToolCallDelta:
		return s.delta(x.ToolCallDelta.GetIndex(), map[string]any{"type": "input_json_delta", "partial_json": x.ToolCallDelta.GetArgumentsDelta()})
	case *llmv1.StreamResponse_ContentBlockEnd:
		e := x.ContentBlockEnd
		idx, ok := s.index[e.GetIndex()]
		switch kind := s.kinds[e.GetIndex()]; {
		case !ok:
			// An opaque block: one redacted_thinking block carrying it.
			idx = s.next
			s.next++
			if err := s.sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx,
				"content_block": map[string]any{"type": "redacted_thinking", "data": s.h.roundTripState(e.GetPart(), s.model)}}); err != nil {
				return err
			}
		case kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING:
			if sig := s.h.roundTripState(e.GetPart(), s.model); sig != "" {
				if err := s.delta(e.GetIndex(), map[string]any{"type": "signature_delta", "signature": sig}); err != nil {
					return err
				}
			}
		}
		return s.sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
	case *llmv1.StreamResponse_Ended:
		resp := x.Ended.GetResponse()
		u := anthUsage(resp.GetUsage())
		if err := s.sse.event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stopReason(resp), "stop_sequence": nil}, "usage": u}); err != nil {
			return err
		}
		return s.sse.event("message_stop", map[string]any{"type": "message_stop"})
	case *llmv1.StreamResponse_Error:
		d := x.Error.GetError()
		_, typ := anthropicErrorType(statusForKind(d.GetKind(), 0), d.GetKind())
		return s.sse.event("error", newAnthropicError(typ, d.GetMessage()))
	}
	return nil
}

func (s *messagesStream) ensureStarted() error {
	if s.sse.started {
		return nil
	}
	u := anthUsage(s.usage)
	msg := anthropicMessage{ID: s.id, Type: "message", Role: "assistant", Model: s.model, Content: []json.RawMessage{}, Usage: u}
	if err := s.sse.event("message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
		return err
	}
	return s.sse.event("ping", map[string]any{"type": "ping"})
}

func (s *messagesStream) delta(gwIndex int32, delta map[string]any) error {
	idx, ok := s.index[gwIndex]
	if !ok {
		return nil
	}
	return s.sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": delta})
}
