package loop

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// request builds the model request from the history as it stands.
func (a *Agent) request() *llmv1.Request {
	a.mu.Lock()
	msgs := append([]*llmv1.Message(nil), a.history...)
	a.mu.Unlock()
	r := &llmv1.Request{
		Model:           a.opts.Model,
		System:          a.opts.System,
		Messages:        msgs,
		Tools:           a.defs,
		ReasoningEffort: a.opts.ReasoningEffort,
		Speed:           a.opts.Speed,
	}
	if len(a.defs) > 0 {
		r.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
	}
	if a.opts.MaxTokens > 0 {
		r.MaxOutputTokens = &a.opts.MaxTokens
	}
	return r
}

// streamTurn streams one model turn, emitting its deltas. A stream that
// fails after visible output is replayed up to MaxReplays times.
func (a *Agent) streamTurn(ctx context.Context, ps *promptState, turn int32) (*llmv1.Response, *llmv1.ErrorDetail) {
	req := &llmv1.StreamRequest{Request: a.request()}
	for attempt := 1; ; attempt++ {
		start := a.opts.Now()
		resp, lerr, visible := a.streamOnce(ctx, ps, req)
		ps.inference += a.opts.Now().Sub(start)
		if lerr == nil {
			return resp, nil
		}
		if !visible || !lerr.GetRetryable() || attempt > MaxReplays || ctx.Err() != nil {
			return nil, lerr
		}
		delay := a.opts.ReplayBackoff(attempt + 1)
		if ra := lerr.GetRetryAfter(); ra != nil && ra.AsDuration() > delay {
			delay = ra.AsDuration()
		}
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_LlmRetry{LlmRetry: &agentv1.LlmRetry{
			Provider: lerr.GetProviderId(), Model: lerr.GetModelId(), Attempt: int32(attempt + 1),
			Delay: durationpb.New(delay), Error: lerr, Phase: agentv1.LlmRetryPhase_LLM_RETRY_PHASE_CONSUME}}})
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, cancelledDetail(ctx)
		}
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_AssistantOutputReplace{AssistantOutputReplace: &agentv1.AssistantOutputReplace{
			Turn: turn, Attempt: int32(attempt + 1)}}})
	}
}

// streamOnce makes one attempt. visible says whether any output was
// emitted before a failure.
func (a *Agent) streamOnce(ctx context.Context, ps *promptState, req *llmv1.StreamRequest) (*llmv1.Response, *llmv1.ErrorDetail, bool) {
	stream, err := a.model.Stream(ctx, req)
	if err != nil {
		return nil, statusDetail(ctx, err), false
	}
	visible := false
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, &llmv1.ErrorDetail{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: "the model stream ended without its terminal event", Retryable: true}, visible
			}
			return nil, statusDetail(ctx, err), visible
		}
		switch e := msg.GetEvent().(type) {
		case *llmv1.StreamResponse_TextDelta:
			visible = true
			a.firstOutput(ps)
			a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: e.TextDelta.GetText()}}})
		case *llmv1.StreamResponse_ReasoningDelta:
			visible = true
			a.firstOutput(ps)
			a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_ReasoningDelta{ReasoningDelta: &agentv1.ReasoningDelta{Delta: e.ReasoningDelta.GetText()}}})
		case *llmv1.StreamResponse_ContentBlockStart:
			visible = true
			a.firstOutput(ps)
		case *llmv1.StreamResponse_Ended:
			return e.Ended.GetResponse(), nil, visible
		case *llmv1.StreamResponse_Error:
			d := e.Error.GetError()
			if d == nil {
				d = &llmv1.ErrorDetail{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: "the model stream failed"}
			}
			return nil, d, visible
		}
	}
}

func (a *Agent) firstOutput(ps *promptState) {
	if ps.firstOutput.IsZero() {
		ps.firstOutput = a.opts.Now()
	}
}

// statusDetail turns a gateway status into its ErrorDetail.
func statusDetail(ctx context.Context, err error) *llmv1.ErrorDetail {
	if ctx.Err() != nil {
		return cancelledDetail(ctx)
	}
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ed, ok := d.(*llmv1.ErrorDetail); ok {
			return ed
		}
	}
	kind := llmv1.ErrorKind_ERROR_KIND_NETWORK
	switch st.Code() {
	case codes.NotFound:
		kind = llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case codes.InvalidArgument:
		kind = llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	case codes.FailedPrecondition:
		kind = llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case codes.OutOfRange:
		kind = llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH
	case codes.ResourceExhausted:
		kind = llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case codes.DeadlineExceeded:
		kind = llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case codes.Canceled:
		kind = llmv1.ErrorKind_ERROR_KIND_CANCELLED
	}
	return &llmv1.ErrorDetail{Kind: kind, Message: st.Message()}
}

func cancelledDetail(ctx context.Context) *llmv1.ErrorDetail {
	return &llmv1.ErrorDetail{Kind: llmv1.ErrorKind_ERROR_KIND_CANCELLED, Message: context.Cause(ctx).Error()}
}

func addUsage(dst, u *llmv1.Usage) {
	dst.InputTokens += u.GetInputTokens()
	dst.OutputTokens += u.GetOutputTokens()
	dst.ReasoningTokens += u.GetReasoningTokens()
	dst.CacheReadTokens += u.GetCacheReadTokens()
	dst.CacheWriteTokens += u.GetCacheWriteTokens()
}

func addCost(dst, c *llmv1.Cost) {
	if c == nil {
		return
	}
	dst.InputUsdMicros += c.GetInputUsdMicros()
	dst.OutputUsdMicros += c.GetOutputUsdMicros()
	dst.CacheReadUsdMicros += c.GetCacheReadUsdMicros()
	dst.CacheWriteUsdMicros += c.GetCacheWriteUsdMicros()
	dst.TotalUsdMicros += c.GetTotalUsdMicros()
	if c.GetSource() != llmv1.CostSource_COST_SOURCE_UNSPECIFIED {
		dst.Source = c.GetSource()
	}
}

func cloneUsage(u *llmv1.Usage) *llmv1.Usage {
	c := &llmv1.Usage{}
	addUsage(c, u)
	return c
}

func cloneCost(x *llmv1.Cost) *llmv1.Cost {
	c := &llmv1.Cost{}
	addCost(c, x)
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }
