package loop

import (
	"context"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// scripted is a Model answering from a function of the request number.
type scripted struct {
	mu    sync.Mutex
	n     int
	turn  func(n int, req *llmv1.Request) *llmv1.Response
	block chan struct{} // when set, streams wait on it (or the context)
	calls []time.Time
}

func (m *scripted) Stream(ctx context.Context, in *llmv1.StreamRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[llmv1.StreamResponse], error) {
	m.mu.Lock()
	m.n++
	n := m.n
	m.calls = append(m.calls, time.Now())
	m.mu.Unlock()
	resp := m.turn(n, in.GetRequest())
	evs := []*llmv1.StreamResponse{}
	for _, p := range resp.GetParts() {
		if t := p.GetText(); t != nil {
			evs = append(evs, &llmv1.StreamResponse{Event: &llmv1.StreamResponse_TextDelta{TextDelta: &llmv1.TextDelta{Text: t.GetText()}}})
		}
		if r := p.GetReasoning(); r != nil {
			evs = append(evs, &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ReasoningDelta{ReasoningDelta: &llmv1.ReasoningDelta{Text: r.GetText()}}})
		}
	}
	evs = append(evs, &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Ended{Ended: &llmv1.Ended{Response: resp}}})
	return &fakeStream{ctx: ctx, evs: evs, block: m.block}, nil
}

func (m *scripted) Complete(_ context.Context, in *llmv1.CompleteRequest, _ ...grpc.CallOption) (*llmv1.CompleteResponse, error) {
	return &llmv1.CompleteResponse{Response: text("Goal: test. Progress: read files.")}, nil
}

type fakeStream struct {
	grpc.ClientStream
	ctx   context.Context
	evs   []*llmv1.StreamResponse
	block chan struct{}
}

func (s *fakeStream) Recv() (*llmv1.StreamResponse, error) {
	if s.block != nil {
		select {
		case <-s.block:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
	}
	if len(s.evs) == 0 {
		return nil, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func (s *fakeStream) Header() (metadata.MD, error) { return nil, nil }

func text(s string) *llmv1.Response {
	return &llmv1.Response{FinishReason: llmv1.FinishReason_FINISH_REASON_STOP,
		Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}}}
}

func call(id, name, args string) *llmv1.Response {
	return &llmv1.Response{FinishReason: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS,
		Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: id, Name: name, Arguments: args}}}}}
}

// noop is a tool set whose one tool does nothing.
type noop struct{}

func (noop) Definitions() []*llmv1.ToolDefinition {
	return []*llmv1.ToolDefinition{{Name: "noop", Parameters: `{"type":"object"}`}}
}
func (noop) Run(context.Context, ToolCall) ToolResult { return ToolResult{Output: "ok"} }
func (noop) Serial(string) bool                       { return false }

// recorder is an Emitter keeping the events.
type recorder struct {
	mu  sync.Mutex
	evs []*agentv1.AgentEvent
	on  func(ev *agentv1.AgentEvent)
}

