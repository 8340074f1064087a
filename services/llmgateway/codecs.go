package llmgateway

import (
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// builtinCodecs registers the wire codecs by the catalog's codec enum. A
// provider whose codec is missing here fails with FAILED_PRECONDITION.
func builtinCodecs() map[llmv1.Codec]codec.Codec {
	return map[llmv1.Codec]codec.Codec{}
}

func cloneRequest(r *llmv1.Request) *llmv1.Request { return proto.Clone(r).(*llmv1.Request) }
