package compat

import (
	"encoding/json"
	"net/http"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// responsesFields are the Responses request fields the front accepts.
var responsesFields = map[string]bool{
	"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true,
	"max_output_tokens": true, "temperature": true, "top_p": true, "reasoning": true, "text": true,
	"stream": true, "store": true, "include": true, "parallel_tool_calls": true, "metadata": true,
	"user": true, "previous_response_id": true, "background": true, "conversation": true,
	"prompt": true, "truncation": true, "service_tier": true, "safety_identifier": true,
	"prompt_cache_key": true, "max_tool_calls": true, "top_logprobs": true, "stream_options": true,
	"prompt_cache_retention": true,
}

type responsesItem struct {
	Type             string          `json:"type"`
	ID               string          `json:"id"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        string          `json:"arguments"`
	Output           json.RawMessage `json:"output"`
	Summary          []responsesText `json:"summary"`
	EncryptedContent string          `json:"encrypted_content"`
}

type responsesText struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
	Refusal  string `json:"refusal"`
}

// responsesRequest translates a Responses request; the envelopes it
// carries are collected in rs, to be opened once the model is resolved.
func responsesRequest(fields map[string]json.RawMessage, rs *replays) (req *llmv1.Request, stream bool, err error) {
	for k := range fields {
		if !responsesFields[k] {
			return nil, false, unsupported(k, "Unknown parameter: '%s'.", k)
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
	case !is("previous_response_id"), !is("conversation"):
		return nil, false, unsupported("previous_response_id", "stored conversations (previous_response_id, conversation) are not supported by the gateway: send the whole input")
	case !is("background", "false"):
		return nil, false, unsupported("background", "background responses are not supported by the gateway")
	case !is("prompt"):
		return nil, false, unsupported("prompt", "prompt templates are not supported by the gateway")
	case !is("top_logprobs", "0"):
		return nil, false, unsupported("top_logprobs", "logprobs are not supported by the gateway")
	case !is("parallel_tool_calls", "true"):
		return nil, false, unsupported("parallel_tool_calls", "parallel_tool_calls=false is not supported by the gateway")
	case !is("max_tool_calls"):
		return nil, false, unsupported("max_tool_calls", "max_tool_calls is not supported by the gateway")
	case !is("truncation", `"disabled"`):
		return nil, false, unsupported("truncation", "truncation is not supported by the gateway")
	}
	var include []string
	if err := decodeField(fields, "include", &include); err != nil {
		return nil, false, err
	}
	for _, inc := range include {
		if inc != "reasoning.encrypted_content" {
			return nil, false, unsupported("include", "include %q is not supported by the gateway", inc)
		}
	}
	req = &llmv1.Request{}
	if err := decodeField(fields, "model", &req.Model); err != nil {
		return nil, false, err
	}
	if req.Model == "" {
		return nil, false, badParam("model", "Missing required parameter: 'model'.")
	}
	if err := decodeField(fields, "instructions", &req.System); err != nil {
		return nil, false, err
	}
	raw := fields["input"]
	var s string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, false, badParam("input", "Missing required parameter: 'input'.")
	case json.Unmarshal(raw, &s) == nil:
		req.Messages = []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{textPart(s)}}}
	default:
		var items []responsesItem
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, false, badParam("input", "Invalid type for 'input': expected a string or an array of input items")
		}
		names := toolNames{}
		for i, it := range items {
			if err := responsesItemInto(req, names, it, i, rs); err != nil {
				return nil, false, err
			}
		}
		names.fill(req)
	}

	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if err := decodeField(fields, "tools", &tools); err != nil {
		return nil, false, err
	}
	for i, t := range tools {
		if t.Type != "function" {
			return nil, false, unsupported("tools", "tools[%d]: tool type %q is not supported; only function tools are", i, t.Type)
		}
		params := string(t.Parameters)
		if params == "null" {
			params = ""
		}
		req.Tools = append(req.Tools, &llmv1.ToolDefinition{Name: t.Name, Description: t.Description, Parameters: params})
	}
	if raw, ok := fields["tool_choice"]; ok && string(raw) != "null" {
		tc, err := openaiToolChoice(raw, "tool_choice", func(m map[string]json.RawMessage) (string, bool) {
			var name string
			if json.Unmarshal(m["name"], &name) != nil || name == "" {
				return "", false
			}
			return name, true
		})
		if err != nil {
			return nil, false, err
		}
		req.ToolChoice = tc
	}
	if err := maxTokensInto(req, fields, "max_output_tokens"); err != nil {
		return nil, false, err
	}
	if err := samplingInto(req, fields); err != nil {
		return nil, false, err
	}
	var reasoning struct {
		Effort  string `json:"effort"`
		Summary string `json:"summary"`
	}
	if err := decodeField(fields, "reasoning", &reasoning); err != nil {
		return nil, false, err
	}
	e, ok := effortFromName(reasoning.Effort)
	if !ok {
		return nil, false, badParam("reasoning.effort", "Invalid value for 'reasoning.effort': %q", reasoning.Effort)
	}
	req.ReasoningEffort = e
	var text struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"format"`
		Verbosity string `json:"verbosity"`
	}
	if err := decodeField(fields, "text", &text); err != nil {
		return nil, false, err
	}
	if f := text.Format; f != nil {
		switch f.Type {
		case "", "text":
		case "json_object":
			req.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}
		case "json_schema":
			if len(f.Schema) == 0 {
				return nil, false, badParam("text.format.schema", "Missing required parameter: 'text.format.schema'.")
			}
			req.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: f.Name, Schema: string(f.Schema)}
		default:
			return nil, false, badParam("text.format.type", "Invalid value for 'text.format.type': %q", f.Type)
		}
	}
	if err := decodeField(fields, "stream", &stream); err != nil {
		return nil, false, err
	}
	if err := metadataInto(req, fields); err != nil {
		return nil, false, err
	}
	return req, stream, nil
}

