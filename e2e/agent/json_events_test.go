package agent_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestJSONEventsForAPlainSubscriber checks what docs/AGENT.md promises a
// subscriber in any language: with nothing but a NATS client and a JSON
// decoder, subscribing to the JSON subject tree, it reads every event of
// a real run (tool call included) with its envelope headers, the same
// events the service streams over gRPC.
func TestJSONEventsForAPlainSubscriber(t *testing.T) {
	st := newStack(t)
	key, err := nats.NkeyOptionFromSeed(st.natsKey)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(st.natsURL, key)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// Every session's events, from before the session exists.
	msgs := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe("fabro.agent.v1.json.sessions.*.events.>", msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	_, sbID := st.workspace(t, map[string]string{"a.txt": "alpha\n"})
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "read_file", Arguments: args(map[string]any{"file_path": "a.txt"})}}},
		fakeprovider.Turn{Text: "It says alpha."},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	st.prompt(t, id, "What does a.txt say?")
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}

	// The session's events as gRPC replays them.
	var want []string
	for _, ev := range st.streamEvents(t, id, 1) {
		want = append(want, fmt.Sprintf("%d %s", ev.GetSequence(), eventType(ev)))
	}
	var got []string
	var toolCall map[string]any
	for len(got) < len(want) {
		var m *nats.Msg
		select {
		case m = <-msgs:
		case <-time.After(30 * time.Second):
			t.Fatalf("JSON events so far %v, want %v", got, want)
		}
		var ev map[string]any
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("%s: not JSON: %v: %s", m.Subject, err, m.Data)
		}
		typ := m.Header.Get("Fabro-Event-Type")
		seq, _ := ev["sequence"].(string) // uint64 is a string in the protobuf JSON mapping
		if m.Header.Get("Content-Type") != "application/json" || m.Subject != "fabro.agent.v1.json.sessions."+id+".events."+typ ||
			m.Header.Get("Fabro-Event-Msg-Id") != id+":"+seq || ev["session_id"] != id || ev[typ] == nil {
			t.Errorf("message on %s: headers %v, event %v", m.Subject, m.Header, ev)
		}
		if n, err := strconv.ParseUint(seq, 10, 64); err != nil || n == 0 {
			t.Errorf("sequence %q", seq)
		}
		if typ == "tool_call_started" {
			toolCall, _ = ev[typ].(map[string]any)
		}
		got = append(got, seq+" "+typ)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON events (-gRPC +NATS):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"tool_name": "read_file", "tool_call_id": "c1", "arguments": `{"file_path":"a.txt"}`}, toolCall); diff != "" {
		t.Errorf("tool_call_started (-want +got):\n%s", diff)
	}
}
