package loop

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// continueText asks the model to go on after its output was cut off.
const continueText = "Your previous response was cut off because it reached the output token limit. Continue exactly where you stopped; do not repeat what you already wrote."

// loopWarning is the steering injected when the agent repeats itself.
const loopWarning = "WARNING: Loop detected. Your last tool calls repeat the same pattern without making progress. Stop repeating them: try a different approach, re-read the relevant files, or explain what is blocking you."

// promptState accumulates one prompt's report.
type promptState struct {
	id              string
	start           time.Time
	firstOutput     time.Time
	inference, tool time.Duration
	turns           int32
	toolCalls       int32
	followUps       int32
	usage           *llmv1.Usage
	cost            *llmv1.Cost
	files           map[string]bool
	compactionFail  bool
	loopWindow      []string
	lengthContinued bool
}

// Prompt runs one prompt, and every follow-up queued meanwhile, to
// completion, and returns its report; prompt_completed is emitted last.
// With continuation, text is ignored and the loop goes on from the
// history as it stands. It returns ErrBusy when a prompt already runs.
func (a *Agent) Prompt(ctx context.Context, promptID, text string, continuation bool) (*agentv1.PromptReport, error) {
	return a.prompt(ctx, promptID, text, continuation, nil)
}

// Resumption is what a prompt's earlier incarnation left in the event log
// when its process died (or lost the session) mid-prompt, read by the one
// that continues it from its last checkpoint.
type Resumption struct {
	// Turn is the turn the history leads up to, which runs again from its
	// start (0 or 1: the first).
	Turn int32
	// Input is the prompt's text when the history does not hold it yet
	// (the checkpoint came before the first turn); InputEmitted says its
	// user_input is already in the log.
	Input        string
	InputEmitted bool
	// Interrupted are the calls that were started and never completed.
	Interrupted []*agentv1.ToolCallStarted
	// Output says the turn that runs again had emitted output, which
	// clients drop (assistant_output_replace) as for a replayed stream.
	Output bool
}

// InterruptedOutput is the result of a tool call that was running when
// the agent's process died.
const InterruptedOutput = "interrupted: the agent stopped while this call ran (it may have run in part); the turn that made it runs again"

// Resume continues a prompt an earlier incarnation started (its
// prompt_started is in the log already, so none is emitted): the calls it
// left running complete with the INTERRUPTED error kind, a turn with
// output is marked replayed, and the loop goes on from the checkpoint's
// turn.
func (a *Agent) Resume(ctx context.Context, promptID string, r Resumption) (*agentv1.PromptReport, error) {
	return a.prompt(ctx, promptID, r.Input, r.Input == "", &r)
}

func (a *Agent) prompt(ctx context.Context, promptID, text string, continuation bool, resume *Resumption) (*agentv1.PromptReport, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if a.opts.WallClock > 0 {
		// A timer rather than a deadline: a deadline would travel to the
		// gateway with the model call, which could fail the call on its side
		// before the prompt here knows why.
		t := time.AfterFunc(a.opts.WallClock, func() { cancel(errWallClock) })
		defer t.Stop()
	}
	a.mu.Lock()
	if a.run != nil {
		a.mu.Unlock()
		return nil, ErrBusy
	}
	a.run = &run{id: promptID, cancel: cancel, wake: make(chan struct{}, 1)}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.run = nil
		a.followUps = nil
		a.mu.Unlock()
	}()

	ctx, span := a.startPromptSpan(ctx, promptID, text, continuation)
	ps := &promptState{id: promptID, start: a.opts.Now(), usage: &llmv1.Usage{}, cost: &llmv1.Cost{}, files: map[string]bool{}}
	switch {
	case resume != nil:
		a.resumed(ps, resume)
	default:
		a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_PromptStarted{PromptStarted: &agentv1.PromptStarted{Text: text, Continuation: continuation}}})
	}
	if !continuation {
		if resume == nil || !resume.InputEmitted {
			text = a.expand(promptID, text)
		}
		a.appendMessage(userMessage(text))
		if resume == nil || !resume.InputEmitted {
			a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_UserInput{UserInput: &agentv1.UserInput{Text: text, Source: agentv1.UserInputSource_USER_INPUT_SOURCE_PROMPT}}})
		}
	}
	report := a.rounds(ctx, ps)
	a.finishReport(ps, report)
	if e := report.GetError(); e != nil && report.GetStatus() == agentv1.PromptStatus_PROMPT_STATUS_FAILED {
		a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_Error{Error: &agentv1.Error{Error: e, Fatal: true}}})
	}
	if a.opts.PromptEnd != nil {
		a.opts.PromptEnd(context.WithoutCancel(ctx), promptID, report)
	}
	a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_PromptCompleted{PromptCompleted: &agentv1.PromptCompleted{Report: report}}})
	endPromptSpan(span, report)
	return report, nil
}

