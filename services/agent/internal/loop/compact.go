package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

const compactionSystem = `You are summarizing a coding session so that another assistant can continue it without the earlier transcript.
Write a hand-off document with these sections: Goal, Progress, Key Decisions, Failed Approaches, Open Issues, Next Steps, and File Operations (the files read, written and edited, by path).
Be specific: name files, functions, commands and errors. Keep the response under 4000 tokens.`

// summaryPrefix opens the compacted history.
const summaryPrefix = "A different assistant began this task and was interrupted when its context filled up. Its hand-off summary follows; continue the task from where it stopped.\n\n"

// clipChars bounds each tool argument and result in the transcript given to
// the summarizer.
const clipChars = 500

// estimateTokens is chars/4 over the system prompt, the tools and the
// history.
func (a *Agent) estimateTokens() int64 {
	n := len(a.opts.System)
	for _, d := range a.defs {
		n += len(d.GetName()) + len(d.GetDescription()) + len(d.GetParameters())
	}
	a.mu.Lock()
	for _, m := range a.history {
		n += messageChars(m)
	}
	a.mu.Unlock()
	return int64(n / 4)
}

func messageChars(m *llmv1.Message) int {
	n := 0
	for _, p := range m.GetParts() {
		switch x := p.GetPart().(type) {
		case *llmv1.ContentPart_Text:
			n += len(x.Text.GetText())
		case *llmv1.ContentPart_ToolCall:
			n += len(x.ToolCall.GetName()) + len(x.ToolCall.GetArguments())
		case *llmv1.ContentPart_ToolResult:
			for _, c := range x.ToolResult.GetContent() {
				n += len(c.GetText().GetText())
			}
		case *llmv1.ContentPart_Reasoning:
			n += len(x.Reasoning.GetText())
		case *llmv1.ContentPart_Opaque:
			n += len(x.Opaque.GetData())
		}
	}
	return n
}

func (a *Agent) contextUsage() *agentv1.ContextWindowUsage {
	est := a.estimateTokens()
	u := &agentv1.ContextWindowUsage{EstimatedTokens: est, ContextWindowTokens: a.opts.ContextWindow}
	if a.opts.ContextWindow > 0 {
		u.UsagePercent = float64(est) * 100 / float64(a.opts.ContextWindow)
	}
	return u
}