func responsesItemInto(req *llmv1.Request, names toolNames, it responsesItem, i int, rs *replays) error {
	param := sprintf("input[%d]", i)
	typ := it.Type
	if typ == "" && it.Role != "" {
		typ = "message"
	}
	switch typ {
	case "message":
		parts, err := responsesContent(it.Content, param+".content")
		if err != nil {
			return err
		}
		var role llmv1.Role
		switch it.Role {
		case "user":
			role = llmv1.Role_ROLE_USER
		case "assistant":
			role = llmv1.Role_ROLE_ASSISTANT
		case "system":
			role = llmv1.Role_ROLE_SYSTEM
		case "developer":
			role = llmv1.Role_ROLE_DEVELOPER
		default:
			return badParam(param+".role", "Invalid value for '%s.role': %q", param, it.Role)
		}
		appendTo(req, role, parts...)
	case "function_call":
		if it.CallID == "" || it.Name == "" {
			return badParam(param, "%s: call_id and name are required", param)
		}
		names[it.CallID] = it.Name
		appendTo(req, llmv1.Role_ROLE_ASSISTANT, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{
			Id: it.CallID, Name: it.Name, Arguments: it.Arguments,
		}}})
	case "function_call_output":
		if it.CallID == "" {
			return badParam(param+".call_id", "Missing required parameter: '%s.call_id'.", param)
		}
		var content []*llmv1.ContentPart
		var s string
		if json.Unmarshal(it.Output, &s) == nil {
			content = []*llmv1.ContentPart{textPart(s)}
		} else {
			parts, err := responsesContent(it.Output, param+".output")
			if err != nil {
				return err
			}
			content = parts
		}
		appendTo(req, llmv1.Role_ROLE_TOOL, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{
			ToolCallId: it.CallID, Content: content,
		}}})
	case "reasoning":
		var text strings.Builder
		for _, s := range it.Summary {
			text.WriteString(s.Text)
		}
		if it.EncryptedContent == "" {
			// Unsigned reasoning summaries are the model's notes, not input.
			return nil
		}
		appendTo(req, llmv1.Role_ROLE_ASSISTANT, rs.add(param+".encrypted_content", it.EncryptedContent, text.String(), false))
	default:
		return unsupported(param+".type", "%s: input item type %q is not supported by the gateway", param, typ)
	}
	return nil
}

