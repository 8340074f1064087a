package openairesponses

import (
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

// BenchmarkDecodeTextDeltas decodes a stream of n real-shaped
// response.output_text.delta events and reports allocations per delta.
func BenchmarkDecodeTextDeltas(b *testing.B) {
	const n = 256
	var sb strings.Builder
	sb.WriteString(ev("response.created", created))
	sb.WriteString(ev("response.output_item.added", `{"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}`))
	sb.WriteString(ev("response.content_part.added", `{"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}`))
	for i := 0; i < n; i++ {
		sb.WriteString(ev("response.output_text.delta", `{"item_id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","output_index":0,"content_index":0,"delta":"word `+string(rune('a'+i%26))+`","logprobs":[],"obfuscation":"x1"}`))
	}
	sb.WriteString(ev("response.completed", completed("completed", "")))
	wiretest.BenchmarkDecode(b, New(), []byte(sb.String()), n)
}
