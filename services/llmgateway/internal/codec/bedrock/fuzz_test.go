package bedrock

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// FuzzDecoder feeds arbitrary frames and payloads: the decoder must end with
// io.EOF only after messageStop and metadata, and never panic or hang.
func FuzzDecoder(f *testing.F) {
	f.Add(stream(fStart, fDelta("0", `{"text":"a"}`), fStop("0"), fMsgStop("end_turn"), fMeta), "")
	f.Add([]byte{}, `{"contentBlockIndex":0,"delta":{"text":"\ud83d"}}`)
	f.Add(fStart, `{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"a","name":"b"}}}`)
	f.Add(fStart, `{"contentBlockIndex":0,"delta":{"reasoningContent":{"redactedContent":"AA=="}}}`)
	f.Add(fStart, `{"contentBlockIndex":-1,"delta":{"text":[1,{"a":"}"}]}}`)
	f.Fuzz(func(t *testing.T, prefix []byte, payload string) {
		body := stream(prefix,
			evFrame("contentBlockStart", payload),
			evFrame("contentBlockDelta", payload),
			evFrame("contentBlockStop", payload),
			evFrame("messageStop", payload),
			evFrame("metadata", payload))
		d := New().NewDecoder(bytes.NewReader(body))
		var ev codec.Event
		for range 10000 {
			err := d.Next(&ev)
			if err == nil {
				continue
			}
			var ce *codec.Error
			if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &ce) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		t.Fatal("decoder did not terminate")
	})
}
