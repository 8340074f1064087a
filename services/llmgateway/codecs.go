package llmgateway

import (
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/anthropic"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/bedrock"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/gemini"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaichat"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openairesponses"
)

// builtinCodecs registers the wire codecs by the catalog's codec enum. A
// provider whose codec is missing here fails with FAILED_PRECONDITION.
func builtinCodecs() map[llmv1.Codec]codec.Codec {
	return map[llmv1.Codec]codec.Codec{
		llmv1.Codec_CODEC_OPENAI_CHAT:        openaichat.New(),
		llmv1.Codec_CODEC_OPENAI_RESPONSES:   openairesponses.New(),
		llmv1.Codec_CODEC_ANTHROPIC_MESSAGES: anthropic.New(),
		llmv1.Codec_CODEC_GEMINI_GENERATE:    gemini.New(),
		llmv1.Codec_CODEC_BEDROCK_CONVERSE:   bedrock.New(),
	}
}

func cloneRequest(r *llmv1.Request) *llmv1.Request { return proto.Clone(r).(*llmv1.Request) }
