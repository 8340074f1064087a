package bus_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// BenchmarkPublishJSON measures what the JSON subject tree costs the
// writer, against the protobuf-only baseline in the same run: an event of
// a typical size (a tool call's 2 KiB result) emitted and acknowledged,
// with the JSON copy off, on with no JSON subscriber (the embedded server
// knows: nothing is encoded), and on with one subscriber reading it.
func BenchmarkPublishJSON(b *testing.B) {
	ev := func() *agentv1.AgentEvent {
		return &agentv1.AgentEvent{Event: &agentv1.AgentEvent_ToolCallCompleted{ToolCallCompleted: &agentv1.ToolCallCompleted{
			ToolCallId: "call_1", ToolName: "shell", Output: strings.Repeat("line of output\n", 140)}}}
	}
	for _, c := range []struct {
		name       string
		off, reads bool
	}{
		{"protobuf-only", true, false},
		{"json-unread", false, false},
		{"json-read", false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			seed := filepath.Join(b.TempDir(), "sub.nk")
			bs, err := bus.Open(b.Context(), bus.Config{StoreDir: b.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: seed,
				Writer: bus.WriterConfig{NoJSON: c.off}}, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			defer bs.Close()
			if c.reads {
				opt, err := nats.NkeyOptionFromSeed(seed)
				if err != nil {
					b.Fatal(err)
				}
				nc, err := nats.Connect(bs.ClientURL(), opt)
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				if _, err := nc.Subscribe(bus.AllJSONSubjects, func(*nats.Msg) {}); err != nil {
					b.Fatal(err)
				}
				if err := nc.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			log := bus.NewLog(bs, "s_bench", "", "s_bench", 0, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := log.Emit(ev()); err != nil {
					b.Fatal(err)
				}
			}
			if err := log.Flush(b.Context()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