// maybeCompact summarizes old turns when the context is over the threshold
// (or always, with force after an overflow). It reports whether the history
// was compacted. A failure is reported and not retried in this prompt.
func (a *Agent) maybeCompact(ctx context.Context, ps *promptState, reason agentv1.CompactionReason, force bool) bool {
	if a.opts.ContextWindow <= 0 {
		return false
	}
	usage := a.contextUsage()
	if !force && usage.GetEstimatedTokens()*100 < int64(a.opts.CompactionThreshold)*a.opts.ContextWindow {
		return false
	}
	a.mu.Lock()
	history := append([]*llmv1.Message(nil), a.history...)
	a.mu.Unlock()
	cut := compactionCut(history, a.opts.PreserveTurns)
	if cut <= 0 {
		return false // nothing can be compacted safely
	}
	a.warn(ps.id, agentv1.WarningKind_WARNING_KIND_CONTEXT_WINDOW, "the context window is over the compaction threshold", map[string]string{
		"estimated_tokens":      fmt.Sprint(usage.GetEstimatedTokens()),
		"context_window_tokens": fmt.Sprint(usage.GetContextWindowTokens()),
		"usage_percent":         fmt.Sprintf("%.1f", usage.GetUsagePercent()),
		"estimate_method":       "local_estimate",
	})
	a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_CompactionStarted{CompactionStarted: &agentv1.CompactionStarted{Reason: reason, ContextWindow: usage}}})

	start := a.opts.Now()
	maxTokens := int32(summaryMaxTokens)
	resp, err := a.model.Complete(ctx, &llmv1.CompleteRequest{Request: &llmv1.Request{
		Model:           a.opts.Model,
		System:          compactionSystem,
		Messages:        []*llmv1.Message{userMessage(transcript(history[:cut]))},
		MaxOutputTokens: &maxTokens,
	}})
	elapsed := a.opts.Now().Sub(start)
	ps.inference += elapsed
	if err != nil && ctx.Err() != nil {
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_CompactionCancelled{CompactionCancelled: &agentv1.CompactionCancelled{Reason: reason}}})
		return false
	}
	summary := responseText(resp.GetResponse())
	if err == nil && strings.TrimSpace(summary) == "" {
		err = errors.New("the summary is empty")
	}
	if err != nil {
		ps.compactionFail = true
		ae := &agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_COMPACTION, Message: "context compaction failed: " + err.Error()}
		if d := statusDetail(ctx, err); d.GetKind() != llmv1.ErrorKind_ERROR_KIND_NETWORK || d.GetMessage() != "" {
			ae.Llm = d
		}
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_CompactionFailed{CompactionFailed: &agentv1.CompactionFailed{Reason: reason, Error: ae}}})
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_Error{Error: &agentv1.Error{Error: ae}}})
		return false
	}
	if len(summary) > summaryMaxTokens*4 {
		summary = summary[:summaryMaxTokens*4]
	}
	r := resp.GetResponse()
	addUsage(ps.usage, r.GetUsage())
	addCost(ps.cost, r.GetCost())

	a.mu.Lock()
	// Messages committed while the summary was made stay after the tail.
	tail := append([]*llmv1.Message(nil), history[cut:]...)
	tail = append(tail, a.history[len(history):]...)
	a.history = append([]*llmv1.Message{userMessage(summaryPrefix + summary)}, tail...)
	a.mu.Unlock()

	a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_CompactionCompleted{CompactionCompleted: &agentv1.CompactionCompleted{
		Reason:               reason,
		OriginalTurnCount:    int32(countAssistant(history)),
		PreservedTurnCount:   int32(countAssistant(history[cut:])),
		SummaryTokenEstimate: int64(len(summary) / 4),
		TrackedFileCount:     int32(len(ps.files)),
		Usage:                r.GetUsage(),
		Cost:                 r.GetCost(),
		Duration:             durationpb.New(elapsed),
	}}})
	return true
}

// compactionCut is the index of the first message kept: the assistant
// message that starts the newest preserve turns, so no tool result is
// separated from its call. 0 when there is nothing older to compact.
func compactionCut(h []*llmv1.Message, preserve int) int {
	seen := 0
	for i := len(h) - 1; i > 0; i-- {
		if h[i].GetRole() != llmv1.Role_ROLE_ASSISTANT {
			continue
		}
		seen++
		if seen == preserve {
			return i
		}
	}
	return 0
}

func countAssistant(h []*llmv1.Message) int {
	n := 0
	for _, m := range h {
		if m.GetRole() == llmv1.Role_ROLE_ASSISTANT {
			n++
		}
	}
	return n
}

// transcript renders messages for the summarizer, clipping tool arguments
// and results.
func transcript(h []*llmv1.Message) string {
	var b strings.Builder
	b.WriteString("Summarize this session transcript:\n\n")
	for _, m := range h {
		role := strings.ToLower(strings.TrimPrefix(m.GetRole().String(), "ROLE_"))
		for _, p := range m.GetParts() {
			switch x := p.GetPart().(type) {
			case *llmv1.ContentPart_Text:
				fmt.Fprintf(&b, "[%s] %s\n", role, x.Text.GetText())
			case *llmv1.ContentPart_ToolCall:
				fmt.Fprintf(&b, "[%s called %s] %s\n", role, x.ToolCall.GetName(), clip(x.ToolCall.GetArguments()))
			case *llmv1.ContentPart_ToolResult:
				var out strings.Builder
				for _, c := range x.ToolResult.GetContent() {
					out.WriteString(c.GetText().GetText())
				}
				fmt.Fprintf(&b, "[result of %s, error=%t] %s\n", x.ToolResult.GetName(), x.ToolResult.GetIsError(), clip(out.String()))
			}
		}
	}
	return b.String()
}

func clip(s string) string {
	if len(s) <= clipChars {
		return s
	}
	return s[:clipChars] + "…"
}
