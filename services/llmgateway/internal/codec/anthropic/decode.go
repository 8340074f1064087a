package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/sse"
)

// blockState tracks one content block of the stream by its wire index,
// which counts blocks of every type (the codec uses it as the event Key;
// the core assigns dense indexes and tool ordinals).
type blockState struct {
	kind    llmv1.ContentBlockKind
	open    bool
	hasArgs bool   // a tool_use block got a non-empty input fragment
	raw     []byte // an opaque block's content_block JSON
	input   []byte // an opaque block's streamed input_json_delta
}

// streamDecoder decodes the Messages SSE stream:
// message_start, (content_block_start, content_block_delta*,
// content_block_stop)*, message_delta+, message_stop; ping and unknown
// events are skipped.
type streamDecoder struct {
	sse     *sse.Reader
	pend    [4]codec.Event // events decoded but not yet returned
	head, n int
	blocks  []blockState
	stopped bool // message_stop seen
	err     error
	scratch []byte
}

func newStreamDecoder(body io.Reader) *streamDecoder {
	return &streamDecoder{sse: sse.NewReader(body)}
}

func (d *streamDecoder) push() *codec.Event {
	ev := &d.pend[(d.head+d.n)%len(d.pend)]
	*ev = codec.Event{}
	d.n++
	return ev
}

// Next implements codec.Decoder.
func (d *streamDecoder) Next(ev *codec.Event) error {
	for {
		if d.n > 0 {
			*ev = d.pend[d.head]
			d.head = (d.head + 1) % len(d.pend)
			d.n--
			return nil
		}
		if d.err != nil {
			return d.err
		}
		_, data, err := d.sse.Next()
		if err != nil {
			switch {
			case err == io.EOF && d.stopped:
				d.err = io.EOF
			case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
				d.err = io.ErrUnexpectedEOF
			default:
				d.err = fmt.Errorf("anthropic: read stream: %w", err)
			}
			continue
		}
		if d.stopped {
			continue // nothing is defined after message_stop; ignore it
		}
		if err := d.handle(data); err != nil {
			d.err = err
		}
	}
}

func decodeErr(err error, data []byte) *codec.Error {
	const max = 200
	if len(data) > max {
		data = data[:max]
	}
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: fmt.Sprintf("anthropic: malformed stream event (%v): %s", err, data)}
}

func (d *streamDecoder) block(i int64) *blockState {
	if i < 0 || i >= int64(len(d.blocks)) {
		return nil
	}
	return &d.blocks[i]
}

func (d *streamDecoder) handle(data []byte) error {
	var typ, index, delta, cb, message, usage, errv []byte
	err := jsonscan.Object(data, func(k, v []byte) error {
		switch string(k) {
		case "type":
			typ = v
		case "index":
			index = v
		case "delta":
			delta = v
		case "content_block":
			cb = v
		case "message":
			message = v
		case "usage":
			usage = v
		case "error":
			errv = v
		}
		return nil
	})
	if err != nil {
		return decodeErr(err, data)
	}
	t, err := jsonscan.Unquoted(d.scratch, typ)
	if err != nil {
		return decodeErr(err, data)
	}
	switch string(t) {
	case "content_block_delta":
		i, err := jsonscan.Int(index)
		if err != nil {
			return decodeErr(err, data)
		}
		if err := d.delta(i, delta); err != nil {
			return decodeErr(err, data)
		}
	case "content_block_start":
		i, err := jsonscan.Int(index)
		if err != nil || i < 0 || i > 1<<16 {
			return decodeErr(fmt.Errorf("bad index %s", index), data)
		}
		for int64(len(d.blocks)) <= i {
			d.blocks = append(d.blocks, blockState{})
		}
		st, err := startBlock(int(i), cb, &d.scratch, func() *codec.Event { return d.push() })
		if err != nil {
			return decodeErr(err, data)
		}
		d.blocks[i] = st
	case "content_block_stop":
		i, err := jsonscan.Int(index)
		if err != nil {
			return decodeErr(err, data)
		}
		b := d.block(i)
		if b == nil || !b.open {
			return nil
		}
		b.open = false
		if b.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL && !b.hasArgs {
			// A call with no arguments streams only partial_json "": its
			// arguments are the empty object, never empty text.
			ev := d.push()
			ev.Type, ev.Key, ev.Text = codec.EventToolCallDelta, int(i), "{}"
		}
		ev := d.push()
		ev.Type, ev.Key = codec.EventBlockEnd, int(i)
		if b.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE {
			ev.Opaque = opaqueJSON(b.raw, b.input)
		}
	case "message_start":
		return d.messageStart(message, data)
	case "message_delta":
		if usage != nil && !jsonscan.IsNull(usage) {
			u, err := parseUsage(usage)
			if err != nil {
				return decodeErr(err, data)
			}
			ev := d.push()
			ev.Type, ev.Usage = codec.EventUsage, u
		}
		var stop []byte
		if delta != nil {
			if err := jsonscan.Object(delta, func(k, v []byte) error {
				if string(k) == "stop_reason" {
					stop = v
				}
				return nil
			}); err != nil {
				return decodeErr(err, data)
			}
		}
		if stop != nil && !jsonscan.IsNull(stop) {
			raw, err := jsonscan.String(&d.scratch, stop)
			if err != nil {
				return decodeErr(err, data)
			}
			ev := d.push()
			ev.Type, ev.Finish, ev.RawFinish = codec.EventFinish, finishReason(raw), raw
		}
	case "message_stop":
		d.stopped = true
	case "error":
		return streamError(errv, data)
	}
	// ping and event types added after this codec was written are skipped.
	return nil
}

