package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Gemini API: POST /v1beta/models/{model}:generateContent answers one
// GenerateContentResponse; :streamGenerateContent?alt=sse answers one whole
// GenerateContentResponse per `data:` line, with no terminator: the last
// chunk carries finishReason and the final usageMetadata. Errors are
// {"error":{"code","message","status","details"}}; after the stream has
// started the API reports one as a bare JSON line, not a data: line.

type geminiPart struct {
	Text             string          `json:"text,omitempty"`
	Thought          bool            `json:"thought,omitempty"`
	FunctionCall     *geminiFuncCall `json:"functionCall,omitempty"`
	ThoughtSignature string          `json:"thoughtSignature,omitempty"`
}

type geminiFuncCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type geminiCandidate struct {
	Content      geminiContent `json:"content"`
	FinishReason string        `json:"finishReason,omitempty"`
	Index        int           `json:"index"`
}

type geminiContent struct {
	Parts []geminiPart `json:"parts"`
	Role  string       `json:"role"`
}

type geminiUsage struct {
	PromptTokenCount        int `json:"promptTokenCount"`
	CandidatesTokenCount    int `json:"candidatesTokenCount,omitempty"`
	ThoughtsTokenCount      int `json:"thoughtsTokenCount,omitempty"`
	CachedContentTokenCount int `json:"cachedContentTokenCount,omitempty"`
	TotalTokenCount         int `json:"totalTokenCount"`
}

