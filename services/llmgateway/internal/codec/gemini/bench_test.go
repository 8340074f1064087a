package gemini

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// textStream is n text-delta chunks shaped as the API sends them (each a
// whole GenerateContentResponse with usage, model and response id).
func textStream(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"token %d, \\\"quoted\\\" \"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 9}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-bench\"}\r\n\r\n", i)
	}
	b.WriteString("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"candidatesTokenCount\": 300,\"totalTokenCount\": 309},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-bench\"}\r\n\r\n")
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