// appendTo adds parts to the last message when it has the role, else to a
// new message: Responses input is a flat list of items.
func appendTo(req *llmv1.Request, role llmv1.Role, parts ...*llmv1.ContentPart) {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].GetRole() == role && role != llmv1.Role_ROLE_USER {
		req.Messages[n-1].Parts = append(req.Messages[n-1].Parts, parts...)
		return
	}
	req.Messages = append(req.Messages, &llmv1.Message{Role: role, Parts: parts})
}

func responsesContent(raw json.RawMessage, param string) ([]*llmv1.ContentPart, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []*llmv1.ContentPart{textPart(s)}, nil
	}
	var items []responsesText
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badParam(param, "Invalid type for '%s': expected a string or an array of content parts", param)
	}
	var out []*llmv1.ContentPart
	for j, it := range items {
		p := sprintf("%s[%d]", param, j)
		switch it.Type {
		case "input_text", "output_text":
			out = append(out, textPart(it.Text))
		case "refusal":
			out = append(out, textPart(it.Refusal))
		case "input_image":
			if it.FileID != "" || it.ImageURL == "" {
				return nil, unsupported(p, "%s: images by file_id are not supported by the gateway: give image_url", p)
			}
			img, err := imageFromURL(it.ImageURL, p+".image_url")
			if err != nil {
				return nil, err
			}
			out = append(out, &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: img}})
		case "input_file":
			return nil, unsupported(p, "%s: file input is not supported by the gateway", p)
		case "input_audio":
			return nil, unsupported(p, "%s: audio input is not supported by the gateway", p)
		default:
			return nil, badParam(p+".type", "Invalid value for '%s.type': %q", p, it.Type)
		}
	}
	return out, nil
}

