package anthropic

import "github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/codectest"

type (
	block     = codectest.Block
	result    = codectest.Result
	collector = codectest.Collector
)

var drain = codectest.Drain