// resumed closes what the earlier incarnation left open, so every
// tool_call_started has its completion and a replayed turn's partial
// output is void, and makes the turns count on from the checkpoint's.
func (a *Agent) resumed(ps *promptState, r *Resumption) {
	a.interruptCalls(ps.id, r.Interrupted, InterruptedOutput)
	turn := max(r.Turn, 1)
	if r.Output {
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_AssistantOutputReplace{AssistantOutputReplace: &agentv1.AssistantOutputReplace{
			Turn: turn, Attempt: 2}}})
	}
	ps.turns = turn - 1
}

// interruptCalls completes, with the INTERRUPTED error kind, the calls an
// earlier incarnation left running.
func (a *Agent) interruptCalls(promptID string, calls []*agentv1.ToolCallStarted, output string) {
	for _, c := range calls {
		a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_ToolCallCompleted{ToolCallCompleted: &agentv1.ToolCallCompleted{
			ToolName: c.GetToolName(), ToolCallId: c.GetToolCallId(), Output: output, IsError: true,
			ErrorKind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_INTERRUPTED, Duration: durationpb.New(0)}}})
	}
}

// AbandonedOutput is the result of a tool call that was running when the
// agent's process died, in a prompt that is ended rather than continued.
const AbandonedOutput = "interrupted: the agent stopped while this call ran (it may have run in part); the prompt was ended, not continued"

// Abandon ends, without running it further, a prompt an earlier
// incarnation started and left unfinished (a subagent's, whose parent's
// prompt goes on without it): the calls it left running complete with
// the INTERRUPTED error kind, and its prompt_completed says it was
// CANCELLED, with why. ErrBusy when a prompt runs.
func (a *Agent) Abandon(ctx context.Context, promptID string, r Resumption, why string) (*agentv1.PromptReport, error) {
	return a.AbandonWith(ctx, promptID, r, agentv1.PromptStatus_PROMPT_STATUS_CANCELLED, agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED, why)
}

// AbandonWith is Abandon whose prompt_completed has status and an error
// of kind (a prompt whose token was revoked FAILED).
func (a *Agent) AbandonWith(ctx context.Context, promptID string, r Resumption, status agentv1.PromptStatus, kind agentv1.AgentErrorKind, why string) (*agentv1.PromptReport, error) {
	a.mu.Lock()
	if a.run != nil {
		a.mu.Unlock()
		return nil, ErrBusy
	}
	// It holds the run while it emits, so no prompt starts meanwhile.
	a.run = &run{id: promptID, cancel: func(error) {}, wake: make(chan struct{}, 1)}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.run = nil
		a.mu.Unlock()
	}()
	ps := &promptState{id: promptID, start: a.opts.Now(), usage: &llmv1.Usage{}, cost: &llmv1.Cost{}, files: map[string]bool{}, turns: max(r.Turn, 1) - 1}
	a.interruptCalls(promptID, r.Interrupted, AbandonedOutput)
	report := &agentv1.PromptReport{Status: status, Error: &agentv1.AgentError{Kind: kind, Message: why}}
	a.finishReport(ps, report)
	if a.opts.PromptEnd != nil {
		a.opts.PromptEnd(context.WithoutCancel(ctx), promptID, report)
	}
	a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_PromptCompleted{PromptCompleted: &agentv1.PromptCompleted{Report: report}}})
	return report, nil
}

