// Package loop is the coding-agent loop of one session: it streams a model
// turn from the gateway, runs the turn's tool calls, feeds the results
// back, and repeats until the model answers or a limit is hit. It handles
// steering, follow-ups, interrupts, aborts, loop detection and context
// compaction, and reports everything it does as agent events.
package loop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// Model is the part of the LLM gateway the loop calls;
// llmv1.LLMGatewayServiceClient is one.
type Model interface {
	Stream(ctx context.Context, in *llmv1.StreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[llmv1.StreamResponse], error)
	Complete(ctx context.Context, in *llmv1.CompleteRequest, opts ...grpc.CallOption) (*llmv1.CompleteResponse, error)
}

// ToolCall is one call the model made.
type ToolCall struct{ ID, Name, Arguments string }

// ToolResult is a call's outcome. Output is what the model sees (cut to
// the tool's limit); Full is the retained output for events.
type ToolResult struct {
	Output       string
	Full         string
	IsError      bool
	Kind         agentv1.ToolErrorKind
	CharsOmitted int64
	Process      *agentv1.ProcessOutcome
	// ObservedBytes counts every byte of output the tool observed,
	// RetainedBytes those Full keeps, OmittedBytes those it lacks. All
	// zero: Full is the whole output.
	ObservedBytes, RetainedBytes, OmittedBytes int64
	// Images follow Output in the result the model sees.
	Images []*llmv1.ImagePart
	// Fatal says the failure must stop the prompt (a failure of the tool
	// machinery itself, such as a middleware that broke): the prompt fails
	// with AGENT_ERROR_KIND_TOOL_EXECUTION after the round's results are
	// committed.
	Fatal bool
}

// Tools runs the session's tools. Run never fails: failures are error
// results.
type Tools interface {
	Definitions() []*llmv1.ToolDefinition
	Run(ctx context.Context, c ToolCall) ToolResult
	Serial(name string) bool
}

// Emitter commits events to the session's durable stream.
type Emitter interface {
	Emit(ev *agentv1.AgentEvent) (uint64, error)
}

// Defaults of Options.
const (
	DefaultCompactionThreshold = 80
	DefaultPreserveTurns       = 6
	LoopWindow                 = 10
	DefaultLoopThreshold       = 3
	SteeringCapacity           = 32
	MaxReplays                 = 3
	summaryMaxTokens           = 4096
)

// Options tune one agent. Zero values mean: no limit, feature off.
type Options struct {
	SessionID       string // names the session in spans
	Model           string // selector sent to the gateway
	System          string
	MaxTokens       int32
	ReasoningEffort llmv1.ReasoningEffort
	// Speed is the model's speed tier, such as "fast"; empty: standard.
	Speed         string
	MaxTurns      int32
	WallClock     time.Duration
	LoopDetection bool
	// LoopThreshold is how many repetitions make a loop (default 3).
	LoopThreshold int
	Compaction    bool
	// CompactionThreshold is the percent of ContextWindow that triggers
	// compaction (default 80); PreserveTurns the assistant turns kept
	// verbatim (default 6).
	CompactionThreshold int32
	PreserveTurns       int
	ContextWindow       int64
	// ReplayBackoff is the wait before replaying a turn whose stream
	// failed after output (attempt from 2); default 1 s doubling, at most
	// 60 s.
	ReplayBackoff func(attempt int) time.Duration
	Now           func() time.Time
	// Expand, when set, expands a human input (a prompt or a follow-up)
	// that invokes a skill as "/name rest": it returns the text to commit
	// and the skill's name, "" when the input invokes none.
	Expand func(text string) (expanded, skill string)
	// PromptEnd, when set, runs when a prompt has ended, before
	// prompt_completed (the prompt_end hooks).
	PromptEnd func(ctx context.Context, promptID string, report *agentv1.PromptReport)
}

// Agent is one session's conversation and loop. Its control methods may be
// called from any goroutine while Prompt runs.
type Agent struct {
	model Model
	tools Tools
	emit  Emitter
	opts  Options

	mu         sync.Mutex
	history    []*llmv1.Message
	steering   []steer
	followUps  []followUp
	run        *run
	generation int64
	usage      *llmv1.Usage
	cost       *llmv1.Cost
	// Tool definitions are computed once; the set does not change.
	defs []*llmv1.ToolDefinition
	// hasTaskTools: TaskCreate and TaskUpdate are both offered;
	// turnsSinceTask counts tool-calling turns without either (under mu).
	hasTaskTools   bool
	turnsSinceTask int
}

type steer struct {
	id, text string
	actor    *agentv1.Actor
}

type followUp struct{ id, text string }