type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata *geminiUsage      `json:"usageMetadata,omitempty"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// geminiUsageOf renders normalized usage in Gemini's shape: the prompt
// count includes cached tokens, and candidates exclude thoughts. Gemini has
// no cache writes; CacheWrite is billed as plain prompt.
func geminiUsageOf(u Usage) *geminiUsage {
	prompt := u.Input + u.CacheRead + u.CacheWrite
	cand := u.Output - u.Reasoning
	return &geminiUsage{
		PromptTokenCount: prompt, CandidatesTokenCount: cand, ThoughtsTokenCount: u.Reasoning,
		CachedContentTokenCount: u.CacheRead, TotalTokenCount: prompt + cand + u.Reasoning,
	}
}

func geminiFinish(t Turn) string {
	switch t.Finish {
	case "length":
		return "MAX_TOKENS"
	case "content_filter":
		return "SAFETY"
	}
	return "STOP" // Gemini has no tool-call finish: a call ends with STOP
}

func geminiErrorBody(code int, status, msg string, details ...any) []byte {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if len(details) > 0 {
		e["details"] = details
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	return b
}

// geminiCallParts renders the tool calls; the turn's thought signature, if
// it reasoned, rides on the first call, as the API does.
func geminiCallParts(t Turn) []geminiPart {
	var parts []geminiPart
	for i, tc := range t.ToolCalls {
		args := json.RawMessage(tc.Arguments)
		if tc.Arguments == "" {
			args = json.RawMessage("{}")
		}
		p := geminiPart{FunctionCall: &geminiFuncCall{ID: tc.ID, Name: tc.Name, Args: args}}
		if i == 0 && t.Reasoning != "" {
			p.ThoughtSignature = fakeSignature("R2VtU2ln", t.Reasoning)
		}
		parts = append(parts, p)
	}
	return parts
}

func renderGemini(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	if !json.Valid(body) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(geminiErrorBody(400, "INVALID_ARGUMENT", "Invalid JSON payload received."))
		return
	}
	if preStreamFault(w, t, func(status int, kind FaultKind) []byte {
		switch kind {
		case FaultRateLimit:
			delay := int(t.Fault.RetryAfter.Seconds())
			return geminiErrorBody(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details.",
				map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{map[string]any{
					"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
					"quotaId":     "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}}},
				map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": fmt.Sprintf("%ds", delay)})
		case FaultOverloaded:
			return geminiErrorBody(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
		case FaultAuth:
			return geminiErrorBody(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
		}
		return geminiErrorBody(500, "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting")
	}) {
		return
	}
	model := r.URL.Path[strings.LastIndex(r.URL.Path, "/models/")+len("/models/"):]
	model, _, _ = strings.Cut(model, ":")
	if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		geminiStream(w, r, t, model)
		return
	}
	var parts []geminiPart
	if t.Reasoning != "" {
		parts = append(parts, geminiPart{Text: t.Reasoning, Thought: true})
	}
	if t.Text != "" {
		p := geminiPart{Text: t.Text}
		if t.Reasoning != "" && len(t.ToolCalls) == 0 {
			p.ThoughtSignature = fakeSignature("R2VtU2ln", t.Reasoning)
		}
		parts = append(parts, p)
	}
	if t.Text == "" && len(t.ToolCalls) == 0 && t.Reasoning != "" {
		parts = append(parts, geminiPart{ThoughtSignature: fakeSignature("R2VtU2ln", t.Reasoning)})
	}
	parts = append(parts, geminiCallParts(t)...)
	if parts == nil {
		parts = []geminiPart{}
	}
	b, _ := json.Marshal(geminiResponse{
		Candidates:    []geminiCandidate{{Content: geminiContent{Parts: parts, Role: "model"}, FinishReason: geminiFinish(t)}},
		UsageMetadata: geminiUsageOf(t.Usage), ModelVersion: model, ResponseID: "resp_fake_01",
	})
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.Write(b)
}

func geminiStream(w http.ResponseWriter, r *http.Request, t Turn, model string) {
	if r.URL.Query().Get("alt") != "sse" {
		// Without alt=sse the API streams one JSON array; nothing here reads that.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(geminiErrorBody(400, "INVALID_ARGUMENT", "fakeprovider: streamGenerateContent is served with alt=sse only"))
		return
	}
	sw := newStreamWriter(w, r, "text/event-stream", t)
	midErr := func() []byte {
		// The same \r\n\r\n framing as the data lines: clients split on it.
		return append(geminiErrorBody(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), "\r\n\r\n"...)
	}
	promptOnly := geminiUsageOf(Usage{Input: t.Usage.Input, CacheRead: t.Usage.CacheRead, CacheWrite: t.Usage.CacheWrite})
	send := func(parts []geminiPart, finish string, usage *geminiUsage) bool {
		b, _ := json.Marshal(geminiResponse{
			Candidates:    []geminiCandidate{{Content: geminiContent{Parts: parts, Role: "model"}, FinishReason: finish}},
			UsageMetadata: usage, ModelVersion: model, ResponseID: "resp_fake_01",
		})
		return sw.Chunk([]byte("data: "+string(b)+"\r\n\r\n"), midErr)
	}
	var final []geminiPart
	for _, c := range chunks(t.Reasoning, t.ChunkRunes) {
		if !send([]geminiPart{{Text: c, Thought: true}}, "", promptOnly) {
			return
		}
	}
	textChunks := chunks(t.Text, t.ChunkRunes)
	for i, c := range textChunks {
		p := geminiPart{Text: c}
		if i == len(textChunks)-1 && len(t.ToolCalls) == 0 && t.Reasoning != "" {
			p.ThoughtSignature = fakeSignature("R2VtU2ln", t.Reasoning)
		}
		if i == len(textChunks)-1 {
			final = append(final, p) // the last text rides with the finish
			break
		}
		if !send([]geminiPart{p}, "", promptOnly) {
			return
		}
	}
	if len(textChunks) == 0 && len(t.ToolCalls) == 0 && t.Reasoning != "" {
		// No text to carry the signature: the API sends it on an empty part.
		final = append(final, geminiPart{ThoughtSignature: fakeSignature("R2VtU2ln", t.Reasoning)})
	}
	final = append(final, geminiCallParts(t)...)
	if final == nil {
		final = []geminiPart{}
	}
	send(final, geminiFinish(t), geminiUsageOf(t.Usage))
}