func (d *streamDecoder) messageStart(message, data []byte) error {
	var id, model, usage []byte
	if message == nil {
		return decodeErr(errors.New("message_start without message"), data)
	}
	if err := jsonscan.Object(message, func(k, v []byte) error {
		switch string(k) {
		case "id":
			id = v
		case "model":
			model = v
		case "usage":
			usage = v
		}
		return nil
	}); err != nil {
		return decodeErr(err, data)
	}
	ev := d.push()
	ev.Type = codec.EventStart
	var err error
	if ev.ResponseID, err = str(&d.scratch, id); err != nil {
		return decodeErr(err, data)
	}
	if ev.Model, err = str(&d.scratch, model); err != nil {
		return decodeErr(err, data)
	}
	if usage != nil && !jsonscan.IsNull(usage) {
		u, err := parseUsage(usage)
		if err != nil {
			return decodeErr(err, data)
		}
		ev := d.push()
		ev.Type, ev.Usage = codec.EventUsage, u
	}
	return nil
}

func str(scratch *[]byte, v []byte) (string, error) {
	if v == nil {
		return "", nil
	}
	return jsonscan.String(scratch, v)
}

// delta decodes a content_block_delta's delta into an event: the hot path,
// one allocation (the text) per text delta.
func (d *streamDecoder) delta(i int64, delta []byte) error {
	b := d.block(i)
	if b == nil || !b.open {
		return fmt.Errorf("delta for block %d that is not open", i)
	}
	var typ, text []byte
	if err := jsonscan.Object(delta, func(k, v []byte) error {
		switch string(k) {
		case "type":
			typ = v
		case "text", "thinking", "partial_json", "signature":
			text = v
		}
		return nil
	}); err != nil {
		return err
	}
	var et codec.EventType
	switch {
	case jsonscan.Equal(typ, "text_delta"):
		et = codec.EventTextDelta
	case jsonscan.Equal(typ, "thinking_delta"):
		et = codec.EventReasoningDelta
	case jsonscan.Equal(typ, "signature_delta"):
		et = codec.EventSignature
	case jsonscan.Equal(typ, "input_json_delta"):
		if b.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE {
			frag, err := jsonscan.Unquoted(d.scratch, text)
			if err != nil {
				return err
			}
			b.input = append(b.input, frag...)
			return nil
		}
		et = codec.EventToolCallDelta
	default:
		return nil // citations_delta and future deltas carry nothing we keep
	}
	if text == nil {
		return fmt.Errorf("%s without its text", typ)
	}
	s, err := jsonscan.String(&d.scratch, text)
	if err != nil {
		return err
	}
	if s == "" && et != codec.EventSignature {
		return nil // e.g. the empty partial_json that opens every tool_use
	}
	if et == codec.EventToolCallDelta {
		b.hasArgs = true
	}
	ev := d.push()
	ev.Type, ev.Key = et, int(i)
	if et == codec.EventSignature {
		ev.Signature = s
	} else {
		ev.Text = s
	}
	return nil
}