// run is the prompt in progress.
type run struct {
	id          string
	cancel      context.CancelCauseFunc
	roundCancel context.CancelCauseFunc // nil between rounds
	parked      bool
	parkedGen   int64 // generation of the interrupt that parked it, until reported
	wake        chan struct{}
	turn        int32
}

// New returns an agent with the given history (nil for a new session).
func New(model Model, tools Tools, emit Emitter, opts Options, history []*llmv1.Message) *Agent {
	if opts.CompactionThreshold <= 0 {
		opts.CompactionThreshold = DefaultCompactionThreshold
	}
	if opts.LoopThreshold < 2 {
		opts.LoopThreshold = DefaultLoopThreshold
	}
	if opts.PreserveTurns <= 0 {
		opts.PreserveTurns = DefaultPreserveTurns
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReplayBackoff == nil {
		opts.ReplayBackoff = defaultReplayBackoff
	}
	a := &Agent{model: model, tools: tools, emit: emit, opts: opts, history: history,
		usage: &llmv1.Usage{}, cost: &llmv1.Cost{}, defs: tools.Definitions()}
	var create, update bool
	for _, d := range a.defs {
		create = create || d.GetName() == "TaskCreate"
		update = update || d.GetName() == "TaskUpdate"
	}
	a.hasTaskTools = create && update
	return a
}

func defaultReplayBackoff(attempt int) time.Duration {
	d := time.Second << (attempt - 2)
	return min(d, 60*time.Second)
}

// ErrBusy is returned by Prompt when a prompt is already running.
var ErrBusy = errors.New("a prompt is already running")

// ErrNotRunning is returned by FollowUp when no prompt runs.
var ErrNotRunning = errors.New("no prompt is running")

// interruption is the cause a round is cancelled with.
type interruption struct {
	gen    int64
	cause  agentv1.InterruptCause
	parked bool
}

func (i *interruption) Error() string { return fmt.Sprintf("round interrupted (generation %d)", i.gen) }

// aborted is the cause a prompt is cancelled with by Abort.
type aborted struct{ reason string }

func (a *aborted) Error() string {
	if a.reason == "" {
		return "prompt aborted"
	}
	return "prompt aborted: " + a.reason
}

var errWallClock = errors.New("wall-clock timeout")

// History returns a copy of the conversation.
func (a *Agent) History() []*llmv1.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*llmv1.Message(nil), a.history...)
}

// Totals returns the tokens and cost of every prompt so far.
func (a *Agent) Totals() (*llmv1.Usage, *llmv1.Cost) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return cloneUsage(a.usage), cloneCost(a.cost)
}

// Running returns the running prompt's id and whether it is parked.
func (a *Agent) Running() (promptID string, parked bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.run == nil {
		return "", false
	}
	return a.run.id, a.run.parked
}

// Steer queues guidance; with now it interrupts the current round first.
// It returns the queue depth and whether the oldest message was dropped.
func (a *Agent) Steer(id, text string, now bool, actor *agentv1.Actor) (depth int, evicted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.steering) >= SteeringCapacity {
		a.steering = a.steering[1:]
		evicted = true
	}
	a.steering = append(a.steering, steer{id: id, text: text, actor: actor})
	if r := a.run; r != nil {
		if r.parked {
			r.parked = false
			signal(r.wake)
		} else if now && r.roundCancel != nil {
			a.generation++
			r.roundCancel(&interruption{gen: a.generation, cause: agentv1.InterruptCause_INTERRUPT_CAUSE_STEER})
		}
	}
	return len(a.steering), evicted
}

// FollowUp queues another user turn for the running prompt.
func (a *Agent) FollowUp(id, text string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.run == nil {
		return 0, ErrNotRunning
	}
	a.followUps = append(a.followUps, followUp{id: id, text: text})
	return len(a.followUps), nil
}

// Interrupt cancels the current round and parks the prompt until steering
// arrives. It reports false when no prompt runs or it is already parked.
func (a *Agent) Interrupt() (bool, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.run
	if r == nil || r.parked {
		return false, 0
	}
	a.generation++
	r.parked = true
	if r.roundCancel != nil {
		r.roundCancel(&interruption{gen: a.generation, cause: agentv1.InterruptCause_INTERRUPT_CAUSE_INTERRUPT, parked: true})
	} else {
		r.parkedGen = a.generation // reported when the loop reaches the park
	}
	return true, a.generation
}

// Abort cancels the running prompt; it reports false when none runs.
func (a *Agent) Abort(reason string) (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.run == nil {
		return false, ""
	}
	a.run.cancel(&aborted{reason: reason})
	return true, a.run.id
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