func (r *recorder) Emit(ev *agentv1.AgentEvent) (uint64, error) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	n := len(r.evs)
	on := r.on
	r.mu.Unlock()
	if on != nil {
		on(ev)
	}
	return uint64(n), nil
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.evs {
		out = append(out, string(ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event")).Name()))
	}
	return out
}

func TestRepeatingPattern(t *testing.T) {
	tests := []struct {
		w    []string
		want int
	}{
		{[]string{"a"}, 0},
		{[]string{"a", "a"}, 1},
		{[]string{"a", "b"}, 0},
		{[]string{"a", "b", "a", "b"}, 2},
		{[]string{"x", "a", "b", "a", "b"}, 0}, // the leading x is a complete group for p=2? no: groups from the end only
		{[]string{"a", "b", "c", "a", "b", "c"}, 3},
		{[]string{"a", "b", "c", "a", "b", "d"}, 0},
	}
	for _, tc := range tests {
		// For p=2 the window x,a,b,a,b has groups (a,b),(a,b) from the end
		// and x left over: a loop.
		want := tc.want
		if slices.Equal(tc.w, []string{"x", "a", "b", "a", "b"}) {
			want = 2
		}
		if got := repeatingPattern(tc.w, 2); got != want {
			t.Errorf("repeatingPattern(%v, 2) = %d, want %d", tc.w, got, want)
		}
	}
}

// TestLoopThreshold: by default two identical turns (polling a slow
// command) are not a loop, three are.
func TestLoopThreshold(t *testing.T) {
	for _, tc := range []struct {
		w    []string
		reps int
		want int
	}{
		{[]string{"poll", "poll"}, 3, 0},
		{[]string{"poll", "poll", "poll"}, 3, 1},
		{[]string{"a", "b", "a", "b"}, 3, 0},
		{[]string{"a", "b", "a", "b", "a", "b"}, 3, 2},
		{[]string{"poll", "poll", "poll"}, 4, 0},
	} {
		if got := repeatingPattern(tc.w, tc.reps); got != tc.want {
			t.Errorf("repeatingPattern(%v, %d) = %d, want %d", tc.w, tc.reps, got, tc.want)
		}
	}
	for _, tc := range []struct {
		threshold int
		same      int
		detected  bool
	}{{0, 2, false}, {0, 3, true}, {2, 2, true}, {5, 4, false}} {
		m := &scripted{turn: func(n int, _ *llmv1.Request) *llmv1.Response {
			if n <= tc.same {
				return call("c", "noop", `{"poll":true}`)
			}
			return text("done")
		}}
		rec := &recorder{}
		a := New(m, noop{}, rec, Options{LoopDetection: true, LoopThreshold: tc.threshold}, nil)
		if _, err := a.Prompt(t.Context(), "p", "go", false); err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(rec.types(), "loop_detected"); got != tc.detected {
			t.Errorf("threshold %d, %d identical turns: loop_detected %v, want %v", tc.threshold, tc.same, got, tc.detected)
		}
	}
}

func TestLoop(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		turn      func(n int, req *llmv1.Request) *llmv1.Response
		want      []string
		status    agentv1.PromptStatus
		checkHist func(t *testing.T, h []*llmv1.Message)
		// checkEvents, when set, looks at the events themselves.
		checkEvents func(t *testing.T, evs []*agentv1.AgentEvent)
	}{{
		name: "loop detection steers the model away",
		opts: Options{LoopDetection: true, LoopThreshold: 2},
		turn: func(n int, _ *llmv1.Request) *llmv1.Response {
			if n <= 2 {
				return call("c", "noop", `{"same":true}`)
			}
			return text("ok, stopping")
		},
		want: []string{"prompt_started", "user_input",
			"turn_started", "assistant_message", "tool_call_started", "tool_call_completed",
			"turn_started", "assistant_message", "tool_call_started", "tool_call_completed", "loop_detected",
			"steering_injected", "turn_started", "text_delta", "assistant_message", "prompt_completed"},
		status: agentv1.PromptStatus_PROMPT_STATUS_COMPLETED,
	}, {
		name: "max turns",
		opts: Options{MaxTurns: 2},
		turn: func(n int, _ *llmv1.Request) *llmv1.Response { return call("c", "noop", "{}") },
		want: []string{"prompt_started", "user_input",
			"turn_started", "assistant_message", "tool_call_started", "tool_call_completed",
			"turn_started", "assistant_message", "tool_call_started", "tool_call_completed",
			"turn_limit_reached", "prompt_completed"},
		status: agentv1.PromptStatus_PROMPT_STATUS_TURN_LIMIT,
	}, {
		name: "length: suppressed calls never run, the model is asked once to continue",
		turn: func(n int, _ *llmv1.Request) *llmv1.Response {
			r := text("partial")
			r.FinishReason = llmv1.FinishReason_FINISH_REASON_LENGTH
			r.SuppressedToolCalls = []*llmv1.ToolCall{{Id: "x", Name: "noop", Arguments: "{"}}
			if n == 2 {
				return text(" and the rest")
			}
			return r
		},
		want: []string{"prompt_started", "user_input",
			"turn_started", "text_delta", "assistant_message", "warning", "warning",
			"turn_started", "text_delta", "assistant_message", "prompt_completed"},
		status: agentv1.PromptStatus_PROMPT_STATUS_COMPLETED,
	}, {
		name: "reasoning streams as reasoning_delta and lands on the assistant message",
		turn: func(int, *llmv1.Request) *llmv1.Response {
			r := text("the answer")
			r.Parts = append([]*llmv1.ContentPart{{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "let me think"}}}}, r.Parts...)
			return r
		},
		want: []string{"prompt_started", "user_input",
			"turn_started", "reasoning_delta", "text_delta", "assistant_message", "prompt_completed"},
		status: agentv1.PromptStatus_PROMPT_STATUS_COMPLETED,
		checkEvents: func(t *testing.T, evs []*agentv1.AgentEvent) {
			if d := evs[3].GetReasoningDelta().GetDelta(); d != "let me think" {
				t.Errorf("reasoning delta %q", d)
			}
			if m := evs[5].GetAssistantMessage(); m.GetReasoning() != "let me think" || m.GetText() != "the answer" {
				t.Errorf("assistant message %v", m)
			}
		},
	}, {
		name: "compaction over the threshold keeps the newest turns",
		opts: Options{Compaction: true, ContextWindow: 400, CompactionThreshold: 50, PreserveTurns: 1},
		turn: func(n int, _ *llmv1.Request) *llmv1.Response {
			if n <= 3 {
				return call("c"+itoa(n), "noop", `{"padding":"`+strings.Repeat("x", 300)+`"}`)
			}
			return text("done")
		},
		status: agentv1.PromptStatus_PROMPT_STATUS_COMPLETED,
		checkHist: func(t *testing.T, h []*llmv1.Message) {
			if len(h) == 0 || h[0].GetRole() != llmv1.Role_ROLE_USER || !strings.Contains(h[0].GetParts()[0].GetText().GetText(), "Goal: test") {
				t.Errorf("history does not open with the summary: %v", h)
			}
			for i, m := range h {
				if m.GetRole() == llmv1.Role_ROLE_TOOL && (i == 0 || h[i-1].GetRole() != llmv1.Role_ROLE_ASSISTANT) {
					t.Errorf("message %d: a tool result without its call", i)
				}
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			a := New(&scripted{turn: tc.turn}, noop{}, rec, tc.opts, nil)
			rep, err := a.Prompt(t.Context(), "p1", "go", false)
			if err != nil {
				t.Fatal(err)
			}
			if rep.GetStatus() != tc.status {
				t.Errorf("status = %v (%v), want %v", rep.GetStatus(), rep.GetError(), tc.status)
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, rec.types()); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
			}
			if tc.checkEvents != nil {
				tc.checkEvents(t, rec.evs)
			}
			if tc.checkHist != nil {
				types := rec.types()
				started, completed := slices.Index(types, "compaction_started"), slices.Index(types, "compaction_completed")
				if started < 0 || completed < started {
					t.Errorf("no compaction_started then compaction_completed: %v", types)
				}
				tc.checkHist(t, a.History())
			}
		})
	}
}

