package anthropic

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// textStream is a stream of n text deltas, shaped as the API sends them.
func textStream(n int) []byte {
	var b strings.Builder
	b.WriteString(sseBody(msgStart, textStart1))
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"token %d, \\\"quoted\\\" \"}}\n\n", i)
	}
	b.WriteString(sseBody(blockStop1, `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`, msgStop))
	return []byte(b.String())
}

// BenchmarkDecodeTextDeltas reports allocations per text delta: the
// decoder's whole cost (bufio buffer and decoder included) over n deltas.
func BenchmarkDecodeTextDeltas(b *testing.B) {
	const n = 1000
	stream := textStream(n)
	c := New()
	var ev codec.Event
	var ms0, ms1 runtime.MemStats
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	runtime.ReadMemStats(&ms0)
	for b.Loop() {
		d := c.NewDecoder(bytes.NewReader(stream))
		for {
			if err := d.Next(&ev); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N*n), "allocs/delta")
}
