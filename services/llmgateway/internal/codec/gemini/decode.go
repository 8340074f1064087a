package gemini

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/sse"
)

const noBlock = -1

// state turns GenerateContentResponse chunks into events. Every streamed
// chunk is a whole response holding the next parts; a non-streamed
// response is one chunk.
type state struct {
	pend       []codec.Event
	head       int
	started    bool
	open       int // key of the open text or reasoning block, or noBlock
	openKind   llmv1.ContentBlockKind
	nextKey    int
	calls      int // tool calls so far: the ordinal of synthesized ids
	respID     string
	idStem     string
	finished   bool // finishReason or blockReason seen: the end marker
	finish     llmv1.FinishReason
	rawFinish  string
	usage      codec.Usage
	haveUsage  bool
	scratch    []byte
	textBuf    []byte
	signedOpen bool
}

func newState() state { return state{open: noBlock} }

func (s *state) push() *codec.Event {
	s.pend = append(s.pend, codec.Event{})
	return &s.pend[len(s.pend)-1]
}

func decodeErr(err error, data []byte) *codec.Error {
	if len(data) > 200 {
		data = data[:200]
	}
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: fmt.Sprintf("gemini: malformed stream chunk (%v): %s", err, data)}
}

// chunk decodes one GenerateContentResponse.
func (s *state) chunk(data []byte) error {
	var candidates, usage, model, respID, feedback, errv []byte
	err := jsonscan.Object(data, func(k, v []byte) error {
		switch string(k) {
		case "candidates":
			candidates = v
		case "usageMetadata":
			usage = v
		case "modelVersion":
			model = v
		case "responseId":
			respID = v
		case "promptFeedback":
			feedback = v
		case "error":
			errv = v
		}
		return nil
	})
	if err != nil {
		return decodeErr(err, data)
	}
	if errv != nil {
		return bodyError(0, errv)
	}
	if !s.started {
		s.started = true
		ev := s.push()
		ev.Type = codec.EventStart
		if ev.ResponseID, err = str(&s.scratch, respID); err != nil {
			return decodeErr(err, data)
		}
		if ev.Model, err = str(&s.scratch, model); err != nil {
			return decodeErr(err, data)
		}
		s.respID = ev.ResponseID
	}
	if candidates != nil && !jsonscan.IsNull(candidates) {
		first := true
		err := jsonscan.Array(candidates, func(c []byte) error {
			if !first {
				return nil // one candidate is asked for; ignore others
			}
			first = false
			return s.candidate(c)
		})
		if err != nil {
			var ce *codec.Error
			if errors.As(err, &ce) {
				return err
			}
			return decodeErr(err, data)
		}
	}
	if feedback != nil && !s.finished {
		var reason []byte
		if err := jsonscan.Object(feedback, func(k, v []byte) error {
			if string(k) == "blockReason" {
				reason = v
			}
			return nil
		}); err != nil {
			return decodeErr(err, data)
		}
		if reason != nil && !jsonscan.IsNull(reason) {
			raw, err := jsonscan.String(&s.scratch, reason)
			if err != nil {
				return decodeErr(err, data)
			}
			s.finished, s.finish, s.rawFinish = true, llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, raw
		}
	}
	if usage != nil && !jsonscan.IsNull(usage) {
		u, err := parseUsage(usage)
		if err != nil {
			return decodeErr(err, data)
		}
		if !s.haveUsage || u != s.usage {
			s.usage, s.haveUsage = u, true
			ev := s.push()
			ev.Type, ev.Usage = codec.EventUsage, u
		}
	}
	if s.finished {
		s.closeOpen()
	}
	return nil
}

func (s *state) candidate(c []byte) error {
	var content, finish []byte
	if err := jsonscan.Object(c, func(k, v []byte) error {
		switch string(k) {
		case "content":
			content = v
		case "finishReason":
			finish = v
		}
		return nil
	}); err != nil {
		return err
	}
	if content != nil && !jsonscan.IsNull(content) {
		var parts []byte
		if err := jsonscan.Object(content, func(k, v []byte) error {
			if string(k) == "parts" {
				parts = v
			}
			return nil
		}); err != nil {
			return err
		}
		if parts != nil && !jsonscan.IsNull(parts) {
			if err := jsonscan.Array(parts, s.part); err != nil {
				return err
			}
		}
	}
	if finish != nil && !jsonscan.IsNull(finish) {
		raw, err := jsonscan.String(&s.scratch, finish)
		if err != nil {
			return err
		}
		s.finished, s.rawFinish, s.finish = true, raw, finishReason(raw)
	}
	return nil
}

