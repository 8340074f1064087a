package llmgateway

import (
	"fmt"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// block is one content block being assembled.
type block struct {
	key       int
	kind      llmv1.ContentBlockKind
	toolIndex int32
	text      strings.Builder
	id, name  string
	signature string
	opaque    string
	opaqueKnd string
	redacted  bool
	ended     bool
	part      *llmv1.ContentPart
}

// assembler turns one attempt's codec events into dense-indexed stream
// events and the final Response. Events are held back until the first
// visible output (a delta or a completed part), so that a failure before it
// can still be retried or failed over without the caller seeing anything.
type assembler struct {
	route catalog.Route
	emit  func(*llmv1.StreamResponse) error // nil: unary, no events built
	// seal turns an opaque part's data into the envelope the caller gets
	// (opaque.go); nil hands it out as it came (tests of the assembler).
	seal func(kind, data string) string

	id, upstreamModel string
	blocks            []*block
	tools             int32
	usage             codec.Usage
	sawUsage          bool
	finish            llmv1.FinishReason
	rawFinish         string
	visible           bool
	pending           []*llmv1.StreamResponse
	rateLimits        *llmv1.RateLimits
	warnings          []string // from adapting the request to the route
}

func newAssembler(route catalog.Route, emit func(*llmv1.StreamResponse) error) *assembler {
	return &assembler{route: route, emit: emit}
}

// Visible reports whether the caller has seen output from this attempt.
func (a *assembler) Visible() bool { return a.visible }

// send emits ev, holding it back until visible output when show is false.
func (a *assembler) send(ev *llmv1.StreamResponse, show bool) error {
	if a.emit == nil {
		return nil
	}
	if !a.visible && !show {
		a.pending = append(a.pending, ev)
		return nil
	}
	if !a.visible {
		a.visible = true
		if err := a.emit(a.startedEvent()); err != nil {
			return err
		}
		if a.rateLimits != nil {
			if err := a.emit(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_RateLimits{RateLimits: a.rateLimits}}); err != nil {
				return err
			}
		}
		for _, p := range a.pending {
			if err := a.emit(p); err != nil {
				return err
			}
		}
		a.pending = nil
	}
	return a.emit(ev)
}

func (a *assembler) startedEvent() *llmv1.StreamResponse {
	return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Started{Started: &llmv1.Started{
		Id: a.responseID(), ModelId: a.route.Model.GetModelId(), ProviderId: a.route.Provider.GetProviderId(),
	}}}
}

func (a *assembler) responseID() string {
	if a.id == "" {
		a.id = "resp_" + randomID()
	}
	return a.id
}

func (a *assembler) lookup(key int) *block {
	for i := len(a.blocks) - 1; i >= 0; i-- { // recent blocks are hit most
		if b := a.blocks[i]; b.key == key && !b.ended {
			return b
		}
	}
	return nil
}

func decodeError(format string, args ...any) error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: fmt.Sprintf(format, args...)}
}