// startBlock emits the events that open content block cb (a
// content_block_start's block, or a whole block of a non-streamed message,
// whose content follows from emitWhole).
func startBlock(key int, cb []byte, scratch *[]byte, push func() *codec.Event) (blockState, error) {
	var typ, id, name, data []byte
	if err := jsonscan.Object(cb, func(k, v []byte) error {
		switch string(k) {
		case "type":
			typ = v
		case "id":
			id = v
		case "name":
			name = v
		case "data":
			data = v
		}
		return nil
	}); err != nil {
		return blockState{}, err
	}
	t, err := jsonscan.String(scratch, typ)
	if err != nil {
		return blockState{}, err
	}
	st := blockState{open: true}
	ev := push()
	ev.Type, ev.Key = codec.EventBlockStart, key
	switch t {
	case "text":
		st.kind = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	case "thinking":
		st.kind = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	case "redacted_thinking":
		st.kind = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
		ev.Redacted = true
		sig, err := str(scratch, data)
		if err != nil {
			return blockState{}, err
		}
		sev := push()
		sev.Type, sev.Key, sev.Signature, sev.Redacted = codec.EventSignature, key, sig, true
	case "tool_use":
		st.kind = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL
		if ev.ToolCallID, err = str(scratch, id); err != nil {
			return blockState{}, err
		}
		if ev.ToolName, err = str(scratch, name); err != nil {
			return blockState{}, err
		}
	default:
		st.kind = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE
		ev.OpaqueKind = opaquePrefix + t
		st.raw = append([]byte(nil), cb...)
	}
	ev.Kind = st.kind
	return st, nil
}

