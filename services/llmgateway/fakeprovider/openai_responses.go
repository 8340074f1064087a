package fakeprovider

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Responses objects, as structs so fields keep OpenAI's order.
type respObject struct {
	ID                string           `json:"id"`
	Object            string           `json:"object"`
	CreatedAt         int64            `json:"created_at"`
	Status            string           `json:"status"`
	Error             any              `json:"error"`
	IncompleteDetails *respIncomplete  `json:"incomplete_details"`
	Model             string           `json:"model"`
	Output            []map[string]any `json:"output"`
	ParallelToolCalls bool             `json:"parallel_tool_calls"`
	Store             bool             `json:"store"`
	Usage             *respUsage       `json:"usage"`
}

type respIncomplete struct {
	Reason string `json:"reason"`
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// respUsageOf renders the scripted usage: input_tokens includes cached (and
// written) tokens; output_tokens includes reasoning tokens.
func respUsageOf(u Usage) *respUsage {
	r := &respUsage{InputTokens: u.Input + u.CacheRead + u.CacheWrite, OutputTokens: u.Output}
	r.InputTokensDetails.CachedTokens = u.CacheRead
	r.OutputTokensDetails.ReasoningTokens = u.Reasoning
	r.TotalTokens = r.InputTokens + r.OutputTokens
	return r
}

// respItems builds the turn's output items: reasoning, message, function
// calls, in that order, complete.
func respItems(t Turn) []map[string]any {
	var items []map[string]any
	if t.Reasoning != "" {
		items = append(items, map[string]any{
			"id": "rs_fake", "type": "reasoning",
			"summary":           []any{map[string]any{"type": "summary_text", "text": t.Reasoning}},
			"encrypted_content": fakeEncrypted(t.Reasoning),
		})
	}
	if t.Text != "" {
		items = append(items, map[string]any{
			"id": "msg_fake", "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "annotations": []any{}, "logprobs": []any{}, "text": t.Text}},
		})
	}
	for i, tc := range t.ToolCalls {
		items = append(items, map[string]any{
			"id": fmt.Sprintf("fc_fake%d", i), "type": "function_call", "status": "completed",
			"arguments": tc.Arguments, "call_id": tc.ID, "name": tc.Name,
		})
	}
	return items
}

// fakeEncrypted stands in for encrypted reasoning: opaque base64 the client
// must return untouched.
func fakeEncrypted(reasoning string) string {
	return "gAAAAB" + base64.StdEncoding.EncodeToString([]byte("enc:"+reasoning))
}

// respStatus is the terminal status and incomplete reason for a finish.
func respStatus(t Turn) (status string, incomplete *respIncomplete) {
	switch finishReason(t) {
	case "length":
		return "incomplete", &respIncomplete{Reason: "max_output_tokens"}
	case "content_filter":
		return "incomplete", &respIncomplete{Reason: "content_filter"}
	}
	return "completed", nil
}

// renderOpenAIResponses renders a turn as a Responses reply: a response
// object, or the typed SSE stream (event: + data with type and
// sequence_number) ending in response.completed or response.incomplete.
func renderOpenAIResponses(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	openAIRateLimits(w.Header())
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(openAIErrorJSON("invalid_request_error", "", "We could not parse the JSON body of your request."))
		return
	}
	openAIHeaders(w)
	if preStreamFault(w, t, openAIError) {
		return
	}
	created := time.Now().Unix()
	status, incomplete := respStatus(t)
	final := respObject{
		ID: "resp_fake", Object: "response", CreatedAt: created, Status: status, IncompleteDetails: incomplete,
		Model: req.Model, Output: respItems(t), ParallelToolCalls: true, Usage: respUsageOf(t.Usage),
	}
	if !req.Stream {
		full, _ := json.Marshal(final)
		if nonStreamFault(w, t, full) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(full)
		return
	}

	sw := newStreamWriter(w, r, "text/event-stream; charset=utf-8", t)
	seq := 0
	frame := func(typ string, fields map[string]any) []byte {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		b, _ := json.Marshal(fields)
		return append(append([]byte("event: "+typ+"\ndata: "), b...), '\n', '\n')
	}
	midErr := func() []byte {
		return frame("error", map[string]any{"code": "server_error", "message": "The server had an error while processing your request. Sorry about that!", "param": nil})
	}
	// Lifecycle and item events go out raw; deltas count as chunks.
	send := func(typ string, fields map[string]any) { sw.Raw(frame(typ, fields)) }
	chunk := func(typ string, fields map[string]any) bool { return sw.Chunk(frame(typ, fields), midErr) }

	started := final
	started.Status, started.IncompleteDetails, started.Output, started.Usage = "in_progress", nil, []map[string]any{}, nil
	send("response.created", map[string]any{"response": started})
	send("response.in_progress", map[string]any{"response": started})

	out := 0
	if t.Reasoning != "" {
		item := map[string]any{"id": "rs_fake", "type": "reasoning", "summary": []any{}}
		send("response.output_item.added", map[string]any{"output_index": out, "item": item})
		part := map[string]any{"type": "summary_text", "text": ""}
		send("response.reasoning_summary_part.added", map[string]any{"item_id": "rs_fake", "output_index": out, "summary_index": 0, "part": part})
		for _, c := range chunks(t.Reasoning, t.ChunkRunes) {
			if !chunk("response.reasoning_summary_text.delta", map[string]any{"item_id": "rs_fake", "output_index": out, "summary_index": 0, "delta": c}) {
				return
			}
		}
		send("response.reasoning_summary_text.done", map[string]any{"item_id": "rs_fake", "output_index": out, "summary_index": 0, "text": t.Reasoning})
		part["text"] = t.Reasoning
		send("response.reasoning_summary_part.done", map[string]any{"item_id": "rs_fake", "output_index": out, "summary_index": 0, "part": part})
		send("response.output_item.done", map[string]any{"output_index": out, "item": final.Output[out]})
		out++
	}
	if t.Text != "" {
		item := map[string]any{"id": "msg_fake", "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}
		send("response.output_item.added", map[string]any{"output_index": out, "item": item})
		part := map[string]any{"type": "output_text", "annotations": []any{}, "logprobs": []any{}, "text": ""}
		send("response.content_part.added", map[string]any{"item_id": "msg_fake", "output_index": out, "content_index": 0, "part": part})
		for _, c := range chunks(t.Text, t.ChunkRunes) {
			if !chunk("response.output_text.delta", map[string]any{"item_id": "msg_fake", "output_index": out, "content_index": 0, "delta": c, "logprobs": []any{}}) {
				return
			}
		}
		send("response.output_text.done", map[string]any{"item_id": "msg_fake", "output_index": out, "content_index": 0, "text": t.Text, "logprobs": []any{}})
		part["text"] = t.Text
		send("response.content_part.done", map[string]any{"item_id": "msg_fake", "output_index": out, "content_index": 0, "part": part})
		send("response.output_item.done", map[string]any{"output_index": out, "item": final.Output[out]})
		out++
	}
	for i, tc := range t.ToolCalls {
		id := fmt.Sprintf("fc_fake%d", i)
		item := map[string]any{"id": id, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": tc.ID, "name": tc.Name}
		send("response.output_item.added", map[string]any{"output_index": out, "item": item})
		for _, a := range chunks(tc.Arguments, t.ChunkRunes) {
			if !chunk("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": out, "delta": a}) {
				return
			}
		}
		send("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": out, "name": tc.Name, "arguments": tc.Arguments})
		send("response.output_item.done", map[string]any{"output_index": out, "item": final.Output[out]})
		out++
	}
	terminal := "response.completed"
	if status == "incomplete" {
		terminal = "response.incomplete"
	}
	// The terminal event counts as a chunk so a fault placed after the last
	// delta still fires before the stream completes.
	chunk(terminal, map[string]any{"response": final})
}