// handle applies one codec event. Errors are the caller's emit error or a
// STREAM_DECODE error for a codec that breaks the event contract.
func (a *assembler) handle(ev *codec.Event) error {
	switch ev.Type {
	case codec.EventStart:
		if ev.ResponseID != "" {
			a.id = ev.ResponseID
		}
		a.upstreamModel = ev.Model
	case codec.EventBlockStart:
		if a.lookup(ev.Key) != nil {
			return decodeError("block %d started twice", ev.Key)
		}
		b := &block{key: ev.Key, kind: ev.Kind, id: ev.ToolCallID, name: ev.ToolName, opaqueKnd: ev.OpaqueKind, redacted: ev.Redacted}
		idx := int32(len(a.blocks))
		if b.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL {
			b.toolIndex = a.tools
			a.tools++
		}
		a.blocks = append(a.blocks, b)
		if a.emit != nil {
			return a.send(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_ContentBlockStart{ContentBlockStart: &llmv1.ContentBlockStart{
				Index: idx, Kind: b.kind, ToolCallId: b.id, ToolName: b.name, ToolCallIndex: b.toolIndex, OpaqueKind: b.opaqueKnd,
			}}}, false)
		}
	case codec.EventTextDelta, codec.EventReasoningDelta, codec.EventToolCallDelta:
		b := a.lookup(ev.Key)
		if b == nil {
			return decodeError("delta for block %d that is not open", ev.Key)
		}
		b.text.WriteString(ev.Text)
		if a.emit == nil || ev.Text == "" {
			return nil
		}
		idx := int32(a.indexOf(b))
		var se *llmv1.StreamResponse
		switch b.kind {
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING:
			se = &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ReasoningDelta{ReasoningDelta: &llmv1.ReasoningDelta{Index: idx, Text: ev.Text}}}
		case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL:
			se = &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ToolCallDelta{ToolCallDelta: &llmv1.ToolCallDelta{
				Index: idx, ToolCallIndex: b.toolIndex, Id: b.id, Name: b.name, ArgumentsDelta: ev.Text,
			}}}
		default:
			se = &llmv1.StreamResponse{Event: &llmv1.StreamResponse_TextDelta{TextDelta: &llmv1.TextDelta{Index: idx, Text: ev.Text}}}
		}
		return a.send(se, true)
	case codec.EventSignature:
		b := a.lookup(ev.Key)
		if b == nil {
			return decodeError("signature for block %d that is not open", ev.Key)
		}
		b.signature = ev.Signature
		b.redacted = b.redacted || ev.Redacted
	case codec.EventBlockEnd:
		b := a.lookup(ev.Key)
		if b == nil {
			return decodeError("end of block %d that is not open", ev.Key)
		}
		if ev.Opaque != "" {
			b.opaque = ev.Opaque
		}
		return a.end(b)
	case codec.EventUsage:
		mergeUsage(&a.usage, ev.Usage)
		a.sawUsage = true
		if a.emit != nil {
			return a.send(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_Usage{Usage: protoUsage(a.usage)}}, false)
		}
	case codec.EventFinish:
		a.finish, a.rawFinish = ev.Finish, ev.RawFinish
	}
	return nil
}

func (a *assembler) indexOf(b *block) int {
	for i := len(a.blocks) - 1; i >= 0; i-- {
		if a.blocks[i] == b {
			return i
		}
	}
	return -1
}

// end completes a block: builds its part and emits content_block_end.
func (a *assembler) end(b *block) error {
	b.ended = true
	provider := a.route.Provider.GetProviderId()
	text := b.text.String()
	switch b.kind {
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING:
		// Only the codec's flag says redacted: signed reasoning without text
		// (Anthropic display "omitted") must replay as signed reasoning.
		r := &llmv1.ReasoningPart{Text: text, Signature: b.signature, Redacted: b.redacted}
		if b.signature != "" {
			r.SignatureOrigin = provider
		}
		b.part = &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: r}}
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL:
		if strings.TrimSpace(text) == "" {
			text = "{}" // a call without arguments still has an arguments object
		}
		tc := &llmv1.ToolCall{Id: b.id, Name: b.name, Arguments: text, Signature: b.signature}
		if tc.Id == "" {
			tc.Id = "call_" + randomID()
		}
		if b.signature != "" {
			tc.SignatureOrigin = provider
		}
		b.part = &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: tc}}
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE:
		data := b.opaque
		if a.seal != nil {
			data = a.seal(b.opaqueKnd, data)
		}
		b.part = &llmv1.ContentPart{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: b.opaqueKnd, Data: data}}}
	default:
		t := &llmv1.TextPart{Text: text, Signature: b.signature}
		if b.signature != "" {
			t.SignatureOrigin = provider
		}
		b.part = &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: t}}
	}
	if a.emit == nil {
		return nil
	}
	// An opaque part or a tool call with no deltas is output in itself.
	show := b.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE || b.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL || b.text.Len() > 0
	return a.send(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_ContentBlockEnd{ContentBlockEnd: &llmv1.ContentBlockEnd{
		Index: int32(a.indexOf(b)), Part: b.part,
	}}}, show)
}

