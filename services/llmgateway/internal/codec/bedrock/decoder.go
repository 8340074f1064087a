package bedrock

import (
	"errors"
	"fmt"
	"io"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
)

// OpaqueKind is the kind of the opaque blocks this codec emits: the raw
// Converse ContentBlock JSON of blocks with no neutral form (citations,
// guard content ...), replayed untouched by NewRequest.
const OpaqueKind = "bedrock.content"

// block is the decoder's view of one contentBlockIndex.
type block struct {
	kind     llmv1.ContentBlockKind // 0: not open
	closed   bool
	ignored  bool   // a start we do not surface (server tool results, images)
	redacted []byte // redactedContent gathered so far
}

// decoder reads a ConverseStream body. It keeps per-stream state small and
// reuses every buffer, so a text delta costs the delta's string alone.
type decoder struct {
	fr      frameReader
	js      jsonscan.Scanner
	f       frame
	blocks  []block
	pending []codec.Event // events owed before reading the next frame
	head    int

	stopped  bool // messageStop seen
	metadata bool // metadata seen
	err      error
}

func newDecoder(body io.Reader) *decoder {
	return &decoder{fr: frameReader{r: body}}
}

// push queues an event to hand out on a later Next.
func (d *decoder) push() *codec.Event {
	if d.head == len(d.pending) {
		d.pending, d.head = d.pending[:0], 0
	}
	d.pending = append(d.pending, codec.Event{})
	return &d.pending[len(d.pending)-1]
}

// Next implements codec.Decoder.
func (d *decoder) Next(ev *codec.Event) error {
	for {
		if d.head < len(d.pending) {
			*ev = d.pending[d.head]
			d.pending[d.head] = codec.Event{}
			d.head++
			return nil
		}
		if d.err != nil {
			return d.err
		}
		if err := d.fr.next(&d.f); err != nil {
			d.err = d.readErr(err)
			continue
		}
		ev.Reset()
		ok, err := d.handle(ev)
		if err != nil {
			d.err = err
			continue
		}
		if ok {
			return nil
		}
	}
}

// readErr turns a frame read failure into the decoder's terminal error.
func (d *decoder) readErr(err error) error {
	switch {
	case err == io.EOF && d.stopped && d.metadata:
		return io.EOF
	case err == io.EOF:
		// The body ended between frames but before the provider's end:
		// a truncated stream must never pass for a complete one.
		return fmt.Errorf("bedrock: stream ended before messageStop and metadata: %w", io.ErrUnexpectedEOF)
	case errors.Is(err, errFrame):
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: "bedrock: " + err.Error()}
	}
	return fmt.Errorf("bedrock: read stream: %w", err)
}

func decodeErr(what string) error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: "bedrock: malformed " + what + " event"}
}

// handle decodes the current frame into ev (and possibly pending events),
// reporting whether ev was filled.
func (d *decoder) handle(ev *codec.Event) (bool, error) {
	f := &d.f
	switch string(f.messageType) {
	case "event":
	case "exception":
		return false, streamException(string(f.exceptionType), f.payload)
	case "error":
		return false, &codec.Error{
			Kind:    classify(string(f.errorCode), 0, string(f.errorMessage)),
			Message: "bedrock: " + string(f.errorMessage),
			Code:    string(f.errorCode),
		}
	default:
		return false, &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: fmt.Sprintf("bedrock: unknown :message-type %q", f.messageType)}
	}
	d.js.Reset(f.payload)
	switch string(f.eventType) {
	case "messageStart":
		ev.Type = codec.EventStart
		return true, nil
	case "contentBlockStart":
		return d.blockStart(ev)
	case "contentBlockDelta":
		return d.blockDelta(ev)
	case "contentBlockStop":
		return d.blockStop(ev)
	case "messageStop":
		return d.messageStop(ev)
	case "metadata":
		return d.metadataEvent(ev)
	}
	// Unknown future event types are ignored, never fatal.
	return false, nil
}

