package anthropic

import (
	"io"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// A minimal assembler for tests: blocks by Key in BlockStart order.
type block struct {
	Kind       llmv1.ContentBlockKind
	Text       string
	Signature  string
	ID, Name   string
	OpaqueKind string
	Opaque     string
	Redacted   bool
	Ended      bool
}

type result struct {
	ID, Model string
	Blocks    []block
	Usage     codec.Usage
	Finish    llmv1.FinishReason
	RawFinish string
}

type collector struct {
	res   result
	byKey map[int]int
}

func (c *collector) add(ev *codec.Event) error {
	if c.byKey == nil {
		c.byKey = map[int]int{}
	}
	b := func() *block { return &c.res.Blocks[c.byKey[ev.Key]] }
	switch ev.Type {
	case codec.EventStart:
		c.res.ID, c.res.Model = ev.ResponseID, ev.Model
	case codec.EventBlockStart:
		c.byKey[ev.Key] = len(c.res.Blocks)
		c.res.Blocks = append(c.res.Blocks, block{Kind: ev.Kind, ID: ev.ToolCallID, Name: ev.ToolName, OpaqueKind: ev.OpaqueKind, Redacted: ev.Redacted})
	case codec.EventTextDelta, codec.EventReasoningDelta, codec.EventToolCallDelta:
		b().Text += ev.Text
	case codec.EventSignature:
		b().Signature = ev.Signature
		b().Redacted = b().Redacted || ev.Redacted
	case codec.EventBlockEnd:
		b().Ended, b().Opaque = true, ev.Opaque
	case codec.EventUsage:
		u := &c.res.Usage
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
		c.res.Finish, c.res.RawFinish = ev.Finish, ev.RawFinish
	}
	return nil
}

// drain reads d to its end; the error is nil after a clean io.EOF.
func drain(d codec.Decoder) (result, error) {
	var c collector
	var ev codec.Event
	for {
		ev.Reset()
		err := d.Next(&ev)
		if err == io.EOF {
			return c.res, nil
		}
		if err != nil {
			return c.res, err
		}
		c.add(&ev)
	}
}
