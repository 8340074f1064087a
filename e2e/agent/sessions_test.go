package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// holdModel makes the model's first call wait until release is closed,
// then answer text; entered is closed when the call arrives.
func holdModel(st *stack, text string) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.fake.Script(func(fakeprovider.Request) fakeprovider.Turn {
		once.Do(func() { close(entered) })
		<-release
		return fakeprovider.Turn{Text: text}
	})
	return entered, release
}

// promptEvents is what a Prompt stream of promptID carries, replayed from
// the log: the reference a reattached client must match.
func (st *stack) promptEvents(t *testing.T, id, promptID string) []*agentv1.AgentEvent {
	t.Helper()
	return st.events(t, &agentv1.StreamEventsRequest{SessionId: id, PromptId: promptID})
}

func seqs(evs []*agentv1.AgentEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetSequence()
	}
	return out
}

// TestPromptOutlivesItsClient drops a Prompt stream mid-prompt over gRPC
// and reattaches with StreamEvents from the last sequence seen + 1: the run
// went on, and the two streams together are every event of the prompt
// once, in order.
func TestPromptOutlivesItsClient(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	entered, release := holdModel(st, "DONE-AFTER-THE-DROP")

	ctx, cancel := context.WithCancel(t.Context())
	stream, err := st.agent.Prompt(ctx, &agentv1.PromptRequest{SessionId: id, Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	seen := []*agentv1.AgentEvent{first.GetEvent()}
	promptID := first.GetEvent().GetPromptId()
	<-entered
	cancel() // the client goes away while the model call is in flight
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		seen = append(seen, resp.GetEvent())
	}
	close(release)

	rest := st.events(t, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: seen[len(seen)-1].GetSequence() + 1, Follow: true, PromptId: promptID})
	got := append(seen, rest...)
	if rep := lastReport(t, got); rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetOutput() != "DONE-AFTER-THE-DROP" {
		t.Fatalf("report after the drop = %v, want COMPLETED: the prompt must outlive its client", rep)
	}
	if d := cmp.Diff(seqs(st.promptEvents(t, id, promptID)), seqs(got)); d != "" {
		t.Errorf("sequences seen across the drop (-log +client):\n%s", d)
	}
}

// TestCancelOnDisconnect checks the opt-in: a client that asked for it
// aborts its prompt by going away.
func TestCancelOnDisconnect(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	entered, release := holdModel(st, "never seen")
	defer close(release)
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := st.agent.Prompt(ctx, &agentv1.PromptRequest{SessionId: id, Text: "work", CancelOnDisconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	cancel()
	evs := st.events(t, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: first.GetEvent().GetSequence(), Follow: true, PromptId: first.GetEvent().GetPromptId()})
	if rep := lastReport(t, evs); rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_CANCELLED {
		t.Fatalf("report = %v, want CANCELLED", rep)
	}
}

// TestStartPromptManyWatchers starts a prompt without a stream and
// watches it from three clients at once, from the sequence StartPrompt
// gave: each sees the same events, ending with prompt_completed.
func TestStartPromptManyWatchers(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	entered, release := holdModel(st, "WATCHED")
	started, err := st.agent.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.agent.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: "again"}); status.Code(err) != codes.FailedPrecondition || grpcerr.ReasonOf(err) != "PROMPT_RUNNING" {
		t.Errorf("a second StartPrompt while one runs: %v, want FAILED_PRECONDITION %s", err, "PROMPT_RUNNING")
	}
	const watchers = 3
	got := make([][]*agentv1.AgentEvent, watchers)
	var wg sync.WaitGroup
	for i := range watchers {
		wg.Go(func() {
			got[i] = st.events(t, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: started.GetFromSequence(), Follow: true, PromptId: started.GetPromptId()})
		})
	}
	<-entered
	close(release)
	wg.Wait()
	for i := range watchers {
		if rep := lastReport(t, got[i]); rep.GetOutput() != "WATCHED" {
			t.Errorf("watcher %d: report %v", i, rep)
		}
		if got[i][0].GetPromptStarted() == nil {
			t.Errorf("watcher %d starts with %s, want prompt_started", i, eventType(got[i][0]))
		}
		if d := cmp.Diff(got[0], got[i], protocmp.Transform()); d != "" {
			t.Errorf("watcher %d differs from watcher 0:\n%s", i, d)
		}
	}
	checkGapless(t, got[0], got[0][0].GetSequence())
}

