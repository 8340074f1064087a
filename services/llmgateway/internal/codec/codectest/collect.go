// Package codectest holds test helpers shared by the codec packages'
// tests: a minimal assembler that turns decoded events into a comparable
// result. (The OpenAI codecs use the stricter openaiwire/wiretest.)
package codectest

import (
	"io"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// Block is one assembled content block; blocks are kept by Key in
// BlockStart order.
type Block struct {
	Kind       llmv1.ContentBlockKind
	Text       string
	Signature  string
	ID, Name   string
	OpaqueKind string
	Opaque     string
	Redacted   bool
	Ended      bool
}

// Result is an assembled reply.
type Result struct {
	ID, Model string
	Blocks    []Block
	Usage     codec.Usage
	Finish    llmv1.FinishReason
	RawFinish string
}

// Collector assembles events into Res.
type Collector struct {
	Res   Result
	byKey map[int]int
}

// Add applies one event; it never fails, and returns an error only to fit
// DecodeResponse's emit.
func (c *Collector) Add(ev *codec.Event) error {
	if c.byKey == nil {
		c.byKey = map[int]int{}
	}
	b := func() *Block { return &c.Res.Blocks[c.byKey[ev.Key]] }
	switch ev.Type {
	case codec.EventStart:
		c.Res.ID, c.Res.Model = ev.ResponseID, ev.Model
	case codec.EventBlockStart:
		c.byKey[ev.Key] = len(c.Res.Blocks)
		c.Res.Blocks = append(c.Res.Blocks, Block{Kind: ev.Kind, ID: ev.ToolCallID, Name: ev.ToolName, OpaqueKind: ev.OpaqueKind, Redacted: ev.Redacted})
	case codec.EventTextDelta, codec.EventReasoningDelta, codec.EventToolCallDelta:
		b().Text += ev.Text
	case codec.EventSignature:
		b().Signature = ev.Signature
		b().Redacted = b().Redacted || ev.Redacted
	case codec.EventBlockEnd:
		b().Ended, b().Opaque = true, ev.Opaque
	case codec.EventUsage:
		u := &c.Res.Usage
		for _, f := range []struct {
			dst *int64
			v   int64
		}{
			{&u.Input, ev.Usage.Input}, {&u.Output, ev.Usage.Output}, {&u.Reasoning, ev.Usage.Reasoning},
			{&u.CacheRead, ev.Usage.CacheRead}, {&u.CacheWrite, ev.Usage.CacheWrite},
		} {
			if f.v != 0 {
				*f.dst = f.v
			}
		}
	case codec.EventFinish:
		c.Res.Finish, c.Res.RawFinish = ev.Finish, ev.RawFinish
	}
	return nil
}

// Drain reads d to its end; the error is nil after a clean io.EOF.
func Drain(d codec.Decoder) (Result, error) {
	var c Collector
	var ev codec.Event
	for {
		ev.Reset()
		err := d.Next(&ev)
		if err == io.EOF {
			return c.Res, nil
		}
		if err != nil {
			return c.Res, err
		}
		c.Add(&ev)
	}
}
