package bus_test

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// The subscriber side of these tests is what a user writes with nats.go
// alone: no fabro code, the subjects and headers as the README gives them,
// and encoding/json for the data.

// jsonEvent is the part of the protobuf JSON mapping of AgentEvent the
// subscriber reads (uint64 is a JSON string in that mapping).
type jsonEvent struct {
	SessionID       string `json:"session_id"`
	Sequence        string `json:"sequence"`
	ToolCallStarted *struct {
		ToolName   string `json:"tool_name"`
		ToolCallID string `json:"tool_call_id"`
		Arguments  string `json:"arguments"`
	} `json:"tool_call_started,omitempty"`
	TextDelta *struct {
		Delta string `json:"delta"`
	} `json:"text_delta,omitempty"`
}

type received struct {
	Subject, ContentType, EventType, MsgID string
	Event                                  jsonEvent
	Size                                   int // of the data, joined
}

// subscribe connects with the subscriber nkey seed and returns every event
// message of the given subject trees, chunks joined, on one channel in the
// order the server delivered them.
func subscribe(t *testing.T, url, seedFile string, subjects ...string) <-chan received {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	raw := make(chan *nats.Msg, 1024)
	for _, s := range subjects {
		if _, err := nc.ChanSubscribe(s, raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil { // the server knows the interest before anything is published
		t.Fatal(err)
	}
	out := make(chan received, 1024)
	go func() { // ends with the test
		defer close(out)
		var buf []byte
		for {
			var m *nats.Msg
			select {
			case m = <-raw:
			case <-t.Context().Done():
				return
			}
			h := m.Header
			if idx := h.Get("Fabro-Chunk-Index"); idx != "" {
				buf = append(buf, m.Data...)
				if count, _ := strconv.Atoi(h.Get("Fabro-Chunk-Count")); idx != strconv.Itoa(count-1) {
					continue
				}
			} else {
				buf = append(buf[:0], m.Data...)
			}
			r := received{Subject: m.Subject, ContentType: h.Get("Content-Type"), EventType: h.Get("Fabro-Event-Type"),
				MsgID: h.Get("Fabro-Event-Msg-Id"), Size: len(buf)}
			if r.ContentType == "application/json" {
				if err := json.Unmarshal(buf, &r.Event); err != nil {
					t.Errorf("%s: not JSON: %v", m.Subject, err)
				}
			}
			buf = buf[:0]
			select {
			case out <- r:
			case <-t.Context().Done():
				return
			}
		}
	}()
	return out
}

func openBus(t *testing.T, cfg bus.Config) *bus.Bus {
	t.Helper()
	b, err := bus.Open(t.Context(), cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func next(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no event message")
		return received{}
	}
}

// TestJSONSubscriber checks that a subscriber asking for JSON (the JSON
// subject tree) gets every event, chunked ones too, with the envelope
// headers, decodable with encoding/json; and that the stream's protobuf
// messages carry the same headers with their own content type.
func TestJSONSubscriber(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "sub.nk")
	b := openBus(t, bus.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: seed})
	got := subscribe(t, b.ClientURL(), seed, "fabro.agent.v1.sessions.>", "fabro.agent.v1.json.sessions.>")

	big := strings.Repeat("x", 3<<20) // past the 1 MiB maximum payload: chunked in both encodings
	log := bus.NewLog(b, "s_json", "", "s_json", 0, nil)
	for _, ev := range []*agentv1.AgentEvent{
		{Event: &agentv1.AgentEvent_ToolCallStarted{ToolCallStarted: &agentv1.ToolCallStarted{
			ToolName: "shell", ToolCallId: "call_1", Arguments: `{"command":"ls"}`}}},
		{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: big}}},
	} {
		if _, err := log.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	var msgs []received
	for range 4 {
		msgs = append(msgs, next(t, got))
	}
	// The protobuf data is not decoded here; its size says it was joined.
	for i := range msgs {
		if msgs[i].ContentType == "application/protobuf" {
			if msgs[i].Size == 0 || (msgs[i].EventType == "text_delta" && msgs[i].Size < len(big)) {
				t.Errorf("%s: protobuf data of %d bytes", msgs[i].Subject, msgs[i].Size)
			}
			msgs[i].Size = 0
		}
	}
	toolCall := jsonEvent{SessionID: "s_json", Sequence: "1"}
	toolCall.ToolCallStarted = &struct {
		ToolName   string `json:"tool_name"`
		ToolCallID string `json:"tool_call_id"`
		Arguments  string `json:"arguments"`
	}{"shell", "call_1", `{"command":"ls"}`}
	text := jsonEvent{SessionID: "s_json", Sequence: "2"}
	text.TextDelta = &struct {
		Delta string `json:"delta"`
	}{big}
	want := []received{
		{Subject: "fabro.agent.v1.sessions.s_json.events.tool_call_started", ContentType: "application/protobuf", EventType: "tool_call_started", MsgID: "s_json:1"},
		{Subject: "fabro.agent.v1.json.sessions.s_json.events.tool_call_started", ContentType: "application/json", EventType: "tool_call_started", MsgID: "s_json:1",
			Event: toolCall, Size: msgs[1].Size},
		{Subject: "fabro.agent.v1.sessions.s_json.events.text_delta", ContentType: "application/protobuf", EventType: "text_delta", MsgID: "s_json:2"},
		{Subject: "fabro.agent.v1.json.sessions.s_json.events.text_delta", ContentType: "application/json", EventType: "text_delta", MsgID: "s_json:2",
			Event: text, Size: msgs[3].Size},
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}

// TestJSONOff checks that -events-json=false (NoJSON) publishes no JSON
// copy even to a subscriber of the JSON tree.
func TestJSONOff(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "sub.nk")
	b := openBus(t, bus.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: seed, Writer: bus.WriterConfig{NoJSON: true}})
	got := subscribe(t, b.ClientURL(), seed, "fabro.agent.v1.sessions.>", "fabro.agent.v1.json.sessions.>")
	log := bus.NewLog(b, "s_off", "", "s_off", 0, nil)
	for range 2 {
		if _, err := log.Emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "a"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The JSON copy of event 1 would arrive between the two protobuf
	// messages (one publisher connection, one subscriber connection).
	var types []string
	for range 2 {
		types = append(types, next(t, got).ContentType)
	}
	if diff := cmp.Diff([]string{"application/protobuf", "application/protobuf"}, types); diff != "" {
		t.Errorf("content types (-want +got):\n%s", diff)
	}
}