// TestControls checks interrupt (park, then resume by steering), abort and
// follow-ups against a model whose stream blocks until released.
func TestControls(t *testing.T) {
	block := make(chan struct{})
	m := &scripted{block: block, turn: func(n int, req *llmv1.Request) *llmv1.Response { return text("answer " + itoa(n)) }}
	rec := &recorder{}
	started := make(chan struct{}, 16)
	rec.on = func(ev *agentv1.AgentEvent) {
		if ev.GetTurnStarted() != nil {
			started <- struct{}{}
		}
	}
	a := New(m, noop{}, rec, Options{}, nil)
	done := make(chan *agentv1.PromptReport)
	go func() {
		rep, _ := a.Prompt(context.Background(), "p1", "go", false)
		done <- rep
	}()
	<-started
	if _, err := a.FollowUp("f1", "and then?"); err != nil {
		t.Fatal(err)
	}
	if ok, gen := a.Interrupt(); !ok || gen != 1 {
		t.Fatalf("Interrupt = %v, %d", ok, gen)
	}
	if ok, _ := a.Interrupt(); ok {
		t.Fatal("a parked prompt was interrupted again")
	}
	a.Steer("s1", "do it differently", false, nil)
	<-started
	close(block) // let every stream finish
	rep := <-done
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetFollowUps() != 1 || rep.GetOutput() != "answer 3" {
		t.Errorf("report = %v", rep)
	}
	want := []string{"prompt_started", "user_input", "turn_started", "round_interrupted", "steering_injected",
		"turn_started", "text_delta", "assistant_message", "user_input", "turn_started", "text_delta", "assistant_message", "prompt_completed"}
	if diff := cmp.Diff(want, rec.types()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Abort.
	m2 := &scripted{block: make(chan struct{}), turn: func(int, *llmv1.Request) *llmv1.Response { return text("never") }}
	started2 := make(chan struct{}, 1)
	a2 := New(m2, noop{}, &recorder{on: func(ev *agentv1.AgentEvent) {
		if ev.GetTurnStarted() != nil {
			started2 <- struct{}{}
		}
	}}, Options{}, nil)
	go func() {
		rep, _ := a2.Prompt(context.Background(), "p2", "go", false)
		done <- rep
	}()
	<-started2
	if ok, id := a2.Abort("enough"); !ok || id != "p2" {
		t.Fatalf("Abort = %v %q", ok, id)
	}
	if rep := <-done; rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_CANCELLED {
		t.Errorf("aborted report = %v", rep)
	}
}

// BenchmarkTurnOverhead measures the loop's own time per turn with a
// scripted model and a tool that does nothing: from one model call to the
// next, less nothing else (the model answers at once, the tool is a no-op).
func BenchmarkTurnOverhead(b *testing.B) {
	const turns = 100
	var all []time.Duration
	for b.Loop() {
		m := &scripted{turn: func(n int, _ *llmv1.Request) *llmv1.Response {
			if n < turns {
				return call("c"+itoa(n), "noop", `{"i":`+itoa(n)+`}`)
			}
			return text("done")
		}}
		a := New(m, noop{}, discard{}, Options{LoopDetection: true, Compaction: true, ContextWindow: 1 << 30}, nil)
		if _, err := a.Prompt(context.Background(), "p", "go", false); err != nil {
			b.Fatal(err)
		}
		for i := 1; i < len(m.calls); i++ {
			all = append(all, m.calls[i].Sub(m.calls[i-1]))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "p50-ns/turn")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns/turn")
}

type discard struct{}

func (discard) Emit(*agentv1.AgentEvent) (uint64, error) { return 0, nil }

var _ protoreflect.ProtoMessage = (*agentv1.AgentEvent)(nil)

func calls(cs ...*llmv1.ToolCall) *llmv1.Response {
	r := &llmv1.Response{FinishReason: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS}
	for _, c := range cs {
		r.Parts = append(r.Parts, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: c}})
	}
	return r
}