func (s *state) closeOpen() {
	if s.open == noBlock {
		return
	}
	ev := s.push()
	ev.Type, ev.Key = codec.EventBlockEnd, s.open
	s.open = noBlock
}

func (s *state) openBlock(kind llmv1.ContentBlockKind) int {
	s.closeOpen()
	key := s.nextKey
	s.nextKey++
	ev := s.push()
	ev.Type, ev.Key, ev.Kind = codec.EventBlockStart, key, kind
	return key
}

// part decodes one Part: the hot path is a text part, one allocation (the
// text) per delta.
func (s *state) part(p []byte) error {
	var text, thought, sig, call []byte
	other := false
	if err := jsonscan.Object(p, func(k, v []byte) error {
		switch string(k) {
		case "text":
			text = v
		case "thought":
			thought = v
		case "thoughtSignature":
			sig = v
		case "functionCall":
			call = v
		default:
			other = true
		}
		return nil
	}); err != nil {
		return err
	}
	if call != nil {
		return s.functionCall(call, sig)
	}
	if other && text == nil {
		// inlineData, executableCode, codeExecutionResult...: kept whole.
		key := s.openBlock(llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE)
		s.pend[len(s.pend)-1].OpaqueKind = opaquePrefix + "part"
		ev := s.push()
		ev.Type, ev.Key, ev.Opaque = codec.EventBlockEnd, key, string(p)
		return nil
	}
	kind := llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	deltaType := codec.EventTextDelta
	if jsonscan.Bool(thought) {
		kind, deltaType = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, codec.EventReasoningDelta
	}
	t, err := str(&s.textBuf, text)
	if err != nil {
		return err
	}
	signature, err := str(&s.scratch, sig)
	if err != nil {
		return err
	}
	if t == "" && signature == "" {
		return nil
	}
	switch {
	case s.open != noBlock && s.openKind == kind && !s.signedOpen:
	case t == "" && s.open != noBlock && !s.signedOpen:
		// A signature-only part signs the block before it, whatever its kind.
	default:
		s.open, s.openKind, s.signedOpen = s.openBlock(kind), kind, false
	}
	if t != "" {
		ev := s.push()
		ev.Type, ev.Key, ev.Text = deltaType, s.open, t
	}
	if signature != "" {
		ev := s.push()
		ev.Type, ev.Key, ev.Signature = codec.EventSignature, s.open, signature
		s.signedOpen = true
	}
	return nil
}

func (s *state) functionCall(call, sig []byte) error {
	var id, name, args []byte
	if err := jsonscan.Object(call, func(k, v []byte) error {
		switch string(k) {
		case "id":
			id = v
		case "name":
			name = v
		case "args":
			args = v
		}
		return nil
	}); err != nil {
		return err
	}
	key := s.openBlock(llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL)
	start := len(s.pend) - 1
	var err error
	if s.pend[start].ToolCallID, err = str(&s.scratch, id); err != nil {
		return err
	}
	if s.pend[start].ToolName, err = str(&s.scratch, name); err != nil {
		return err
	}
	if s.pend[start].ToolCallID == "" {
		s.pend[start].ToolCallID = s.syntheticID()
	}
	s.calls++
	a := "{}"
	if args != nil && !jsonscan.IsNull(args) {
		a = string(args)
	}
	ev := s.push()
	ev.Type, ev.Key, ev.Text = codec.EventToolCallDelta, key, a
	if sig != nil {
		signature, err := str(&s.scratch, sig)
		if err != nil {
			return err
		}
		ev := s.push()
		ev.Type, ev.Key, ev.Signature = codec.EventSignature, key, signature
	}
	ev = s.push()
	ev.Type, ev.Key = codec.EventBlockEnd, key
	return nil
}

// syntheticID makes the id of a call that came without one: unique per
// response and stable across the stream, and recognizably ours.
func (s *state) syntheticID() string {
	if s.idStem == "" {
		if s.respID != "" {
			s.idStem = s.respID
		} else {
			var b [6]byte
			_, _ = rand.Read(b[:])
			s.idStem = hex.EncodeToString(b[:])
		}
	}
	return SyntheticIDPrefix + s.idStem + "_" + strconv.Itoa(s.calls)
}

// end emits the Finish at the end of the body, or reports the truncation.
func (s *state) end() error {
	if !s.finished {
		return io.ErrUnexpectedEOF
	}
	s.closeOpen()
	f := s.finish
	if f == llmv1.FinishReason_FINISH_REASON_STOP && s.calls > 0 {
		f = llmv1.FinishReason_FINISH_REASON_TOOL_CALLS // Gemini has no tool finish
	}
	ev := s.push()
	ev.Type, ev.Finish, ev.RawFinish = codec.EventFinish, f, s.rawFinish
	return nil
}