// complete closes the blocks the codec left open and returns the final
// Response. Tool calls of a LENGTH or INCOMPLETE turn are suppressed.
func (a *assembler) complete() (*llmv1.Response, error) {
	for _, b := range a.blocks {
		if !b.ended {
			if err := a.end(b); err != nil {
				return nil, err
			}
		}
	}
	resp := a.response(true)
	resp.Warnings = append(resp.Warnings, a.warnings...)
	if resp.FinishReason == llmv1.FinishReason_FINISH_REASON_UNSPECIFIED {
		resp.FinishReason = llmv1.FinishReason_FINISH_REASON_STOP
		for _, p := range resp.Parts {
			if p.GetToolCall() != nil {
				resp.FinishReason = llmv1.FinishReason_FINISH_REASON_TOOL_CALLS
			}
		}
	}
	if f := resp.FinishReason; f == llmv1.FinishReason_FINISH_REASON_LENGTH || f == llmv1.FinishReason_FINISH_REASON_INCOMPLETE {
		kept := resp.Parts[:0]
		for _, p := range resp.Parts {
			if tc := p.GetToolCall(); tc != nil {
				resp.SuppressedToolCalls = append(resp.SuppressedToolCalls, tc)
				continue
			}
			kept = append(kept, p)
		}
		resp.Parts = kept
		if n := len(resp.SuppressedToolCalls); n > 0 {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("%d tool call(s) suppressed: the turn ended unfinished (%s)", n, resp.FinishReason))
		}
	}
	return resp, nil
}

// partial is the Response of a failed stream: complete parts only, finish
// reason unspecified, usage and cost known so far.
func (a *assembler) partial() *llmv1.Response { return a.response(false) }

func (a *assembler) response(final bool) *llmv1.Response {
	resp := &llmv1.Response{
		Id:         a.responseID(),
		ModelId:    a.route.Model.GetModelId(),
		ProviderId: a.route.Provider.GetProviderId(),
		Usage:      protoUsage(a.usage),
		Cost:       cost(a.route.Model.GetPricing(), a.usage),
	}
	if final {
		resp.FinishReason, resp.RawFinishReason = a.finish, a.rawFinish
	}
	for _, b := range a.blocks {
		if b.ended {
			resp.Parts = append(resp.Parts, b.part)
		}
	}
	return resp
}

// mergeUsage applies a cumulative usage update field by field.
func mergeUsage(dst *codec.Usage, u codec.Usage) {
	set := func(d *int64, v int64) {
		if v != 0 {
			*d = v
		}
	}
	set(&dst.Input, u.Input)
	set(&dst.Output, u.Output)
	set(&dst.Reasoning, u.Reasoning)
	set(&dst.CacheRead, u.CacheRead)
	set(&dst.CacheWrite, u.CacheWrite)
}

func protoUsage(u codec.Usage) *llmv1.Usage {
	return &llmv1.Usage{InputTokens: u.Input, OutputTokens: u.Output, ReasoningTokens: u.Reasoning, CacheReadTokens: u.CacheRead, CacheWriteTokens: u.CacheWrite}
}

// cost prices usage from the catalog, each component rounded to the nearest
// micro-dollar; nil when the model has no pricing.
func cost(p *llmv1.Pricing, u codec.Usage) *llmv1.Cost {
	if p == nil {
		return nil
	}
	part := func(tokens, perMillion int64) int64 { return (tokens*perMillion + 500_000) / 1_000_000 }
	c := &llmv1.Cost{
		InputUsdMicros:      part(u.Input, p.GetInputUsdMicrosPerMillion()),
		OutputUsdMicros:     part(u.Output, p.GetOutputUsdMicrosPerMillion()),
		CacheReadUsdMicros:  part(u.CacheRead, p.GetCacheReadUsdMicrosPerMillion()),
		CacheWriteUsdMicros: part(u.CacheWrite, p.GetCacheWriteUsdMicrosPerMillion()),
		Source:              llmv1.CostSource_COST_SOURCE_CATALOG,
	}
	c.TotalUsdMicros = c.InputUsdMicros + c.OutputUsdMicros + c.CacheReadUsdMicros + c.CacheWriteUsdMicros
	return c
}