// block returns the state of contentBlockIndex i, growing the table.
func (d *decoder) block(i int64) (*block, bool) {
	if i < 0 || i > 1<<16 {
		return nil, false
	}
	for int(i) >= len(d.blocks) {
		d.blocks = append(d.blocks, block{})
	}
	return &d.blocks[i], true
}

func (d *decoder) blockStart(ev *codec.Event) (bool, error) {
	s := &d.js
	idx := int64(-1)
	var id, name string
	tool, other := false, false
	if !object(s) {
		return false, decodeErr("contentBlockStart")
	}
	for s.More() {
		k := s.Key()
		switch string(k) {
		case "contentBlockIndex":
			idx = s.Int()
		case "start":
			if !object(s) {
				continue
			}
			for s.More() {
				k := s.Key()
				if string(k) != "toolUse" {
					other = true
					s.Skip()
					continue
				}
				tool = true
				if !object(s) {
					continue
				}
				for s.More() {
					k := s.Key()
					switch string(k) {
					case "toolUseId":
						id = string(str(s))
					case "name":
						name = string(str(s))
					default:
						s.Skip()
					}
				}
			}
		default:
			s.Skip()
		}
	}
	s.End()
	b, ok := d.block(idx)
	if s.Err() != nil || !ok {
		return false, decodeErr("contentBlockStart")
	}
	if !tool {
		b.ignored = other
		return false, nil
	}
	b.kind = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL
	ev.Type = codec.EventBlockStart
	ev.Key = int(idx)
	ev.Kind = b.kind
	ev.ToolCallID = id
	ev.ToolName = name
	return true, nil
}

// Delta members we surface.
const (
	deltaNone = iota
	deltaText
	deltaToolInput
	deltaReasoningText
	deltaSignature
	deltaRedacted
)

func (d *decoder) blockDelta(ev *codec.Event) (bool, error) {
	s := &d.js
	idx := int64(-1)
	kind := deltaNone
	var text string
	if !object(s) {
		return false, decodeErr("contentBlockDelta")
	}
	for s.More() {
		k := s.Key()
		switch string(k) {
		case "contentBlockIndex":
			idx = s.Int()
		case "delta":
			if !object(s) {
				continue
			}
			for s.More() {
				k := s.Key()
				switch string(k) {
				case "text":
					kind, text = deltaText, string(str(s))
				case "toolUse":
					if !object(s) {
						continue
					}
					for s.More() {
						k := s.Key()
						if string(k) == "input" {
							kind, text = deltaToolInput, string(str(s))
						} else {
							s.Skip()
						}
					}
				case "reasoningContent":
					if !object(s) {
						continue
					}
					for s.More() {
						k := s.Key()
						switch string(k) {
						case "text":
							kind, text = deltaReasoningText, string(str(s))
						case "signature":
							kind, text = deltaSignature, string(str(s))
						case "redactedContent":
							// Kept as the base64 text it arrives in.
							kind, text = deltaRedacted, string(str(s))
						default:
							s.Skip()
						}
					}
				default:
					// citation, toolResult, image and future members.
					s.Skip()
				}
			}
		default:
			s.Skip()
		}
	}
	s.End()
	b, ok := d.block(idx)
	if s.Err() != nil || !ok {
		return false, decodeErr("contentBlockDelta")
	}
	if kind == deltaNone || b.ignored || b.closed {
		return false, nil
	}
	key := int(idx)
	var want llmv1.ContentBlockKind
	switch kind {
	case deltaText:
		want = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	case deltaToolInput:
		if b.kind != llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL {
			return false, decodeErr("contentBlockDelta (toolUse input without toolUse start)")
		}
		want = b.kind
	case deltaReasoningText, deltaSignature:
		want = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	case deltaRedacted:
		// Redacted reasoning is a reasoning block marked Redacted whose
		// signature is the base64 redactedContent (ReasoningPart's
		// contract); it may arrive in several deltas, so the signature
		// carries everything gathered so far.
		b.redacted = append(b.redacted, text...)
		text = string(b.redacted)
		want = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	}
	// Text and reasoning blocks have no contentBlockStart: the first delta
	// opens them.
	out := ev
	if b.kind == 0 {
		b.kind = want
		ev.Type, ev.Key, ev.Kind = codec.EventBlockStart, key, want
		out = d.push()
	}
	out.Key = key
	switch kind {
	case deltaText:
		out.Type, out.Text = codec.EventTextDelta, text
	case deltaToolInput:
		out.Type, out.Text = codec.EventToolCallDelta, text
	case deltaReasoningText:
		out.Type, out.Text = codec.EventReasoningDelta, text
	case deltaSignature, deltaRedacted:
		out.Type, out.Signature, out.Redacted = codec.EventSignature, text, kind == deltaRedacted
	}
	return true, nil
}

