package openaichat

import (
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
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
	wiretest.BenchmarkDecode(b, New(), []byte(sb.String()), n)
}
