package openairesponses

import (
	"io"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/sse"
)

// decoder reads a Responses event stream. Output items are addressed by
// output_index, which counts every item (reasoning, message, function
// call); a block is one (output_index, part) pair with its own key. A
// reasoning item yields its summary parts as reasoning blocks and then the
// whole item, encrypted_content included, as an opaque block.
type decoder struct {
	sse *sse.Reader
	sc  jsonscan.Scanner
	q   []codec.Event
	qi  int
	err error

	started bool
	nextKey int
	blocks  []block
	tools   bool // a function_call item was seen
	refused bool
	typ     []byte // the event type when it has no event: line
}

// Sub-part kinds of a block within its output item.
const (
	subContent = iota // message content part / reasoning_text part
	subSummary        // reasoning summary part
	subItem           // the function call item itself
)

type block struct {
	out, sub, index int
	key             int
	open            bool
	args            bool // a function call got argument deltas
}

// Next implements codec.Decoder.
func (d *decoder) Next(ev *codec.Event) error {
	for d.qi >= len(d.q) {
		if d.err != nil {
			return d.err
		}
		d.q, d.qi = d.q[:0], 0
		d.err = d.read()
	}
	*ev = d.q[d.qi]
	d.qi++
	return nil
}

func (d *decoder) push(e codec.Event) {
	if !d.started {
		d.started = true
		d.q = append(d.q, codec.Event{Type: codec.EventStart})
	}
	d.q = append(d.q, e)
}

func (d *decoder) read() error {
	event, data, err := d.sse.Next()
	if err == io.EOF {
		return io.ErrUnexpectedEOF // no terminal response event
	}
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	if len(event) == 0 {
		// The event name is optional on the wire: data repeats it as type.
		event = d.typeOf(data)
	}
	s := &d.sc
	s.Reset(data)
	switch string(event) {
	case "response.output_text.delta", "response.refusal.delta":
		return d.delta(s, subContent, llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, codec.EventTextDelta, string(event) == "response.refusal.delta")
	case "response.reasoning_summary_text.delta":
		return d.delta(s, subSummary, llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, codec.EventReasoningDelta, false)
	case "response.reasoning_text.delta":
		return d.delta(s, subContent, llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, codec.EventReasoningDelta, false)
	case "response.function_call_arguments.delta", "response.function_call_arguments.done":
		return d.arguments(s, string(event) == "response.function_call_arguments.done")
	case "response.output_item.added", "response.output_item.done":
		return d.outputItem(s, string(event) == "response.output_item.done")
	case "response.created", "response.in_progress", "response.queued":
		return d.lifecycle(s, false)
	case "response.completed", "response.incomplete", "response.failed":
		return d.lifecycle(s, true)
	case "error":
		return d.streamError(s)
	}
	// Other events (part added/done, text done, annotations, built-in
	// tools, future types) carry nothing the blocks need, but must parse.
	s.Skip()
	if err := s.End(); err != nil {
		return decodeError("malformed %s event: %v", event, err)
	}
	return nil
}

// typeOf finds the "type" member of an event without an event: line.
func (d *decoder) typeOf(data []byte) []byte {
	s := &d.sc
	s.Reset(data)
	if !s.Object() {
		return nil
	}
	for s.More() {
		if string(s.Key()) == "type" {
			d.typ = append(d.typ[:0], s.String()...)
			return d.typ
		}
		s.Skip()
	}
	return nil
}

// find returns the block for (out, sub, index), opening it when asked.
func (d *decoder) find(out, sub, index int, open *codec.Event) *block {
	for i := len(d.blocks) - 1; i >= 0; i-- {
		b := &d.blocks[i]
		if b.out == out && b.sub == sub && b.index == index {
			return b
		}
	}
	if open == nil {
		return nil
	}
	open.Type, open.Key = codec.EventBlockStart, d.nextKey
	d.nextKey++
	d.push(*open)
	d.blocks = append(d.blocks, block{out: out, sub: sub, index: index, key: open.Key, open: true})
	return &d.blocks[len(d.blocks)-1]
}

