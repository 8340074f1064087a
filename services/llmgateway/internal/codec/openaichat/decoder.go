package openaichat

import (
	"io"
	"strconv"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/sse"
)

// decoder reads a chat.completion.chunk stream. Chat has no block events:
// text, reasoning and each tool call (by tool_calls[].index, which counts
// tool calls only) become blocks with keys assigned here, and the open
// blocks are closed when finish_reason arrives. The finish event waits for
// `data: [DONE]`, after the usage chunk.
type decoder struct {
	sse *sse.Reader
	sc  jsonscan.Scanner
	q   []codec.Event // events decoded from the current chunk
	qi  int
	err error // terminal: io.EOF after [DONE], or the stream's failure

	started  bool
	first    bool // decoding the first chunk
	nextKey  int
	text     int // key of the open text block, -1 when none
	thinking int // key of the open reasoning block, -1 when none
	open     []int
	tools    []toolState
	finished bool
	raw      string
	idBuf    []byte // a tool call fragment's id, compared without allocating
	nameBuf  []byte

	// Per-chunk fields read before the choices are processed.
	id, model string
}

type toolState struct {
	index int
	key   int
	id    string
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
	d.ensureStart()
	d.q = append(d.q, e)
}

// ensureStart emits the start event before the first other event.
func (d *decoder) ensureStart() {
	if !d.started && !d.first {
		d.started = true
		d.q = append(d.q, codec.Event{Type: codec.EventStart, ResponseID: d.id, Model: d.model})
	}
}

// read decodes one SSE event into d.q.
func (d *decoder) read() error {
	_, data, err := d.sse.Next()
	if err == io.EOF {
		return io.ErrUnexpectedEOF // no [DONE]: truncated
	}
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	if string(data) == "[DONE]" {
		d.closeBlocks()
		d.push(codec.Event{Type: codec.EventFinish, Finish: finish(d.raw, len(d.tools) > 0), RawFinish: d.raw})
		return io.EOF
	}
	return d.chunk(data)
}

func (d *decoder) chunk(data []byte) error {
	if !d.started {
		// The start event goes first, with the id and model wherever they
		// sit in the first chunk.
		d.first = true
		defer func() {
			d.first = false
			if len(d.q) > 0 || d.id != "" || d.model != "" {
				d.started = true
				d.q = append(d.q, codec.Event{})
				copy(d.q[1:], d.q)
				d.q[0] = codec.Event{Type: codec.EventStart, ResponseID: d.id, Model: d.model}
			}
		}()
	}
	s := &d.sc
	s.Reset(data)
	if !s.Object() {
		return decodeError("malformed chunk: %v", s.Err())
	}
	for s.More() {
		switch string(s.Key()) {
		case "id":
			if v := s.String(); !d.started && d.id == "" {
				d.id = string(v)
			}
		case "model":
			if v := s.String(); !d.started && d.model == "" {
				d.model = string(v)
			}
		case "choices":
			if s.Null() {
				continue
			}
			s.Array()
			for s.More() {
				d.choice(s)
			}
		case "usage":
			if !s.Null() {
				d.usage(s)
			}
		case "error":
			if s.Null() {
				continue
			}
			return d.streamError(s)
		default:
			s.Skip()
		}
	}
	if err := s.End(); err != nil {
		return decodeError("malformed chunk: %v", err)
	}
	return nil
}

// choice decodes choices[i]; the gateway asks for n=1, so every choice is
// the first.
func (d *decoder) choice(s *jsonscan.Scanner) {
	if !s.Object() {
		return
	}
	for s.More() {
		switch string(s.Key()) {
		case "delta":
			if !s.Null() {
				d.delta(s)
			}
		case "finish_reason":
			if s.Null() {
				continue
			}
			v := s.String()
			if len(v) > 0 && !d.finished {
				d.finished = true
				d.raw = string(v)
				d.closeBlocks()
			}
		default:
			s.Skip()
		}
	}
}

func (d *decoder) delta(s *jsonscan.Scanner) {
	if !s.Object() {
		return
	}
	for s.More() {
		switch string(s.Key()) {
		case "content":
			if s.Null() {
				continue
			}
			if v := s.String(); len(v) > 0 {
				d.textDelta(string(v), false)
			}
		case "refusal":
			if s.Null() {
				continue
			}
			if v := s.String(); len(v) > 0 {
				d.textDelta(string(v), true)
			}
		case "reasoning_content", "reasoning":
			// DeepSeek and SGLang send reasoning_content, vLLM and
			// OpenRouter reasoning; both are readable reasoning text.
			if s.Null() {
				continue
			}
			if s.Peek() != '"' {
				s.Skip()
				continue
			}
			if v := s.String(); len(v) > 0 {
				d.reasoningDelta(string(v))
			}
		case "tool_calls":
			if s.Null() {
				continue
			}
			s.Array()
			for s.More() {
				d.toolCall(s)
			}
		default:
			s.Skip()
		}
	}
}