// gated is a tool set whose calls wait until every call of the round has
// started (or half a second has passed), so a round that runs in parallel has
// them all running at once. "shell" is serial; "block" waits for the
// context; "slow" finishes last.
type gated struct {
	mu         sync.Mutex
	want       int
	started    int
	running    int
	maxRunning int
	order      []string
	all        chan struct{}
	onBlock    func() // called when a "block" call starts
}

func (g *gated) Definitions() []*llmv1.ToolDefinition { return nil }
func (g *gated) Serial(name string) bool              { return name == "shell" }
func (g *gated) Run(ctx context.Context, c ToolCall) ToolResult {
	g.mu.Lock()
	g.started++
	g.running++
	g.maxRunning = max(g.maxRunning, g.running)
	g.order = append(g.order, c.ID)
	if g.started == g.want {
		close(g.all)
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	switch c.Name {
	case "block":
		if g.onBlock != nil {
			g.onBlock()
		}
		<-ctx.Done()
		return ToolResult{Output: "stopped", IsError: true, Kind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_FAILED}
	case "slow":
		time.Sleep(30 * time.Millisecond)
	}
	select {
	case <-g.all:
	case <-time.After(500 * time.Millisecond):
	}
	return ToolResult{Output: "out-" + c.ID, Full: "full-" + c.ID, ObservedBytes: 100, RetainedBytes: 60, OmittedBytes: 40}
}

// TestToolRounds checks the execution rules: the calls of one
// response run in parallel with results kept in call order; a round with
// a shell call runs one call at a time, in order; calls a cancelled round
// never ran get "Cancelled" results; the byte counts of a result reach
// tool_call_completed.
func TestToolRounds(t *testing.T) {
	tests := []struct {
		name       string
		round      []*llmv1.ToolCall
		abort      bool
		maxRunning int
		order      []string // run order, for serial rounds
		outputs    []string // the tool message, in call order
	}{{
		name:       "parallel, results in call order",
		round:      []*llmv1.ToolCall{{Id: "a", Name: "slow"}, {Id: "b", Name: "read"}, {Id: "c", Name: "read"}},
		maxRunning: 3,
		outputs:    []string{"out-a", "out-b", "out-c"},
	}, {
		name:       "a shell call makes the round serial",
		round:      []*llmv1.ToolCall{{Id: "a", Name: "slow"}, {Id: "b", Name: "shell"}, {Id: "c", Name: "read"}},
		maxRunning: 1,
		order:      []string{"a", "b", "c"},
		outputs:    []string{"out-a", "out-b", "out-c"},
	}, {
		name:       "calls a cancelled round never ran are Cancelled",
		round:      []*llmv1.ToolCall{{Id: "a", Name: "block"}, {Id: "b", Name: "shell"}, {Id: "c", Name: "read"}},
		abort:      true,
		maxRunning: 1,
		order:      []string{"a"},
		outputs:    []string{"Cancelled", "Cancelled", "Cancelled"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &gated{want: len(tc.round), all: make(chan struct{})}
			m := &scripted{turn: func(n int, _ *llmv1.Request) *llmv1.Response {
				if n == 1 {
					return calls(tc.round...)
				}
				return text("done")
			}}
			rec := &recorder{}
			a := New(m, g, rec, Options{}, nil)
			if tc.abort {
				g.onBlock = func() { a.Abort("stop") }
			}
			if _, err := a.Prompt(t.Context(), "p", "go", false); err != nil {
				t.Fatal(err)
			}
			if g.maxRunning != tc.maxRunning {
				t.Errorf("%d calls ran at once, want %d", g.maxRunning, tc.maxRunning)
			}
			if tc.order != nil && !slices.Equal(g.order, tc.order) {
				t.Errorf("run order %v, want %v", g.order, tc.order)
			}
			var got []string
			for _, msg := range a.History() {
				if msg.GetRole() != llmv1.Role_ROLE_TOOL {
					continue
				}
				for i, p := range msg.GetParts() {
					r := p.GetToolResult()
					if r.GetToolCallId() != tc.round[i].GetId() {
						t.Errorf("result %d answers %q, want %q", i, r.GetToolCallId(), tc.round[i].GetId())
					}
					got = append(got, r.GetContent()[0].GetText().GetText())
				}
			}
			if !slices.Equal(got, tc.outputs) {
				t.Errorf("tool message %v, want %v", got, tc.outputs)
			}
			for _, ev := range rec.evs {
				c := ev.GetToolCallCompleted()
				if c == nil {
					continue
				}
				want := [3]int64{100, 60, 40}
				if c.GetOutput() == "Cancelled" {
					want = [3]int64{9, 9, 0} // no counts: the output is all there is
				}
				if got := [3]int64{c.GetOutputBytesObserved(), c.GetOutputBytesRetained(), c.GetOutputBytesOmitted()}; got != want {
					t.Errorf("%s: bytes observed/retained/omitted %v, want %v", c.GetToolCallId(), got, want)
				}
			}
		})
	}
}

// fatalTools fails its calls in a way that stops the prompt.
type fatalTools struct{ noop }

func (fatalTools) Run(context.Context, ToolCall) ToolResult {
	return ToolResult{Output: "the middleware broke", IsError: true, Kind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_FAILED, Fatal: true}
}

// TestFatalToolFailure: a tool failure that must stop the prompt reports
// the ToolExecution error kind.
func TestFatalToolFailure(t *testing.T) {
	m := &scripted{turn: func(n int, _ *llmv1.Request) *llmv1.Response {
		if n == 1 {
			return call("c1", "noop", `{}`)
		}
		return text("should not get here")
	}}
	a := New(m, fatalTools{}, &recorder{}, Options{}, nil)
	rep, _ := a.Prompt(t.Context(), "p1", "go", false)
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_FAILED || rep.GetError().GetKind() != agentv1.AgentErrorKind_AGENT_ERROR_KIND_TOOL_EXECUTION ||
		rep.GetError().GetToolName() != "noop" || !strings.Contains(rep.GetError().GetMessage(), "the middleware broke") {
		t.Errorf("report = %v", rep)
	}
	if m.n != 1 {
		t.Errorf("the model was called %d times after the fatal failure", m.n)
	}
}

// taskTools offers the task tools (or only TaskList) and a noop.
type taskTools struct{ both bool }

func (t taskTools) Definitions() []*llmv1.ToolDefinition {
	defs := []*llmv1.ToolDefinition{{Name: "noop", Parameters: `{"type":"object"}`}, {Name: "TaskList", Parameters: `{"type":"object"}`}}
	if t.both {
		defs = append(defs, &llmv1.ToolDefinition{Name: "TaskCreate", Parameters: `{"type":"object"}`}, &llmv1.ToolDefinition{Name: "TaskUpdate", Parameters: `{"type":"object"}`})
	}
	return defs
}
func (taskTools) Run(context.Context, ToolCall) ToolResult { return ToolResult{Output: "ok"} }
func (taskTools) Serial(string) bool                       { return false }

// TestTaskReminder: ten tool-calling turns without TaskCreate or
// TaskUpdate bring one reminder, only when both tools are offered; using
// either resets the count.
func TestTaskReminder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		both      bool
		turns     int
		taskAt    int // the turn calling TaskUpdate, 0 for none
		reminders int
	}{
		{"nine turns", true, 9, 0, 0},
		{"ten turns", true, 10, 0, 1},
		{"twenty turns", true, 20, 0, 2},
		{"reset by TaskUpdate", true, 15, 6, 0},
		{"only TaskList offered", false, 20, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scripted{turn: func(n int, _ *llmv1.Request) *llmv1.Response {
				switch {
				case n == tc.taskAt:
					return call("c"+itoa(n), "TaskUpdate", `{"n":`+itoa(n)+`}`)
				case n <= tc.turns:
					return call("c"+itoa(n), "noop", `{"n":`+itoa(n)+`}`)
				}
				return text("done")
			}}
			a := New(m, taskTools{both: tc.both}, discard{}, Options{}, nil)
			if _, err := a.Prompt(t.Context(), "p", "go", false); err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, msg := range a.History() {
				for _, p := range msg.GetParts() {
					if strings.Contains(p.GetText().GetText(), "The task tools have not been used") {
						got++
					}
				}
			}
			if got != tc.reminders {
				t.Errorf("reminders = %d, want %d", got, tc.reminders)
			}
		})
	}
}

// TestRequestControls: the session's speed tier and reasoning effort reach
// every model request, not only the first.
func TestRequestControls(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []*llmv1.Request
	)
	m := &scripted{turn: func(n int, req *llmv1.Request) *llmv1.Response {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req)
		return text("done")
	}}
	a := New(m, noop{}, discard{}, Options{Speed: "fast", ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_HIGH}, nil)
	for _, id := range []string{"p1", "p2"} {
		if _, err := a.Prompt(t.Context(), id, "go", false); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d model requests, want 2", len(seen))
	}
	for i, r := range seen {
		if r.GetSpeed() != "fast" || r.GetReasoningEffort() != llmv1.ReasoningEffort_REASONING_EFFORT_HIGH {
			t.Errorf("request %d: speed %q, effort %v; want fast, HIGH", i, r.GetSpeed(), r.GetReasoningEffort())
		}
	}
}