func (a *Agent) finishReport(ps *promptState, r *agentv1.PromptReport) {
	end := a.opts.Now()
	r.PromptId = ps.id
	r.Usage, r.Cost = ps.usage, ps.cost
	r.Turns, r.ToolCalls, r.FollowUps = ps.turns, ps.toolCalls, ps.followUps
	t := &agentv1.PromptTiming{
		StartTime:         timestamppb.New(ps.start),
		EndTime:           timestamppb.New(end),
		Duration:          durationpb.New(end.Sub(ps.start)),
		InferenceDuration: durationpb.New(ps.inference),
		ToolDuration:      durationpb.New(ps.tool),
	}
	if !ps.firstOutput.IsZero() {
		t.TimeToFirstOutput = durationpb.New(ps.firstOutput.Sub(ps.start))
	}
	r.Timing = t
	for f := range ps.files {
		r.FilesTouched = append(r.FilesTouched, f)
	}
	slices.Sort(r.FilesTouched)
	a.mu.Lock()
	addUsage(a.usage, ps.usage)
	addCost(a.cost, ps.cost)
	a.mu.Unlock()
}

// ended reports a prompt whose context is done: aborted, cancelled by the
// caller or timed out.
func ended(ctx context.Context) *agentv1.PromptReport {
	cause := context.Cause(ctx)
	if errors.Is(cause, errWallClock) {
		return &agentv1.PromptReport{Status: agentv1.PromptStatus_PROMPT_STATUS_WALL_CLOCK_TIMEOUT,
			Error: &agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED, Message: "the prompt hit its wall-clock timeout"}}
	}
	msg := "the prompt was cancelled"
	if ab, ok := errors.AsType[*aborted](cause); ok {
		msg = ab.Error()
	}
	return &agentv1.PromptReport{Status: agentv1.PromptStatus_PROMPT_STATUS_CANCELLED,
		Error: &agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED, Message: msg}}
}

func failed(kind agentv1.AgentErrorKind, msg string) *agentv1.PromptReport {
	return &agentv1.PromptReport{Status: agentv1.PromptStatus_PROMPT_STATUS_FAILED, Error: &agentv1.AgentError{Kind: kind, Message: msg}}
}

