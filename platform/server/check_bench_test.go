package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
)

// BenchmarkRequestCheck: decoding a request through the server's codec
// without and with the request check (malformed mark + enum walk), side by
// side, for a conversation of 40 messages (enums at every level) and a
// request type without enums. Report check/none per request; walk is the
// check alone on a decoded request.
//
//	go test -run '^$' -bench RequestCheck -count 5 ./server/
func BenchmarkRequestCheck(b *testing.B) {
	conv := &llmv1.StreamRequest{Request: &llmv1.Request{Model: "anthropic/claude", System: strings.Repeat("be brief. ", 50)}}
	for i := range 40 {
		role := llmv1.Role_ROLE_USER
		if i%2 == 1 {
			role = llmv1.Role_ROLE_ASSISTANT
		}
		conv.Request.Messages = append(conv.Request.Messages, &llmv1.Message{Role: role, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: strings.Repeat("word ", 60)}}},
			{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "more"}}},
		}})
	}
	for i := range 10 {
		conv.Request.Tools = append(conv.Request.Tools, &llmv1.ToolDefinition{Name: "tool" + string(rune('a'+i)), Description: "does things", Parameters: `{"type":"object"}`})
	}
	cases := []struct {
		name string
		msg  proto.Message
		new  func() proto.Message
	}{
		{"conversation", conv, func() proto.Message { return new(llmv1.StreamRequest) }},
		{"no_enums", &vaultv1.GetSecretRequest{Name: "OPENAI_API_KEY"}, func() proto.Message { return new(vaultv1.GetSecretRequest) }},
	}
	codec := newLenientCodec(nil)
	for _, c := range cases {
		wire, err := proto.Marshal(c.msg)
		if err != nil {
			b.Fatal(err)
		}
		data := mem.BufferSlice{mem.SliceBuffer(wire)}
		b.Run(c.name+"/walk", func(b *testing.B) {
			m := c.new()
			if err := codec.Unmarshal(data, m); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := checkMessage(m); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, check := range []bool{false, true} {
			name := c.name + "/none"
			if check {
				name = c.name + "/check"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					m := c.new()
					if err := codec.Unmarshal(data, m); err != nil {
						b.Fatal(err)
					}
					if check {
						if err := checkMessage(m); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