// delta handles the hot text, refusal and reasoning delta events.
func (d *decoder) delta(s *jsonscan.Scanner, sub int, kind llmv1.ContentBlockKind, et codec.EventType, refusal bool) error {
	out, index := -1, 0
	var text string
	if !s.Object() {
		return decodeError("malformed delta event: %v", s.Err())
	}
	for s.More() {
		switch string(s.Key()) {
		case "output_index":
			out = int(s.Int())
		case "content_index", "summary_index":
			index = int(s.Int())
		case "delta":
			text = string(s.String())
		default:
			s.Skip()
		}
	}
	if err := s.End(); err != nil {
		return decodeError("malformed delta event: %v", err)
	}
	if refusal {
		d.refused = true
	}
	if text == "" {
		return nil
	}
	b := d.find(out, sub, index, &codec.Event{Kind: kind})
	if !b.open {
		return nil
	}
	d.push(codec.Event{Type: et, Key: b.key, Text: text})
	return nil
}

func (d *decoder) arguments(s *jsonscan.Scanner, done bool) error {
	out := -1
	var text string
	if !s.Object() {
		return decodeError("malformed arguments event: %v", s.Err())
	}
	for s.More() {
		switch string(s.Key()) {
		case "output_index":
			out = int(s.Int())
		case "delta":
			if !done {
				text = string(s.String())
			} else {
				s.Skip()
			}
		case "arguments":
			if done {
				text = string(s.String())
			} else {
				s.Skip()
			}
		default:
			s.Skip()
		}
	}
	if err := s.End(); err != nil {
		return decodeError("malformed arguments event: %v", err)
	}
	b := d.find(out, subItem, 0, nil)
	if b == nil || !b.open || text == "" || (done && b.args) {
		return nil // .done repeats the deltas; it counts only when none came
	}
	b.args = true
	d.push(codec.Event{Type: codec.EventToolCallDelta, Key: b.key, Text: text})
	return nil
}

// itemFields are the members of an output item the decoder reads.
type itemFields struct {
	typ, callID, name, args string
}

func (d *decoder) outputItem(s *jsonscan.Scanner, done bool) error {
	out := -1
	var raw []byte
	if !s.Object() {
		return decodeError("malformed output_item event: %v", s.Err())
	}
	for s.More() {
		switch string(s.Key()) {
		case "output_index":
			out = int(s.Int())
		case "item":
			raw = s.Raw()
		default:
			s.Skip()
		}
	}
	if err := s.End(); err != nil {
		return decodeError("malformed output_item event: %v", err)
	}
	var it itemFields
	var is jsonscan.Scanner
	is.Reset(raw)
	if is.Object() {
		for is.More() {
			switch string(is.Key()) {
			case "type":
				it.typ = string(is.String())
			case "call_id":
				it.callID = string(is.String())
			case "name":
				it.name = string(is.String())
			case "arguments":
				it.args = string(is.String())
			default:
				is.Skip()
			}
		}
	}
	if err := is.Err(); err != nil || raw == nil {
		return decodeError("malformed output item: %v", err)
	}
	switch it.typ {
	case "function_call":
		d.tools = true
		b := d.find(out, subItem, 0, &codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ToolCallID: it.callID, ToolName: it.name})
		if done && !b.args && len(it.args) > 0 && b.open {
			b.args = true
			d.push(codec.Event{Type: codec.EventToolCallDelta, Key: b.key, Text: it.args})
		}
	}
	if !done {
		return nil
	}
	d.endItem(out)
	if it.typ == "reasoning" {
		// The whole item, encrypted_content included, is replayed verbatim.
		key := d.nextKey
		d.nextKey++
		d.push(codec.Event{Type: codec.EventBlockStart, Key: key, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: OpaqueReasoning})
		d.push(codec.Event{Type: codec.EventBlockEnd, Key: key, Opaque: string(raw)})
	}
	return nil
}