// rounds is the loop proper.
func (a *Agent) rounds(ctx context.Context, ps *promptState) *agentv1.PromptReport {
	for {
		if err := a.park(ctx, ps); err != nil {
			return ended(ctx)
		}
		a.drainSteering(ps.id)
		if ctx.Err() != nil {
			return ended(ctx)
		}
		if a.opts.MaxTurns > 0 && ps.turns >= a.opts.MaxTurns {
			a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_TurnLimitReached{TurnLimitReached: &agentv1.TurnLimitReached{Limit: a.opts.MaxTurns}}})
			return &agentv1.PromptReport{Status: agentv1.PromptStatus_PROMPT_STATUS_TURN_LIMIT,
				Error: &agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED, Message: "the prompt used every allowed turn"}}
		}
		if a.opts.Compaction && !ps.compactionFail {
			a.maybeCompact(ctx, ps, agentv1.CompactionReason_COMPACTION_REASON_THRESHOLD, false)
		}
		ps.turns++
		turn := ps.turns
		// The round is cancellable before anyone hears of it.
		turnCtx, endTurn := a.startTurnSpan(ctx, turn)
		roundCtx, roundCancel := context.WithCancelCause(turnCtx)
		roundCancel = endTurn(roundCancel)
		a.mu.Lock()
		a.run.roundCancel, a.run.turn = roundCancel, turn
		a.mu.Unlock()
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_TurnStarted{TurnStarted: &agentv1.TurnStarted{Turn: turn, RequestedModel: a.opts.Model}}})
		resp, lerr := a.streamTurn(roundCtx, ps, turn)
		if lerr != nil {
			a.endRound(roundCancel)
			if a.interrupted(roundCtx, ps, turn) {
				continue
			}
			if ctx.Err() != nil {
				return ended(ctx)
			}
			if lerr.GetKind() == llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH && a.opts.Compaction && !ps.compactionFail {
				if a.maybeCompact(ctx, ps, agentv1.CompactionReason_COMPACTION_REASON_OVERFLOW, true) {
					continue
				}
			}
			r := failed(agentv1.AgentErrorKind_AGENT_ERROR_KIND_LLM, "model call failed: "+lerr.GetMessage())
			r.Error.Llm = lerr
			return r
		}

		a.commitTurn(ps, turn, resp)
		calls := toolCalls(resp)
		finish := resp.GetFinishReason()
		if finish == llmv1.FinishReason_FINISH_REASON_LENGTH || finish == llmv1.FinishReason_FINISH_REASON_INCOMPLETE {
			if n := len(resp.GetSuppressedToolCalls()); n > 0 {
				a.warn(ps.id, agentv1.WarningKind_WARNING_KIND_TRUNCATED_TOOL_CALL, "tool calls cut off by the output limit were dropped", map[string]string{"count": itoa(n)})
			}
			a.warn(ps.id, agentv1.WarningKind_WARNING_KIND_OUTPUT_LIMIT, "the model stopped before finishing its turn", map[string]string{"finish_reason": finish.String()})
			if !ps.lengthContinued {
				ps.lengthContinued = true
				a.endRound(roundCancel)
				a.appendMessage(userMessage(continueText))
				continue
			}
		}
		if len(calls) == 0 {
			a.endRound(roundCancel)
			if a.nextFollowUp(ps) {
				continue
			}
			return &agentv1.PromptReport{Status: agentv1.PromptStatus_PROMPT_STATUS_COMPLETED, Output: responseText(resp)}
		}

		gone := a.runTools(roundCtx, ps, calls)
		a.endRound(roundCancel)
		if gone != nil {
			r := failed(agentv1.AgentErrorKind_AGENT_ERROR_KIND_SANDBOX_UNAVAILABLE, "the sandbox is unavailable: "+gone.output)
			if gone.fatal {
				r = failed(agentv1.AgentErrorKind_AGENT_ERROR_KIND_TOOL_EXECUTION, "tool "+gone.tool+" failed in a way that stops the prompt: "+gone.output)
			}
			r.Error.ToolName = gone.tool
			return r
		}
		if a.interrupted(roundCtx, ps, turn) {
			continue
		}
		if ctx.Err() != nil {
			return ended(ctx)
		}
		if a.opts.LoopDetection {
			a.detectLoop(ps, calls)
		}
		a.taskReminder(ps, calls)
	}
}

func (a *Agent) endRound(cancel context.CancelCauseFunc) {
	a.mu.Lock()
	a.run.roundCancel = nil
	a.mu.Unlock()
	cancel(nil)
}

// interrupted reports a round cancelled by Interrupt or Steer(now).
func (a *Agent) interrupted(roundCtx context.Context, ps *promptState, turn int32) bool {
	in, ok := errors.AsType[*interruption](context.Cause(roundCtx))
	if !ok {
		return false
	}
	a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_RoundInterrupted{RoundInterrupted: &agentv1.RoundInterrupted{
		Generation: in.gen, Cause: in.cause, Parked: in.parked, Turn: turn}}})
	return true
}

// park waits while the prompt is parked, until steering arrives.
func (a *Agent) park(ctx context.Context, ps *promptState) error {
	for {
		a.mu.Lock()
		r := a.run
		parked, gen := r.parked, r.parkedGen
		r.parkedGen = 0
		turn := r.turn
		a.mu.Unlock()
		if gen != 0 {
			a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_RoundInterrupted{RoundInterrupted: &agentv1.RoundInterrupted{
				Generation: gen, Cause: agentv1.InterruptCause_INTERRUPT_CAUSE_INTERRUPT, Parked: true, Turn: turn}}})
		}
		if !parked {
			return nil
		}
		select {
		case <-r.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drainSteering commits queued steering as user messages.
func (a *Agent) drainSteering(promptID string) {
	a.mu.Lock()
	queued := a.steering
	a.steering = nil
	for _, s := range queued {
		a.history = append(a.history, userMessage(s.text))
	}
	a.mu.Unlock()
	for _, s := range queued {
		a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_SteeringInjected{SteeringInjected: &agentv1.SteeringInjected{
			SteeringId: s.id, Text: s.text, Actor: s.actor}}})
	}
}