func (d *decoder) blockStop(ev *codec.Event) (bool, error) {
	s := &d.js
	idx := int64(-1)
	if !object(s) {
		return false, decodeErr("contentBlockStop")
	}
	for s.More() {
		k := s.Key()
		if string(k) == "contentBlockIndex" {
			idx = s.Int()
		} else {
			s.Skip()
		}
	}
	s.End()
	b, ok := d.block(idx)
	if s.Err() != nil || !ok {
		return false, decodeErr("contentBlockStop")
	}
	if b.closed || b.kind == 0 {
		b.closed = true
		return false, nil
	}
	d.endBlock(ev, int(idx), b)
	return true, nil
}

// endBlock fills ev with block b's end.
func (d *decoder) endBlock(ev *codec.Event, key int, b *block) {
	b.closed = true
	ev.Type, ev.Key = codec.EventBlockEnd, key
	b.redacted = nil
}

func (d *decoder) messageStop(ev *codec.Event) (bool, error) {
	s := &d.js
	var raw string
	if !object(s) {
		return false, decodeErr("messageStop")
	}
	for s.More() {
		k := s.Key()
		if string(k) == "stopReason" {
			raw = stopReasonString(str(s))
		} else {
			s.Skip()
		}
	}
	s.End()
	if s.Err() != nil {
		return false, decodeErr("messageStop")
	}
	d.stopped = true
	// Blocks the provider left open are closed before the finish, so the
	// assembler never sees a finish with a block still open.
	for i := range d.blocks {
		if b := &d.blocks[i]; b.kind != 0 && !b.closed {
			d.endBlock(d.push(), i, b)
		}
	}
	fin := d.push()
	fin.Type, fin.Finish, fin.RawFinish = codec.EventFinish, finishReason(raw), raw
	*ev = d.pending[d.head]
	d.pending[d.head] = codec.Event{}
	d.head++
	return true, nil
}

func (d *decoder) metadataEvent(ev *codec.Event) (bool, error) {
	s := &d.js
	var u wireUsage
	if !object(s) {
		return false, decodeErr("metadata")
	}
	for s.More() {
		k := s.Key()
		if string(k) != "usage" {
			s.Skip()
			continue
		}
		if !object(s) {
			continue
		}
		for s.More() {
			k := s.Key()
			switch string(k) {
			case "inputTokens":
				u.InputTokens = s.Int()
			case "outputTokens":
				u.OutputTokens = s.Int()
			case "totalTokens":
				u.TotalTokens = s.Int()
			case "cacheReadInputTokens":
				u.CacheReadInputTokens = s.Int()
			case "cacheWriteInputTokens":
				u.CacheWriteInputTokens = s.Int()
			default:
				s.Skip()
			}
		}
	}
	s.End()
	if s.Err() != nil {
		return false, decodeErr("metadata")
	}
	d.metadata = true
	ev.Type, ev.Usage = codec.EventUsage, u.normalize()
	return true, nil
}

// object enters an object if one is next; anything else (null included) is
// skipped and reports false.
func object(s *jsonscan.Scanner) bool {
	if s.Peek() == '{' {
		return s.Object()
	}
	s.Skip()
	return false
}

// str reads a string value; a null reads as empty.
func str(s *jsonscan.Scanner) []byte {
	if s.Null() {
		return nil
	}
	return s.String()
}
