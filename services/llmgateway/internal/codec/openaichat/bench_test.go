package openaichat

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// BenchmarkDecodeTextDeltas decodes a stream of n real-shaped text-delta
// chunks and reports allocations per delta.
func BenchmarkDecodeTextDeltas(b *testing.B) {
	const n = 256
	var sb strings.Builder
	sb.WriteString("data: " + roleChunk + "\n\n")
	for i := 0; i < n; i++ {
		sb.WriteString("data: " + delta(`{"content":"word `+string(rune('a'+i%26))+`"}`) + "\n\n")
	}
	sb.WriteString(stream(finishChunk("stop"), usageChunk(`{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`), "[DONE]"))
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	r := bytes.NewReader(body)
	var ev codec.Event
	for b.Loop() {
		r.Reset(body)
		d := New().NewDecoder(r)
		deltas := 0
		for {
			err := d.Next(&ev)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == codec.EventTextDelta {
				deltas++
			}
		}
		if deltas != n {
			b.Fatalf("%d deltas, want %d", deltas, n)
		}
	}
	allocs := testing.AllocsPerRun(5, func() {
		r.Reset(body)
		d := New().NewDecoder(r)
		for d.Next(&ev) == nil {
		}
	})
	b.ReportMetric(allocs/n, "allocs/delta")
}
