package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/mcptest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// The test binary doubles as a NATS subscriber in another process: with
// FABRO_AGENT_TEST_SUBSCRIBE=<url> <session id> [<count>] it prints
// "ready", then one line "<sequence> <subject>" per event of the session
// until session_ended (or count events), then exits.
func TestMain(m *testing.M) {
	mcptest.MaybeServe() // FABRO_MCPTEST_SERVE: the test MCP server on stdio
	if spec := os.Getenv("FABRO_AGENT_TEST_NATS"); spec != "" {
		runNATSServer(spec) // natsfault_test.go
	}
	if spec := os.Getenv("FABRO_AGENT_TEST_REPLICA"); spec != "" {
		runReplica(spec) // cluster_test.go
	}
	if spec := os.Getenv("FABRO_AGENT_TEST_SUBSCRIBE"); spec != "" {
		if err := subscribe(strings.Fields(spec)); err != nil {
			fmt.Fprintln(os.Stderr, "subscriber:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func subscribe(a []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key, err := nats.NkeyOptionFromSeed(os.Getenv("FABRO_AGENT_TEST_NKEY"))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(a[0], key)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	count := -1
	if len(a) > 2 {
		count, _ = strconv.Atoi(a[2])
	}
	cons, err := js.OrderedConsumer(ctx, eventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"fabro.agent.v1.sessions." + a[1] + ".events.>"},
	})
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for n := 0; n != count; n++ {
		msg, err := it.Next()
		if err != nil {
			return err
		}
		ev := &agentv1.AgentEvent{}
		if err := proto.Unmarshal(msg.Data(), ev); err != nil {
			return err
		}
		if count < 0 {
			fmt.Fprintf(out, "%d %s %s\n", ev.GetSequence(), msg.Subject(), msg.Headers().Get(jetstream.MsgIDHeader))
		}
		if ev.GetSessionEnded() != nil {
			break
		}
	}
	fmt.Fprintln(out, "done")
	return out.Flush()
}

// subscriber starts the subscriber process and waits until it is ready.
func subscriber(t testing.TB, st *stack, session string, count int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	spec := st.natsURL + " " + session
	if count > 0 {
		spec += " " + strconv.Itoa(count)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FABRO_AGENT_TEST_SUBSCRIBE="+spec, "FABRO_AGENT_TEST_NKEY="+st.natsKey)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("subscriber did not start: %q %v", sc.Text(), sc.Err())
	}
	return cmd, sc
}

// TestEventsInAnotherProcess checks that a subscriber in another process
// sees every event of a run, in order, with no gap, on the documented
// subjects and message ids.
func TestEventsInAnotherProcess(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, map[string]string{"a.txt": "alpha\n"})
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "read_file", Arguments: args(map[string]any{"file_path": "a.txt"})}}},
		fakeprovider.Turn{Text: "It says alpha, which is the first letter of the Greek alphabet."},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	cmd, sc := subscriber(t, st, id, 0)
	st.prompt(t, id, "What does a.txt say?")
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for sc.Scan() && sc.Text() != "done" {
		got = append(got, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("subscriber: %v", err)
	}
	// What the service itself recorded, replayed over gRPC.
	all := st.streamEvents(t, id, 1)
	var want []string
	for _, ev := range all {
		want = append(want, fmt.Sprintf("%d %s %s:%d", ev.GetSequence(), eventSubject(id, eventType(ev)), id, ev.GetSequence()))
	}
	if len(want) == 0 || !strings.Contains(want[len(want)-1], ".events.session_ended ") {
		t.Fatalf("the log does not end with session_ended: %v", want)
	}
	checkGapless(t, all, 1)
	// A message id is <session>:<sequence>@<incarnation>: one incarnation
	// here (the session was loaded once), the same on every message.
	incarnations := map[string]bool{}
	for i, line := range got {
		base, inc, ok := strings.Cut(line, "@")
		if !ok || inc == "" {
			t.Fatalf("message id without an incarnation: %q", line)
		}
		got[i] = base
		incarnations[inc] = true
	}
	if len(incarnations) != 1 {
		t.Errorf("message ids of one incarnation name %d: %v", len(incarnations), incarnations)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events seen by the other process (-want +got):\n%s", diff)
	}
}