// opaqueJSON is an opaque block's JSON with its streamed input, if any,
// put in place of the placeholder input of content_block_start.
func opaqueJSON(raw, input []byte) string {
	if len(input) == 0 {
		return string(raw)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || !json.Valid(input) {
		return string(raw)
	}
	m["input"] = json.RawMessage(input)
	b, err := json.Marshal(m)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// parseUsage reads a usage object. input_tokens already excludes cache
// reads and writes on this API, so the fields map one to one; thinking
// tokens are part of output_tokens.
func parseUsage(v []byte) (codec.Usage, error) {
	var u codec.Usage
	err := jsonscan.Object(v, func(k, val []byte) error {
		var dst *int64
		switch string(k) {
		case "input_tokens":
			dst = &u.Input
		case "output_tokens":
			dst = &u.Output
		case "cache_read_input_tokens":
			dst = &u.CacheRead
		case "cache_creation_input_tokens":
			dst = &u.CacheWrite
		case "output_tokens_details":
			if jsonscan.IsNull(val) {
				return nil
			}
			return jsonscan.Object(val, func(k, val []byte) error {
				if string(k) == "thinking_tokens" {
					n, err := jsonscan.Int(val)
					u.Reasoning = n
					return err
				}
				return nil
			})
		default:
			return nil
		}
		n, err := jsonscan.Int(val)
		*dst = n
		return err
	})
	return u, err
}

// finishReason normalizes stop_reason; the raw value travels beside it.
func finishReason(s string) llmv1.FinishReason {
	switch s {
	case "end_turn", "stop_sequence":
		return llmv1.FinishReason_FINISH_REASON_STOP
	case "tool_use":
		return llmv1.FinishReason_FINISH_REASON_TOOL_CALLS
	case "max_tokens", "model_context_window_exceeded":
		return llmv1.FinishReason_FINISH_REASON_LENGTH
	case "refusal":
		return llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER
	case "pause_turn":
		return llmv1.FinishReason_FINISH_REASON_INCOMPLETE
	}
	return llmv1.FinishReason_FINISH_REASON_OTHER
}

// DecodeResponse implements codec.Codec for a non-streamed message.
func (anthropicCodec) DecodeResponse(body io.Reader, emit func(*codec.Event) error) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("anthropic: read response: %w", err)
	}
	respErr := func(err error) error {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: fmt.Sprintf("anthropic: malformed response: %v", err)}
	}
	var typ, id, model, content, stop, usage, errv []byte
	if err := jsonscan.Object(data, func(k, v []byte) error {
		switch string(k) {
		case "type":
			typ = v
		case "id":
			id = v
		case "model":
			model = v
		case "content":
			content = v
		case "stop_reason":
			stop = v
		case "usage":
			usage = v
		case "error":
			errv = v
		}
		return nil
	}); err != nil {
		return respErr(err)
	}
	if jsonscan.Equal(typ, "error") {
		return streamError(errv, data)
	}
	var scratch []byte
	var ev codec.Event
	ev.Type = codec.EventStart
	if ev.ResponseID, err = str(&scratch, id); err != nil {
		return respErr(err)
	}
	if ev.Model, err = str(&scratch, model); err != nil {
		return respErr(err)
	}
	if err := emit(&ev); err != nil {
		return err
	}
	key := 0
	var pending []codec.Event
	push := func() *codec.Event {
		pending = append(pending, codec.Event{})
		return &pending[len(pending)-1]
	}
	if content != nil && !jsonscan.IsNull(content) {
		err = jsonscan.Array(content, func(cb []byte) error {
			pending = pending[:0]
			st, err := startBlock(key, cb, &scratch, push)
			if err != nil {
				return err
			}
			if err := wholeBlock(key, st, cb, &scratch, push); err != nil {
				return err
			}
			key++
			for i := range pending {
				if err := emit(&pending[i]); err != nil {
					return emitError{err}
				}
			}
			return nil
		})
		var ee emitError
		if errors.As(err, &ee) {
			return ee.err
		}
		if err != nil {
			return respErr(err)
		}
	}
	if usage != nil && !jsonscan.IsNull(usage) {
		u, err := parseUsage(usage)
		if err != nil {
			return respErr(err)
		}
		ev = codec.Event{Type: codec.EventUsage, Usage: u}
		if err := emit(&ev); err != nil {
			return err
		}
	}
	raw, err := str(&scratch, stop)
	if err != nil {
		return respErr(err)
	}
	ev = codec.Event{Type: codec.EventFinish, Finish: finishReason(raw), RawFinish: raw}
	if raw == "" {
		ev.Finish = llmv1.FinishReason_FINISH_REASON_UNSPECIFIED
	}
	return emit(&ev)
}

// emitError marks an error from the caller's emit, passed through as is.
type emitError struct{ err error }

func (e emitError) Error() string { return e.err.Error() }

// wholeBlock emits the content and end of a complete content block.
func wholeBlock(key int, st blockState, cb []byte, scratch *[]byte, push func() *codec.Event) error {
	var text, thinking, signature, input []byte
	if err := jsonscan.Object(cb, func(k, v []byte) error {
		switch string(k) {
		case "text":
			text = v
		case "thinking":
			thinking = v
		case "signature":
			signature = v
		case "input":
			input = v
		}
		return nil
	}); err != nil {
		return err
	}
	switch st.kind {
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT:
		s, err := str(scratch, text)
		if err != nil {
			return err
		}
		if s != "" {
			ev := push()
			ev.Type, ev.Key, ev.Text = codec.EventTextDelta, key, s
		}
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING:
		if thinking != nil { // not redacted_thinking, whose data startBlock sent
			s, err := str(scratch, thinking)
			if err != nil {
				return err
			}
			if s != "" {
				ev := push()
				ev.Type, ev.Key, ev.Text = codec.EventReasoningDelta, key, s
			}
			sig, err := str(scratch, signature)
			if err != nil {
				return err
			}
			if sig != "" {
				ev := push()
				ev.Type, ev.Key, ev.Signature = codec.EventSignature, key, sig
			}
		}
	case llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL:
		args := string(input)
		if input == nil || jsonscan.IsNull(input) {
			args = "{}"
		}
		ev := push()
		ev.Type, ev.Key, ev.Text = codec.EventToolCallDelta, key, args
	}
	ev := push()
	ev.Type, ev.Key = codec.EventBlockEnd, key
	if st.kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE {
		ev.Opaque = string(cb)
	}
	return nil
}