// endItem closes the open blocks of output item out.
func (d *decoder) endItem(out int) {
	for i := range d.blocks {
		b := &d.blocks[i]
		if b.open && (b.out == out || out < 0) {
			b.open = false
			d.push(codec.Event{Type: codec.EventBlockEnd, Key: b.key})
		}
	}
}

// lifecycle reads a response.* event's response object: the start, or the
// terminal status with usage.
func (d *decoder) lifecycle(s *jsonscan.Scanner, terminal bool) error {
	var id, model, status, reason string
	var u wireUsage
	hasUsage := false
	var errObj []byte
	if !s.Object() {
		return decodeError("malformed response event: %v", s.Err())
	}
	for s.More() {
		if string(s.Key()) != "response" || s.Null() {
			s.Skip()
			continue
		}
		s.Object()
		for s.More() {
			switch string(s.Key()) {
			case "id":
				id = string(s.String())
			case "model":
				model = string(s.String())
			case "status":
				status = string(s.String())
			case "incomplete_details":
				if s.Null() {
					continue
				}
				s.Object()
				for s.More() {
					if string(s.Key()) == "reason" && !s.Null() {
						reason = string(s.String())
					} else {
						s.Skip()
					}
				}
			case "error":
				if !s.Null() {
					errObj = s.Raw()
				}
			case "usage":
				if s.Null() {
					continue
				}
				hasUsage = true
				d.usage(s, &u)
			default:
				s.Skip()
			}
		}
	}
	if err := s.End(); err != nil {
		return decodeError("malformed response event: %v", err)
	}
	if !d.started {
		d.started = true
		d.q = append(d.q, codec.Event{Type: codec.EventStart, ResponseID: id, Model: model})
	}
	if !terminal {
		return nil
	}
	d.endItem(-1)
	if status == "failed" {
		return failed(errObj)
	}
	if hasUsage {
		d.push(codec.Event{Type: codec.EventUsage, Usage: u.normalize()})
	}
	f, raw := finish(status, reason, d.tools, d.refused)
	d.push(codec.Event{Type: codec.EventFinish, Finish: f, RawFinish: raw})
	return io.EOF
}

func (d *decoder) usage(s *jsonscan.Scanner, u *wireUsage) {
	s.Object()
	for s.More() {
		switch string(s.Key()) {
		case "input_tokens":
			u.InputTokens = s.Int()
		case "output_tokens":
			u.OutputTokens = s.Int()
		case "input_tokens_details":
			detail(s, "cached_tokens", &u.InputTokensDetails.CachedTokens)
		case "output_tokens_details":
			detail(s, "reasoning_tokens", &u.OutputTokensDetails.ReasoningTokens)
		default:
			s.Skip()
		}
	}
}

func detail(s *jsonscan.Scanner, field string, dst *int64) {
	if s.Null() {
		return
	}
	s.Object()
	for s.More() {
		if string(s.Key()) == field {
			*dst = s.Int()
		} else {
			s.Skip()
		}
	}
}

// failed turns response.failed's error object into a classified error.
func failed(errObj []byte) error {
	var e openaiwire.ErrorObject
	if len(errObj) > 0 {
		_ = jsonUnmarshal(errObj, &e)
	}
	if e.Message == "" {
		e.Message = "response failed"
	}
	return e.StreamError()
}

// streamError reads an `error` event: {"type":"error","code","message",
// "param"}, or with the fields nested under "error".
func (d *decoder) streamError(s *jsonscan.Scanner) error {
	raw := s.Raw()
	if err := s.End(); err != nil {
		return decodeError("malformed error event: %v", err)
	}
	var e struct {
		openaiwire.ErrorObject
		Error *openaiwire.ErrorObject `json:"error"`
	}
	_ = jsonUnmarshal(raw, &e)
	if e.Error != nil {
		return e.Error.StreamError()
	}
	if e.Type == "error" {
		e.Type = ""
	}
	return e.ErrorObject.StreamError()
}