// Responses output types.
type responseObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	Model             string            `json:"model"`
	Output            []json.RawMessage `json:"output"`
	OutputText        string            `json:"output_text,omitempty"`
	Usage             *responsesUsage   `json:"usage"`
	Error             *responsesErr     `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	ToolChoice        string            `json:"tool_choice"`
	Tools             []json.RawMessage `json:"tools"`
	Metadata          map[string]string `json:"metadata"`
	Temperature       *float64          `json:"temperature"`
	TopP              *float64          `json:"top_p"`
	MaxOutputTokens   *int32            `json:"max_output_tokens"`
	Instructions      *string           `json:"instructions"`
}

type responsesErr struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

type outMessage struct {
	Type    string        `json:"type"`
	ID      string        `json:"id"`
	Status  string        `json:"status"`
	Role    string        `json:"role"`
	Content []outTextPart `json:"content"`
}

type outTextPart struct {
	Type        string     `json:"type"`
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
	Logprobs    []struct{} `json:"logprobs"`
}

type outFunctionCall struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

type outReasoning struct {
	Type             string          `json:"type"`
	ID               string          `json:"id"`
	Summary          []summaryText   `json:"summary"`
	EncryptedContent *string         `json:"encrypted_content,omitempty"`
	Status           string          `json:"status,omitempty"`
	Content          json.RawMessage `json:"content,omitempty"`
}

type summaryText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func respUsage(u *llmv1.Usage) *responsesUsage {
	in := u.GetInputTokens() + u.GetCacheReadTokens() + u.GetCacheWriteTokens()
	ru := &responsesUsage{InputTokens: in, OutputTokens: u.GetOutputTokens(), TotalTokens: in + u.GetOutputTokens()}
	ru.InputTokensDetails.CachedTokens = u.GetCacheReadTokens()
	ru.OutputTokensDetails.ReasoningTokens = u.GetReasoningTokens()
	return ru
}

func respID(id string) string {
	if strings.HasPrefix(id, "resp_") {
		return id
	}
	return "resp_" + id
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// responseShell is the response object with the request's echo fields.
func responseShell(req *llmv1.Request, id, model string, created int64) *responseObject {
	ro := &responseObject{ID: respID(id), Object: "response", CreatedAt: created, Status: "in_progress", Model: model,
		Output: []json.RawMessage{}, ParallelToolCalls: true, ToolChoice: "auto", Tools: []json.RawMessage{},
		Metadata: req.GetMetadata(), Temperature: req.Temperature, MaxOutputTokens: req.MaxOutputTokens}
	if ro.Metadata == nil {
		ro.Metadata = map[string]string{}
	}
	if req.GetSystem() != "" {
		s := req.GetSystem()
		ro.Instructions = &s
	}
	for _, t := range req.GetTools() {
		params := json.RawMessage(t.GetParameters())
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		ro.Tools = append(ro.Tools, mustJSON(map[string]any{"type": "function", "name": t.GetName(), "description": t.GetDescription(), "parameters": params, "strict": false}))
	}
	switch tc := req.GetToolChoice(); tc.GetMode() {
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
		ro.ToolChoice = "none"
	case llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
		ro.ToolChoice = "required"
	}
	return ro
}

// finishResponse sets status, usage and incomplete_details from resp.
func finishResponse(ro *responseObject, resp *llmv1.Response) {
	ro.Status = "completed"
	switch resp.GetFinishReason() {
	case llmv1.FinishReason_FINISH_REASON_LENGTH, llmv1.FinishReason_FINISH_REASON_INCOMPLETE:
		ro.Status = "incomplete"
		ro.IncompleteDetails = &struct {
			Reason string `json:"reason"`
		}{"max_output_tokens"}
	case llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER:
		ro.Status = "incomplete"
		ro.IncompleteDetails = &struct {
			Reason string `json:"reason"`
		}{"content_filter"}
	}
	ro.Usage = respUsage(resp.GetUsage())
}

// outputItems renders a response's parts as output items; ids are derived
// from the response id and the part's index so streams and replies agree.
func (h *Handler) outputItems(resp *llmv1.Response) []json.RawMessage {
	var out []json.RawMessage
	var msg *outMessage
	for i, p := range resp.GetParts() {
		switch x := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			if msg == nil {
				msg = &outMessage{Type: "message", ID: itemID("msg", resp.GetId(), i), Status: "completed", Role: "assistant"}
			}
			msg.Content = append(msg.Content, outTextPart{Type: "output_text", Text: x.Text.GetText(), Annotations: []struct{}{}, Logprobs: []struct{}{}})
			continue
		case *llmv1.ContentPart_ToolCall:
			flush(&out, &msg)
			out = append(out, mustJSON(outFunctionCall{Type: "function_call", ID: itemID("fc", resp.GetId(), i), CallID: x.ToolCall.GetId(),
				Name: x.ToolCall.GetName(), Arguments: x.ToolCall.GetArguments(), Status: "completed"}))
		case *llmv1.ContentPart_Reasoning, *llmv1.ContentPart_Opaque:
			flush(&out, &msg)
			out = append(out, mustJSON(h.reasoningItem(p, resp.GetId(), resp.GetProviderId()+"/"+resp.GetModelId(), i)))
		}
	}
	flush(&out, &msg)
	if out == nil {
		out = []json.RawMessage{}
	}
	return out
}

func flush(out *[]json.RawMessage, msg **outMessage) {
	if *msg != nil {
		*out = append(*out, mustJSON(*msg))
		*msg = nil
	}
}

func (h *Handler) reasoningItem(p *llmv1.ContentPart, respID, route string, i int) outReasoning {
	r := outReasoning{Type: "reasoning", ID: itemID("rs", respID, i), Summary: []summaryText{}}
	if t := p.GetReasoning().GetText(); t != "" {
		r.Summary = append(r.Summary, summaryText{Type: "summary_text", Text: t})
	}
	if s := h.roundTripState(p, route); s != "" {
		r.EncryptedContent = &s
	}
	return r
}

func itemID(prefix, respID string, i int) string {
	return sprintf("%s_%s_%d", prefix, strings.TrimPrefix(respID, "resp_"), i)
}

func (h *Handler) responses(w http.ResponseWriter, r *http.Request) {
	fields, err := readJSONObject(w, r)
	if err != nil {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", "", err.Error())
		return
	}
	var rs replays
	req, stream, err := responsesRequest(fields, &rs)
	if err == nil {
		err = h.resolveRequest(r.Context(), req, rs)
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
		ro := responseShell(req, resp.GetId(), resp.GetProviderId()+"/"+resp.GetModelId(), created)
		ro.Output = h.outputItems(resp)
		ro.OutputText = responseText(resp)
		finishResponse(ro, resp)
		writeJSON(w, http.StatusOK, ro)
		return
	}
	st := &responsesStream{h: h, sse: newSSE(w), req: req, created: created}
	if _, err := h.stream(r.Context(), req, st.handle); err != nil && !st.sse.started {
		h.writeOpenAIBackendError(w, r, err)
	}
}

// responsesStream renders gateway events as Responses streaming events.
type responsesStream struct {
	h       *Handler
	sse     *sse
	req     *llmv1.Request
	created int64
	seq     int
	shell   *responseObject
	respID  string
	// open items by gateway block index
	items  map[int32]*streamItem
	output int // next output_index
}

type streamItem struct {
	kind        llmv1.ContentBlockKind
	id          string
	outputIndex int
	callID      string
	name        string
	text        strings.Builder
}

func (s *responsesStream) send(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	return s.sse.event(typ, fields)
}

func (s *responsesStream) handle(ev *llmv1.StreamResponse) error {
	switch x := ev.GetEvent().(type) {
	case *llmv1.StreamResponse_Started:
		s.respID = x.Started.GetId()
		s.items = map[int32]*streamItem{}
		s.shell = responseShell(s.req, s.respID, x.Started.GetProviderId()+"/"+x.Started.GetModelId(), s.created)
		if err := s.send("response.created", map[string]any{"response": s.shell}); err != nil {
			return err
		}
		return s.send("response.in_progress", map[string]any{"response": s.shell})
	case *llmv1.StreamResponse_ContentBlockStart:
		b := x.ContentBlockStart
		it := &streamItem{kind: b.GetKind(), outputIndex: s.output, callID: b.GetToolCallId(), name: b.GetToolName()}
		s.items[b.GetIndex()] = it
		i := int(b.GetIndex())
		switch b.GetKind() {
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT:
			it.id = itemID("msg", s.respID, i)
			s.output++
			if err := s.send("response.output_item.added", map[string]any{"output_index": it.outputIndex,
				"item": outMessage{Type: "message", ID: it.id, Status: "in_progress", Role: "assistant", Content: []outTextPart{}}}); err != nil {
				return err
			}
			return s.send("response.content_part.added", map[string]any{"item_id": it.id, "output_index": it.outputIndex, "content_index": 0,
				"part": outTextPart{Type: "output_text", Annotations: []struct{}{}, Logprobs: []struct{}{}}})
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL:
			it.id = itemID("fc", s.respID, i)
			s.output++
			return s.send("response.output_item.added", map[string]any{"output_index": it.outputIndex,
				"item": outFunctionCall{Type: "function_call", ID: it.id, CallID: it.callID, Name: it.name, Status: "in_progress"}})
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE:
			it.id = itemID("rs", s.respID, i)
			s.output++
			return s.send("response.output_item.added", map[string]any{"output_index": it.outputIndex,
				"item": outReasoning{Type: "reasoning", ID: it.id, Summary: []summaryText{}}})
		}
	case *llmv1.StreamResponse_TextDelta:
		it := s.items[x.TextDelta.GetIndex()]
		if it == nil {
			return nil
		}
		it.text.WriteString(x.TextDelta.GetText())
		return s.send("response.output_text.delta", map[string]any{"item_id": it.id, "output_index": it.outputIndex, "content_index": 0,
			"delta": x.TextDelta.GetText(), "logprobs": []struct{}{}})
	case *llmv1.StreamResponse_ReasoningDelta:
		it := s.items[x.ReasoningDelta.GetIndex()]
		if it == nil {
			return nil
		}
		if it.text.Len() == 0 {
			if err := s.send("response.reasoning_summary_part.added", map[string]any{"item_id": it.id, "output_index": it.outputIndex,
				"summary_index": 0, "part": summaryText{Type: "summary_text"}}); err != nil {
				return err
			}
		}
		it.text.WriteString(x.ReasoningDelta.GetText())
		return s.send("response.reasoning_summary_text.delta", map[string]any{"item_id": it.id, "output_index": it.outputIndex,
			"summary_index": 0, "delta": x.ReasoningDelta.GetText()})
	case *llmv1.StreamResponse_ToolCallDelta:
		it := s.items[x.ToolCallDelta.GetIndex()]
		if it == nil {
			return nil
		}
		it.text.WriteString(x.ToolCallDelta.GetArgumentsDelta())
		return s.send("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": it.outputIndex,
			"delta": x.ToolCallDelta.GetArgumentsDelta()})
	case *llmv1.StreamResponse_ContentBlockEnd:
		return s.endItem(x.ContentBlockEnd)
	case *llmv1.StreamResponse_Ended:
		resp := x.Ended.GetResponse()
		if s.shell == nil {
			if err := s.handle(startedOf(resp)); err != nil {
				return err
			}
		}
		s.shell.Output = s.h.outputItems(resp)
		finishResponse(s.shell, resp)
		name := "response.completed"
		if s.shell.Status == "incomplete" {
			name = "response.incomplete"
		}
		return s.send(name, map[string]any{"response": s.shell})
	case *llmv1.StreamResponse_Error:
		if s.shell == nil {
			if err := s.handle(startedOf(x.Error.GetPartialResponse())); err != nil {
				return err
			}
		}
		d := x.Error.GetError()
		info := errorInfo{status: statusForKind(d.GetKind(), 0), kind: d.GetKind(), message: d.GetMessage()}
		body := openaiBackendError(info).Error
		code := ""
		if body.Code != nil {
			code = *body.Code
		}
		s.shell.Status = "failed"
		s.shell.Error = &responsesErr{Code: "server_error", Message: d.GetMessage()}
		if p := x.Error.GetPartialResponse(); p != nil {
			s.shell.Output = s.h.outputItems(p)
			s.shell.Usage = respUsage(p.GetUsage())
		}
		if err := s.send("error", map[string]any{"code": code, "message": d.GetMessage(), "param": nil}); err != nil {
			return err
		}
		return s.send("response.failed", map[string]any{"response": s.shell})
	}
	return nil
}

func (s *responsesStream) endItem(e *llmv1.ContentBlockEnd) error {
	it := s.items[e.GetIndex()]
	if it == nil {
		return nil
	}
	delete(s.items, e.GetIndex())
	base := func() map[string]any { return map[string]any{"item_id": it.id, "output_index": it.outputIndex} }
	switch it.kind {
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT:
		text := e.GetPart().GetText().GetText()
		f := base()
		f["content_index"], f["text"], f["logprobs"] = 0, text, []struct{}{}
		if err := s.send("response.output_text.done", f); err != nil {
			return err
		}
		part := outTextPart{Type: "output_text", Text: text, Annotations: []struct{}{}, Logprobs: []struct{}{}}
		f = base()
		f["content_index"], f["part"] = 0, part
		if err := s.send("response.content_part.done", f); err != nil {
			return err
		}
		return s.send("response.output_item.done", map[string]any{"output_index": it.outputIndex,
			"item": outMessage{Type: "message", ID: it.id, Status: "completed", Role: "assistant", Content: []outTextPart{part}}})
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL:
		tc := e.GetPart().GetToolCall()
		f := base()
		f["arguments"], f["name"] = tc.GetArguments(), tc.GetName()
		if err := s.send("response.function_call_arguments.done", f); err != nil {
			return err
		}
		return s.send("response.output_item.done", map[string]any{"output_index": it.outputIndex,
			"item": outFunctionCall{Type: "function_call", ID: it.id, CallID: tc.GetId(), Name: tc.GetName(), Arguments: tc.GetArguments(), Status: "completed"}})
	default:
		if it.text.Len() > 0 {
			f := base()
			f["summary_index"], f["text"] = 0, it.text.String()
			if err := s.send("response.reasoning_summary_text.done", f); err != nil {
				return err
			}
			f = base()
			f["summary_index"], f["part"] = 0, summaryText{Type: "summary_text", Text: it.text.String()}
			if err := s.send("response.reasoning_summary_part.done", f); err != nil {
				return err
			}
		}
		return s.send("response.output_item.done", map[string]any{"output_index": it.outputIndex,
			"item": s.reasoningItemWithID(e.GetPart(), it.id)})
	}
}

func (s *responsesStream) reasoningItemWithID(p *llmv1.ContentPart, id string) outReasoning {
	r := s.h.reasoningItem(p, "", s.shell.Model, 0)
	r.ID = id
	return r
}