func str(scratch *[]byte, v []byte) (string, error) {
	if v == nil {
		return "", nil
	}
	return jsonscan.String(scratch, v)
}

func parseUsage(v []byte) (codec.Usage, error) {
	var prompt, candidates, thoughts, cached, toolPrompt int64
	err := jsonscan.Object(v, func(k, val []byte) error {
		var dst *int64
		switch string(k) {
		case "promptTokenCount":
			dst = &prompt
		case "candidatesTokenCount":
			dst = &candidates
		case "thoughtsTokenCount":
			dst = &thoughts
		case "cachedContentTokenCount":
			dst = &cached
		case "toolUsePromptTokenCount":
			dst = &toolPrompt
		default:
			return nil
		}
		n, err := jsonscan.Int(val)
		*dst = n
		return err
	})
	return codec.Usage{
		Input:     max(prompt-cached, 0) + toolPrompt,
		Output:    candidates + thoughts,
		Reasoning: thoughts,
		CacheRead: cached,
	}, err
}

func finishReason(s string) llmv1.FinishReason {
	switch s {
	case "STOP":
		return llmv1.FinishReason_FINISH_REASON_STOP
	case "MAX_TOKENS":
		return llmv1.FinishReason_FINISH_REASON_LENGTH
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
		"IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER
	case "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "MISSING_THOUGHT_SIGNATURE":
		return llmv1.FinishReason_FINISH_REASON_ERROR
	}
	return llmv1.FinishReason_FINISH_REASON_OTHER
}

// streamDecoder reads streamGenerateContent?alt=sse: one whole
// GenerateContentResponse per data: line, no terminator.
type streamDecoder struct {
	sse  *sse.Reader
	st   state
	err  error
	done bool
}

func newStreamDecoder(body io.Reader) *streamDecoder {
	r := sse.NewReader(body)
	r.RawJSON = true // a bare JSON line reports an error mid-stream
	return &streamDecoder{sse: r, st: newState()}
}

// Next implements codec.Decoder.
func (d *streamDecoder) Next(ev *codec.Event) error {
	for {
		if d.st.head < len(d.st.pend) {
			*ev = d.st.pend[d.st.head]
			d.st.head++
			if d.st.head == len(d.st.pend) {
				d.st.pend, d.st.head = d.st.pend[:0], 0
			}
			return nil
		}
		if d.err != nil {
			return d.err
		}
		if d.done {
			d.err = io.EOF
			continue
		}
		event, data, err := d.sse.Next()
		if err != nil {
			switch {
			case err == io.EOF:
				d.done = true
				if err := d.st.end(); err != nil {
					d.err = err
				}
			case errors.Is(err, io.ErrUnexpectedEOF):
				d.err = io.ErrUnexpectedEOF
			default:
				d.err = fmt.Errorf("gemini: read stream: %w", err)
			}
			continue
		}
		if string(event) == string(sse.RawEvent) {
			d.err = rawLineError(data)
			continue
		}
		if err := d.st.chunk(data); err != nil {
			d.err = err
		}
	}
}

// rawLineError decodes a bare {"error":{...}} line (or [{"error":...}]).
func rawLineError(data []byte) error {
	var errv []byte
	obj := data
	if len(data) > 0 && data[0] == '[' {
		_ = jsonscan.Array(data, func(v []byte) error {
			if obj == nil || obj[0] == '[' {
				obj = v
			}
			return nil
		})
	}
	if err := jsonscan.Object(obj, func(k, v []byte) error {
		if string(k) == "error" {
			errv = v
		}
		return nil
	}); err != nil || errv == nil {
		return decodeErr(errors.New("a line that is neither data nor an error"), data)
	}
	return bodyError(0, errv)
}

// DecodeResponse implements codec.Codec for generateContent.
func (geminiCodec) DecodeResponse(body io.Reader, emit func(*codec.Event) error) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("gemini: read response: %w", err)
	}
	s := newState()
	if err := s.chunk(data); err != nil {
		var ce *codec.Error
		if errors.As(err, &ce) && ce.Kind == llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE {
			ce.Kind = llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE
		}
		return err
	}
	if err := s.end(); err != nil {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: "gemini: response has no finishReason"}
	}
	for i := range s.pend {
		if err := emit(&s.pend[i]); err != nil {
			return err
		}
	}
	return nil
}
