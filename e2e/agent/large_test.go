package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestLargeEventsEndToEnd runs a 5 MB prompt whose model writes a 50 MB
// file: both events exceed NATS's 1 MiB payload, the run completes, the
// file is written, and StreamEvents replays every event whole from the
// stream (reassembled from chunks).
func TestLargeEventsEndToEnd(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, nil)
	content := strings.Repeat("0123456789abcdef", 50<<20/16)
	prompt := strings.Repeat("please read this. ", 5<<20/18)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "w1", Name: "write_file",
			Arguments: args(map[string]any{"file_path": "big.txt", "content": content})}}, ChunkRunes: 1 << 20},
		fakeprovider.Turn{Text: "Written."},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	live := st.prompt(t, id, prompt)
	got, err := os.ReadFile(filepath.Join(dir, "big.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(content) || string(got) != content {
		t.Fatalf("big.txt has %d bytes, want %d", len(got), len(content))
	}
	stored := st.streamEvents(t, id, 1)
	checkGapless(t, stored, 1)
	// The live events of the prompt are the stored ones, whole.
	byseq := map[uint64]*agentv1.AgentEvent{}
	for _, ev := range stored {
		byseq[ev.GetSequence()] = ev
	}
	var largest int
	for _, ev := range live {
		if diff := cmp.Diff(ev, byseq[ev.GetSequence()], protocmp.Transform()); diff != "" {
			t.Fatalf("event %d (%s) stored differs from live (-live +stored):\n%.2000s", ev.GetSequence(), eventType(ev), diff)
		}
		largest = max(largest, len(ev.String()))
	}
	if largest < 50<<20 {
		t.Errorf("the largest event has %d bytes; the test meant one over 50 MB", largest)
	}
}

// TestStreamEventsPastRetention gives the stream a small byte limit (the
// -events-max-bytes flag) and checks that StreamEvents from a
// sequence the stream dropped is OUT_OF_RANGE with an ErrorInfo.
func TestStreamEventsPastRetention(t *testing.T) {
	st := newStack(t, func(c *agent.Config) { c.Events.MaxBytes = 64 << 10 })
	_, sbID := st.workspace(t, nil)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	// 100 text deltas of 400 characters, then the message with all of
	// them: over 80 KB of events through a stream that keeps 64 KB.
	st.fake.Enqueue(fakeprovider.Turn{Text: strings.Repeat("x", 40_000), ChunkRunes: 400})
	st.prompt(t, id, "say a lot")
	resp, err := st.agent.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = resp.Recv()
	s := status.Convert(err)
	if s.Code() != codes.OutOfRange {
		t.Fatalf("StreamEvents from 1 past the retention: %v, want OUT_OF_RANGE", err)
	}
	var info *errdetails.ErrorInfo
	for _, d := range s.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info.GetReason() != "EVENTS_EXPIRED" || info.GetMetadata()["from_sequence"] != "1" || info.GetMetadata()["oldest_retained_sequence"] <= "1" {
		t.Errorf("ErrorInfo = %v", info)
	}
}