// nextFollowUp commits the next queued follow-up, if any.
func (a *Agent) nextFollowUp(ps *promptState) bool {
	a.mu.Lock()
	if len(a.followUps) == 0 {
		a.mu.Unlock()
		return false
	}
	f := a.followUps[0]
	a.followUps = a.followUps[1:]
	a.mu.Unlock()
	f.text = a.expand(ps.id, f.text)
	a.appendMessage(userMessage(f.text))
	ps.followUps++
	a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_UserInput{UserInput: &agentv1.UserInput{
		Text: f.text, Source: agentv1.UserInputSource_USER_INPUT_SOURCE_FOLLOW_UP, FollowUpId: f.id}}})
	return true
}

// expand applies a "/name" skill invocation, emitting skill_activated.
func (a *Agent) expand(promptID, text string) string {
	if a.opts.Expand == nil {
		return text
	}
	exp, name := a.opts.Expand(text)
	if name == "" {
		return text
	}
	a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_SkillActivated{SkillActivated: &agentv1.SkillActivated{
		SkillName: name, Source: agentv1.SkillSource_SKILL_SOURCE_SLASH}}})
	return exp
}

// commitTurn appends the assistant message and reports it.
func (a *Agent) commitTurn(ps *promptState, turn int32, resp *llmv1.Response) {
	addUsage(ps.usage, resp.GetUsage())
	addCost(ps.cost, resp.GetCost())
	msg := &llmv1.Message{Role: llmv1.Role_ROLE_ASSISTANT, Parts: sanitizeCalls(resp.GetParts())}
	a.appendMessage(msg)
	var reasoning strings.Builder
	for _, p := range resp.GetParts() {
		if r := p.GetReasoning(); r != nil {
			reasoning.WriteString(r.GetText())
		}
	}
	a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_AssistantMessage{AssistantMessage: &agentv1.AssistantMessage{
		Turn:          turn,
		Text:          responseText(resp),
		Reasoning:     reasoning.String(),
		Model:         resp.GetModelId(),
		Provider:      resp.GetProviderId(),
		Usage:         resp.GetUsage(),
		Cost:          resp.GetCost(),
		ToolCallCount: int32(len(toolCalls(resp))),
		FinishReason:  resp.GetFinishReason(),
		ContextWindow: a.contextUsage(),
	}}})
}

// detectLoop looks for a repeating pattern of 1 to 3 tool-calling turns in
// the last LoopWindow turns and steers the model away from it.
func (a *Agent) detectLoop(ps *promptState, calls []ToolCall) {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(c.Name)
		b.WriteByte(0)
		b.WriteString(c.Arguments)
		b.WriteByte(0)
	}
	ps.loopWindow = append(ps.loopWindow, b.String())
	reps := a.opts.LoopThreshold
	window := max(LoopWindow, 3*reps)
	if len(ps.loopWindow) > window {
		ps.loopWindow = ps.loopWindow[1:]
	}
	if p := repeatingPattern(ps.loopWindow, reps); p > 0 {
		ps.loopWindow = nil
		a.mu.Lock()
		a.steering = append(a.steering, steer{id: "loop-" + ps.id + "-" + itoa(int(ps.turns)), text: loopWarning, actor: &agentv1.Actor{Kind: "system", DisplayName: "loop detection"}})
		a.mu.Unlock()
		a.event(ps.id, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_LoopDetected{LoopDetected: &agentv1.LoopDetected{PatternLength: int32(p), WindowSize: int32(window)}}})
	}
}