// restLines reads NDJSON stream lines ({"result": ...}) until the body
// ends or stop says so.
func restLines[T any, PT interface {
	*T
	proto.Message
}](t *testing.T, body io.Reader, stop func(PT) bool) []PT {
	t.Helper()
	var out []PT
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Error != nil {
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		m := PT(new(T))
		if err := protojson.Unmarshal(line.Result, m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		if stop != nil && stop(m) {
			break
		}
	}
	return out
}

// TestPromptOutlivesItsRESTClient is the drop and reattach over the REST
// gateway: the client closes the Prompt response mid-prompt (a proxy's
// idle timeout), then follows /events from the last sequence + 1.
func TestPromptOutlivesItsRESTClient(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	entered, release := holdModel(st, "REST-DONE")
	resp, err := http.Post("http://"+st.httpAddr+"/v1/sessions/"+id+":prompt", "application/json", strings.NewReader(`{"text":"work"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST :prompt: %s", resp.Status)
	}
	first := restLines[agentv1.PromptResponse](t, resp.Body, func(*agentv1.PromptResponse) bool { return true })
	<-entered
	resp.Body.Close() // the connection drops
	close(release)
	last := first[0].GetEvent()
	url := fmt.Sprintf("http://%s/v1/sessions/%s/events?fromSequence=%d&follow=true&promptId=%s", st.httpAddr, id, last.GetSequence()+1, last.GetPromptId())
	resp2, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("GET events: %s", resp2.Status)
	}
	got := []*agentv1.AgentEvent{last}
	for _, m := range restLines[agentv1.StreamEventsResponse](t, resp2.Body, nil) {
		got = append(got, m.GetEvent())
	}
	if rep := lastReport(t, got); rep.GetOutput() != "REST-DONE" {
		t.Fatalf("report = %v", rep)
	}
	if d := cmp.Diff(seqs(st.promptEvents(t, id, last.GetPromptId())), seqs(got)); d != "" {
		t.Errorf("sequences seen across the drop (-log +client):\n%s", d)
	}
}

// recordPath is where the file store keeps a session's record.
func (st *stack) recordPath(id string) string {
	return filepath.Join(st.cfg.DataDir, "agent", "sessions", id+".pb")
}

// record reads a session's durable record from its file.
func (st *stack) record(t *testing.T, id string) *agentv1.SessionRecord {
	t.Helper()
	b, err := os.ReadFile(st.recordPath(id))
	if err != nil {
		t.Fatal(err)
	}
	rec := &agentv1.SessionRecord{}
	if err := proto.Unmarshal(b, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// storedEvents counts the stream's messages of a session, as a subscriber
// with the embedded server's credential sees them.
func (st *stack) storedEvents(t *testing.T, id string) uint64 {
	t.Helper()
	nk, err := nats.NkeyOptionFromSeed(st.natsKey)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(st.natsURL, nk)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), eventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(sessionFilter(id)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func (st *stack) state(t *testing.T, id string) agentv1.SessionState {
	t.Helper()
	resp, err := st.agent.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSession().GetState()
}

// TestSuspendedThenClosedStaysClosed: a session left open by a restart is
// SUSPENDED; closing it then survives the next restart.
func TestSuspendedThenClosedStaysClosed(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	st.restart(t)
	if got := st.state(t, id); got != agentv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("after a restart: %v, want SUSPENDED", got)
	}
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	st.restart(t)
	if got := st.state(t, id); got != agentv1.SessionState_SESSION_STATE_CLOSED {
		t.Fatalf("closed while suspended, after another restart: %v, want CLOSED", got)
	}
}

// TestUnfinishedPromptRecorded: the record of a session whose prompt runs
// names it, and a restart then finds it.
func TestUnfinishedPromptRecorded(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	entered, release := holdModel(st, "x")
	started, err := st.agent.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	rec := st.record(t, id)
	if rec.GetUnfinishedPromptId() != started.GetPromptId() {
		t.Errorf("unfinished_prompt_id = %q, want %q", rec.GetUnfinishedPromptId(), started.GetPromptId())
	}
	close(release)
	st.events(t, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: started.GetFromSequence(), Follow: true, PromptId: started.GetPromptId()})
	if rec := st.record(t, id); rec.GetUnfinishedPromptId() != "" {
		t.Errorf("after the prompt: unfinished_prompt_id %q, want empty", rec.GetUnfinishedPromptId())
	}
}

// TestClosedSessionsLeaveMemory: a closed session is not loaded; it is
// still read from its record, and resumes.
func TestClosedSessionsLeaveMemory(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if st.svc.Loaded(id) {
		t.Fatal("a closed session is still loaded")
	}
	if got := st.state(t, id); got != agentv1.SessionState_SESSION_STATE_CLOSED {
		t.Errorf("GetSession: %v, want CLOSED", got)
	}
	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if !st.svc.Loaded(id) {
		t.Error("a resumed session is not loaded")
	}
}

// TestDeleteSession: after DeleteSession every call naming the session
// gets NOT_FOUND, and its events are gone from the stream.
func TestDeleteSession(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	keep := st.create(t, sbID, nil)
	st.fake.Enqueue(fakeprovider.Turn{Text: "hi"})
	st.prompt(t, id, "hello")
	if n := st.storedEvents(t, id); n == 0 {
		t.Fatal("no stored events before the delete")
	}
	if _, err := st.agent.DeleteSession(t.Context(), &agentv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if n := st.storedEvents(t, id); n != 0 {
		t.Errorf("stored events after the delete: %d, want 0", n)
	}
	if _, err := os.Stat(st.recordPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after the delete: %v, want none", err)
	}
	calls := map[string]func() error{
		"GetSession": func() error {
			_, err := st.agent.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
			return err
		},
		"GetHistory": func() error {
			_, err := st.agent.GetHistory(t.Context(), &agentv1.GetHistoryRequest{SessionId: id})
			return err
		},
		"GetSnapshot": func() error {
			_, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
			return err
		},
		"CloseSession": func() error {
			_, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id})
			return err
		},
		"ResumeSession": func() error {
			_, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id})
			return err
		},
		"DeleteSession": func() error {
			_, err := st.agent.DeleteSession(t.Context(), &agentv1.DeleteSessionRequest{SessionId: id})
			return err
		},
		"StartPrompt": func() error {
			_, err := st.agent.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: "x"})
			return err
		},
		"Steer": func() error {
			_, err := st.agent.Steer(t.Context(), &agentv1.SteerRequest{SessionId: id, Text: "x"})
			return err
		},
		"FollowUp": func() error {
			_, err := st.agent.FollowUp(t.Context(), &agentv1.FollowUpRequest{SessionId: id, Text: "x"})
			return err
		},
		"Interrupt": func() error {
			_, err := st.agent.Interrupt(t.Context(), &agentv1.InterruptRequest{SessionId: id})
			return err
		},
		"Abort": func() error { _, err := st.agent.Abort(t.Context(), &agentv1.AbortRequest{SessionId: id}); return err },
		"Approve": func() error {
			_, err := st.agent.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: "ap_x", Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY})
			return err
		},
		"SubmitToolResult": func() error {
			_, err := st.agent.SubmitToolResult(t.Context(), &agentv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "c1"})
			return err
		},
		"Prompt": func() error {
			s, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "x"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
		"StreamEvents": func() error {
			s, err := st.agent.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
	}
	for name, call := range calls {
		if err := call(); status.Code(err) != codes.NotFound || grpcerr.ReasonOf(err) != "SESSION_NOT_FOUND" {
			t.Errorf("%s after DeleteSession: %v, want NOT_FOUND %s", name, err, "SESSION_NOT_FOUND")
		}
	}
	list, err := st.agent.ListSessions(t.Context(), &agentv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetSessions()) != 1 || list.GetSessions()[0].GetSessionId() != keep {
		t.Errorf("ListSessions after the delete: %v, want only %s", list.GetSessions(), keep)
	}
}

// TestIdleSessionsExpire: a session idle past the TTL is closed (reason
// IDLE_EXPIRED) and can be resumed.
func TestIdleSessionsExpire(t *testing.T) {
	st := newStack(t, func(c *agent.Config) { c.Sessions.IdleTTL = 200 * time.Millisecond })
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	got, err := st.agent.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
	if err != nil || got.GetSession().GetExpireTime() == nil {
		t.Fatalf("an idle session has no expire_time: %v %v", got, err)
	}
	evs := st.followEvents(t, id, 1) // returns at session_ended
	end := evs[len(evs)-1].GetSessionEnded()
	if end.GetReason() != agentv1.SessionEndReason_SESSION_END_REASON_IDLE_EXPIRED {
		t.Fatalf("last event %v, want session_ended IDLE_EXPIRED", evs[len(evs)-1])
	}
	if s := st.state(t, id); s != agentv1.SessionState_SESSION_STATE_CLOSED {
		t.Errorf("state %v, want CLOSED", s)
	}
	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
		t.Errorf("resume an expired session: %v", err)
	}
}

// TestSessionsPerPrincipalCap: beyond the cap CreateSession and
// ResumeSession get RESOURCE_EXHAUSTED SESSION_LIMIT; closing one frees a
// place.
func TestSessionsPerPrincipalCap(t *testing.T) {
	st := newStack(t, func(c *agent.Config) { c.Sessions.MaxPerPrincipal = 1 })
	_, sbID := st.workspace(t, nil)
	first := st.create(t, sbID, nil)
	req := &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}}
	_, err := st.agent.CreateSession(t.Context(), req)
	if status.Code(err) != codes.ResourceExhausted || grpcerr.ReasonOf(err) != "SESSION_LIMIT" || grpcerr.InfoOf(err).GetMetadata()["limit"] != "1" {
		t.Fatalf("second session: %v, want RESOURCE_EXHAUSTED %s with the limit", err, "SESSION_LIMIT")
	}
	if _, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{Model: req.Model, Sandbox: req.Sandbox, ParentSessionId: first}); err != nil {
		t.Errorf("a subagent does not count against the cap: %v", err)
	}
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: first}); err != nil {
		t.Fatal(err)
	}
	second, err := st.agent.CreateSession(t.Context(), req)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	_, err = st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: first})
	if status.Code(err) != codes.ResourceExhausted || grpcerr.ReasonOf(err) != "SESSION_LIMIT" {
		t.Errorf("resume beyond the cap: %v, want RESOURCE_EXHAUSTED", err)
	}
	_ = second
}

// TestListSessionsUnderInserts pages through sessions while others are
// created and one is deleted between pages: every session that was there
// throughout is listed once, none twice.
func TestListSessionsUnderInserts(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	var before []string
	for range 5 {
		before = append(before, st.create(t, sbID, nil))
	}
	seen := map[string]int{}
	token := ""
	for page := 0; ; page++ {
		resp, err := st.agent.ListSessions(t.Context(), &agentv1.ListSessionsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetSessions() {
			seen[s.GetSessionId()]++
		}
		if page == 0 { // newer sessions arrive, and an unseen old one goes
			st.create(t, sbID, nil)
			st.create(t, sbID, nil)
			if _, err := st.agent.DeleteSession(t.Context(), &agentv1.DeleteSessionRequest{SessionId: before[0]}); err != nil {
				t.Fatal(err)
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	for _, id := range before[1:] {
		if seen[id] != 1 {
			t.Errorf("session %s listed %d times, want once", id, seen[id])
		}
	}
	if seen[before[0]] != 0 {
		t.Errorf("the deleted session was listed")
	}
}