func (d *decoder) textDelta(text string, refusal bool) {
	if refusal && d.raw == "" {
		// A refusal is the model declining: report it as a content filter
		// unless the provider says otherwise.
		d.raw = "content_filter"
	}
	d.endThinking()
	if d.text < 0 {
		d.text = d.start(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT})
	}
	d.push(codec.Event{Type: codec.EventTextDelta, Key: d.text, Text: text})
}

func (d *decoder) reasoningDelta(text string) {
	if d.thinking < 0 {
		d.thinking = d.start(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING})
	}
	d.push(codec.Event{Type: codec.EventReasoningDelta, Key: d.thinking, Text: text})
}

// start opens a block and returns its key.
func (d *decoder) start(e codec.Event) int {
	e.Type, e.Key = codec.EventBlockStart, d.nextKey
	d.nextKey++
	d.open = append(d.open, e.Key)
	d.push(e)
	return e.Key
}

func (d *decoder) end(key int) {
	for i, k := range d.open {
		if k == key {
			d.open = append(d.open[:i], d.open[i+1:]...)
			d.push(codec.Event{Type: codec.EventBlockEnd, Key: key})
			return
		}
	}
}

// endThinking closes the reasoning block once the answer begins.
func (d *decoder) endThinking() {
	if d.thinking >= 0 {
		d.end(d.thinking)
		d.thinking = -1
	}
}

func (d *decoder) closeBlocks() {
	for _, k := range d.open {
		d.push(codec.Event{Type: codec.EventBlockEnd, Key: k})
	}
	d.open = d.open[:0]
	d.text, d.thinking = -1, -1
}

// toolCall decodes one tool_calls[] fragment. The first fragment of a call
// carries id and name; later ones only index and argument text. Hosts that
// send index 0 for every call (Ollama) are split by a new id.
func (d *decoder) toolCall(s *jsonscan.Scanner) {
	if !s.Object() {
		return
	}
	index := -1
	var args string
	id, name := d.idBuf[:0], d.nameBuf[:0]
	for s.More() {
		switch string(s.Key()) {
		case "index":
			index = int(s.Int())
		case "id":
			if !s.Null() {
				id = append(id[:0], s.String()...)
			}
		case "function":
			if s.Null() {
				continue
			}
			s.Object()
			for s.More() {
				switch string(s.Key()) {
				case "name":
					if !s.Null() {
						name = append(name[:0], s.String()...)
					}
				case "arguments":
					if s.Null() {
						continue
					}
					if s.Peek() == '{' { // an object instead of its JSON text
						args = string(s.Raw())
						continue
					}
					if v := s.String(); len(v) > 0 {
						args = string(v)
					}
				default:
					s.Skip()
				}
			}
		default:
			s.Skip()
		}
	}
	d.idBuf, d.nameBuf = id, name
	if s.Err() != nil {
		return
	}
	if index < 0 {
		index = len(d.tools) // no index: one fragment per call (some hosts)
		if len(id) == 0 && len(d.tools) > 0 {
			index = d.tools[len(d.tools)-1].index
		}
	}
	t := -1
	for i := len(d.tools) - 1; i >= 0; i-- {
		if d.tools[i].index == index {
			t = i
			break
		}
	}
	if t < 0 || (len(id) > 0 && string(id) != d.tools[t].id) {
		d.endThinking()
		callID := string(id)
		if callID == "" {
			callID = "call_" + strconv.Itoa(len(d.tools))
		}
		key := d.start(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ToolCallID: callID, ToolName: string(name)})
		d.tools = append(d.tools, toolState{index: index, key: key, id: callID})
		t = len(d.tools) - 1
	}
	if args != "" {
		d.push(codec.Event{Type: codec.EventToolCallDelta, Key: d.tools[t].key, Text: args})
	}
}

func (d *decoder) usage(s *jsonscan.Scanner) {
	var u wireUsage
	if !s.Object() {
		return
	}
	for s.More() {
		switch string(s.Key()) {
		case "prompt_tokens":
			u.PromptTokens = s.Int()
		case "completion_tokens":
			u.CompletionTokens = s.Int()
		case "prompt_cache_hit_tokens":
			u.PromptCacheHitTokens = s.Int()
		case "prompt_tokens_details":
			d.details(s, "cached_tokens", &u.PromptTokensDetails.CachedTokens)
		case "completion_tokens_details":
			d.details(s, "reasoning_tokens", &u.CompletionTokensDetails.ReasoningTokens)
		default:
			s.Skip()
		}
	}
	if s.Err() == nil {
		d.push(codec.Event{Type: codec.EventUsage, Usage: u.normalize()})
	}
}

func (d *decoder) details(s *jsonscan.Scanner, field string, dst *int64) {
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

// streamError reads a mid-stream {"error":{...}} object.
func (d *decoder) streamError(s *jsonscan.Scanner) error {
	raw := s.Raw()
	if s.Err() != nil {
		return decodeError("malformed error chunk: %v", s.Err())
	}
	return openaiwire.ErrorValue(raw)
}