// TaskReminderTurns is how many assistant turns without TaskCreate or
// TaskUpdate bring the task reminder.
const TaskReminderTurns = 10

const taskReminder = "<system-reminder>The task tools have not been used for a while. If you are working on a multi-step task, track it with TaskCreate and mark progress with TaskUpdate. Ignore this if it does not apply, and do not mention this reminder to the user.</system-reminder>"

// taskReminder counts tool-calling turns without TaskCreate or TaskUpdate
// and, at the tenth, queues the reminder; only when both tools are
// offered. Using either resets the count.
func (a *Agent) taskReminder(ps *promptState, calls []ToolCall) {
	if !a.hasTaskTools {
		return
	}
	for _, c := range calls {
		if c.Name == "TaskCreate" || c.Name == "TaskUpdate" {
			a.mu.Lock()
			a.turnsSinceTask = 0
			a.mu.Unlock()
			return
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.turnsSinceTask++
	if a.turnsSinceTask < TaskReminderTurns {
		return
	}
	a.turnsSinceTask = 0
	a.steering = append(a.steering, steer{id: "tasks-" + ps.id + "-" + itoa(int(ps.turns)), text: taskReminder, actor: &agentv1.Actor{Kind: "system", DisplayName: "task reminder"}})
}

// repeatingPattern returns the shortest p in 1..3 such that the window ends
// with at least reps complete repetitions of a p-turn group and every
// complete group in the window equals the last one; 0 when none.
func repeatingPattern(w []string, reps int) int {
	for p := 1; p <= 3; p++ {
		groups := len(w) / p
		if groups < reps {
			continue
		}
		last := w[len(w)-p:]
		ok := true
		for g := 1; g < groups && ok; g++ {
			start := len(w) - (g+1)*p
			ok = slices.Equal(w[start:start+p], last)
		}
		if ok {
			return p
		}
	}
	return 0
}

func (a *Agent) warn(promptID string, kind agentv1.WarningKind, msg string, details map[string]string) {
	a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_Warning{Warning: &agentv1.Warning{Kind: kind, Message: msg, Details: details}}})
}

// event emits ev for the prompt; a failing log is noticed by the service,
// which ends the session.
func (a *Agent) event(promptID string, ev *agentv1.AgentEvent) {
	ev.PromptId = promptID
	_, _ = a.emit.Emit(ev)
}

func (a *Agent) appendMessage(m *llmv1.Message) {
	a.mu.Lock()
	a.history = append(a.history, m)
	a.mu.Unlock()
}

// sanitizeCalls replaces tool-call arguments that are not a JSON object
// with "{}" in the history: the call still runs with the raw text (and
// gets an invalid-arguments result the model sees), but providers refuse a
// conversation replaying malformed JSON. apply_patch may be a freeform
// tool whose arguments are raw text.
func sanitizeCalls(parts []*llmv1.ContentPart) []*llmv1.ContentPart {
	out := parts
	for i, p := range parts {
		c := p.GetToolCall()
		if c == nil || c.GetName() == "apply_patch" || isJSONObject(c.GetArguments()) {
			continue
		}
		if &out[0] == &parts[0] {
			out = slices.Clone(parts)
		}
		fixed := proto.CloneOf(c)
		fixed.Arguments = "{}"
		out[i] = &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: fixed}}
	}
	return out
}

func isJSONObject(s string) bool {
	var v map[string]json.RawMessage
	return strings.TrimSpace(s) == "" || json.Unmarshal([]byte(s), &v) == nil
}

func userMessage(text string) *llmv1.Message {
	return &llmv1.Message{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: text}}}}}
}

func responseText(resp *llmv1.Response) string {
	var b strings.Builder
	for _, p := range resp.GetParts() {
		if t := p.GetText(); t != nil {
			b.WriteString(t.GetText())
		}
	}
	return b.String()
}

func toolCalls(resp *llmv1.Response) []ToolCall {
	var out []ToolCall
	for _, p := range resp.GetParts() {
		if c := p.GetToolCall(); c != nil {
			out = append(out, ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArguments()})
		}
	}
	return out
}
