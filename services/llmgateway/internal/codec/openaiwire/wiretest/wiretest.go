// Package wiretest assembles codec events into a comparable reply for the
// OpenAI codecs' tests, checking the event protocol on the way: blocks
// start before their deltas, end once, and nothing follows the finish.
package wiretest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// Block is one assembled content block.
type Block struct {
	Kind       llmv1.ContentBlockKind
	Text       string
	ToolCallID string
	ToolName   string
	OpaqueKind string
	Opaque     string
	Signature  string
}

// Reply is an assembled reply.
type Reply struct {
	ID, Model string
	Blocks    []Block
	Usage     codec.Usage
	Finish    llmv1.FinishReason
	RawFinish string
}

// Assembler consumes events.
type Assembler struct {
	Reply    Reply
	keys     map[int]int // key -> index in Blocks
	ended    map[int]bool
	finished bool
	started  bool
}

// Add applies one event.
func (a *Assembler) Add(ev *codec.Event) error {
	if a.keys == nil {
		a.keys, a.ended = map[int]int{}, map[int]bool{}
	}
	if a.finished {
		return fmt.Errorf("event %d after finish", ev.Type)
	}
	if ev.Type != codec.EventStart && !a.started {
		return fmt.Errorf("event %d before start", ev.Type)
	}
	r := &a.Reply
	switch ev.Type {
	case codec.EventStart:
		if a.started {
			return errors.New("second start")
		}
		a.started = true
		r.ID, r.Model = ev.ResponseID, ev.Model
	case codec.EventBlockStart:
		if _, ok := a.keys[ev.Key]; ok {
			return fmt.Errorf("block %d started twice", ev.Key)
		}
		a.keys[ev.Key] = len(r.Blocks)
		r.Blocks = append(r.Blocks, Block{Kind: ev.Kind, ToolCallID: ev.ToolCallID, ToolName: ev.ToolName, OpaqueKind: ev.OpaqueKind})
	case codec.EventTextDelta, codec.EventReasoningDelta, codec.EventToolCallDelta, codec.EventSignature, codec.EventBlockEnd:
		i, ok := a.keys[ev.Key]
		if !ok {
			return fmt.Errorf("event %d for unknown block %d", ev.Type, ev.Key)
		}
		if a.ended[ev.Key] {
			return fmt.Errorf("event %d for ended block %d", ev.Type, ev.Key)
		}
		b := &r.Blocks[i]
		want := map[codec.EventType]llmv1.ContentBlockKind{
			codec.EventTextDelta:      llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT,
			codec.EventReasoningDelta: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING,
			codec.EventToolCallDelta:  llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL,
		}
		if k, ok := want[ev.Type]; ok && k != b.Kind {
			return fmt.Errorf("event %d on a %v block", ev.Type, b.Kind)
		}
		switch ev.Type {
		case codec.EventSignature:
			b.Signature = ev.Signature
		case codec.EventBlockEnd:
			a.ended[ev.Key] = true
			b.Opaque = ev.Opaque
		default:
			b.Text += ev.Text
		}
	case codec.EventUsage:
		r.Usage = ev.Usage
	case codec.EventFinish:
		for k := range a.keys {
			if !a.ended[k] {
				return fmt.Errorf("finish with block %d open", k)
			}
		}
		a.finished = true
		r.Finish, r.RawFinish = ev.Finish, ev.RawFinish
	default:
		return fmt.Errorf("unknown event type %d", ev.Type)
	}
	return nil
}

// Collect drains a decoder. It returns the reply so far and the decoder's
// error, nil for a clean io.EOF after the finish event.
func Collect(d codec.Decoder) (Reply, error) {
	var a Assembler
	var ev codec.Event
	for {
		err := d.Next(&ev)
		if err == io.EOF {
			if !a.finished {
				return a.Reply, errors.New("io.EOF without a finish event")
			}
			return a.Reply, nil
		}
		if err != nil {
			return a.Reply, err
		}
		if err := a.Add(&ev); err != nil {
			return a.Reply, err
		}
	}
}

// CollectResponse runs a codec's DecodeResponse.
func CollectResponse(c codec.Codec, body io.Reader) (Reply, error) {
	var a Assembler
	err := c.DecodeResponse(body, a.Add)
	if err == nil && !a.finished {
		err = errors.New("no finish event")
	}
	return a.Reply, err
}

// Do runs one call through a codec over HTTP: a non-2xx answer is the
// codec's classified error, a 2xx one is decoded streaming or not.
func Do(ctx context.Context, c codec.Codec, call *codec.Call) (Reply, error) {
	req, err := c.NewRequest(ctx, call)
	if err != nil {
		return Reply{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		return Reply{}, c.ParseError(resp, body)
	}
	if call.Stream {
		return Collect(c.NewDecoder(resp.Body))
	}
	return CollectResponse(c, resp.Body)
}
