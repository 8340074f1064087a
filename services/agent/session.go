package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/hooks"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/mcptools"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/toolchain"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// session is one agent session.
type session struct {
	svc            *Service
	order          int64
	requestedModel string
	requestedOpts  *agentv1.AgentOptions
	opts           *agentv1.AgentOptions // effective
	env            *agentv1.EnvironmentInfo
	memory         *agentv1.Memory
	system         string
	toolset        *tools.Set
	todos          *tools.TodoStore
	log            *bus.Log
	agent          *loop.Agent

	mu      sync.Mutex
	info    *agentv1.Session // identity and lifecycle; usage filled on read
	running bool
	done    chan struct{} // closed when the running prompt ends
	// unloaded is closed when the session leaves memory (its record holds
	// it from then on); nil for one never registered.
	unloaded chan struct{}
	promptID string
	// lastReport is the report of the last prompt that ended.
	lastReport *agentv1.PromptReport
	skills     []skill       // discovered
	extras     []tools.Extra // subagent and skill tools

	// Tool extensions: the settings layers (inherited by subagents), the
	// merged policy, the hooks and the middleware chain every call takes.
	ext          extSpec
	layers       []settings.Layer
	policy       *settings.Policy
	hooks        *hooks.Engine
	chain        toolchain.Next
	allowSession map[string]bool // what asks approved for the session (toolchain.Call.Key); under mu
	mcp          *mcptools.Manager
	extExtras    []tools.Extra // MCP and client tools
	clientCalls  *clientCalls

	recordMu sync.Mutex // serializes writeRecord
	// recordRev is the revision of the record this session last wrote (0:
	// none yet); under recordMu.
	recordRev records.Revision
	// Background checkpoints (checkpoint): every record built is numbered
	// (recordGen) as it is built, under ckMu, which also guards the newest
	// checkpoint not yet written (pendingRec); writtenGen, the newest
	// written, is under recordMu. Lock order: recordMu, then ckMu.
	ckMu                  sync.Mutex
	recordGen, pendingGen uint64
	pendingRec            *agentv1.SessionRecord
	checkpointing         bool
	writtenGen            uint64
	// loadedAt is when this session was loaded: a record closed after it
	// was closed by another writer (putRecord).
	loadedAt time.Time
	// checkpointTurn is the running prompt's turn the history leads up to
	// (SessionRecord.unfinished_prompt_turn); under mu.
	checkpointTurn int32
	// fenced: another replica owns the session now; this one writes
	// nothing more for it (cluster.go). Under mu.
	fenced bool
	// governor is the caller whose token governs the running prompt's
	// model calls (governance.go); nil: none (no token). Under mu.
	governor *auth.Principal
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newIncarnation names one load of a session (bus.Log.SetIncarnation):
// the time in hex, then random bits, unique across processes and restarts.
func newIncarnation() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x%s", time.Now().UnixNano(), hex.EncodeToString(b[:]))
}

// lastIDTime is the time part of the newest session id, in Unix
// microseconds.
var lastIDTime atomic.Int64

// newSessionID is a session id that begins with its creation time (13 hex
// digits of Unix microseconds, strictly increasing in this process), so
// that ids sort oldest first and a listing by id is a listing by age.
func newSessionID() string {
	now := time.Now().UnixMicro()
	for {
		last := lastIDTime.Load()
		t := max(now, last+1)
		if lastIDTime.CompareAndSwap(last, t) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			return fmt.Sprintf("s_%013x%s", t, hex.EncodeToString(b[:]))
		}
	}
}

// build wires the session's tools, log and loop.
func (s *Service) build(sess *session, lastSeq uint64, history []*llmv1.Message) {
	info := sess.info
	profile := profileName(info.GetRoute())
	kind := agentv1.TodoListKind_TODO_LIST_KIND_OPENAI_PLAN
	listID := info.GetSessionId()
	if tools.Profile(profile) == tools.ProfileAnthropic {
		kind, listID = agentv1.TodoListKind_TODO_LIST_KIND_ANTHROPIC_TASKS, info.GetRootSessionId()
	}
	if kind == agentv1.TodoListKind_TODO_LIST_KIND_ANTHROPIC_TASKS {
		sess.todos = s.taskList(listID) // shared by the root and its subagents
	} else {
		sess.todos = tools.NewTodoStore(listID, kind, func(_ string, c tools.TodoChange) { sess.todoEvent(c) })
	}
	o := sess.opts
	sess.extras = append(append(s.subagentTools(sess), s.skillTools(sess)...), sess.extExtras...)
	env := tools.Env{
		Sandbox:               s.sandbox,
		SandboxID:             info.GetSandboxId(),
		WorkDir:               sess.env.GetWorkingDirectory(),
		SessionID:             info.GetSessionId(),
		Summarize:             s.summarizer(info.GetRoute()),
		Credential:            s.credential,
		BraveBaseURL:          s.braveBaseURL,
		AllowPrivateNetwork:   s.fetchPrivate,
		Todos:                 sess.todos,
		DefaultCommandTimeout: o.GetDefaultCommandTimeout().AsDuration(),
		MaxCommandTimeout:     o.GetMaxCommandTimeout().AsDuration(),
		ShellOutput:           sess.shellOutput,
		Extra:                 sess.extras,
		Lifted:                sess.policy.Rules.Lifts,
		Conceal:               sess.conceal,
	}
	sess.toolset = tools.NewSet(profile, tools.LevelFromProto(info.GetPermissionLevel()), env, toolLimits(o.GetToolOutputLimits()))
	s.buildChain(sess)
	sess.log = bus.NewLog(s.bus, info.GetSessionId(), info.GetParentSessionId(), info.GetRootSessionId(), lastSeq, nil)
	sess.log.SetIncarnation(newIncarnation())
	sess.loadedAt = time.Now()
	id := info.GetSessionId()
	sess.log.Observe(s.hub.commit, func(err error) { s.hub.fail(id, err) })
	lopts := loop.Options{
		SessionID:           info.GetSessionId(),
		Model:               info.GetRoute().GetProvider() + "/" + info.GetRoute().GetModel(),
		System:              sess.system,
		MaxTokens:           o.GetMaxTokens(),
		ReasoningEffort:     o.GetReasoningEffort(),
		Speed:               o.GetSpeed(),
		MaxTurns:            o.GetMaxTurns(),
		WallClock:           o.GetWallClockTimeout().AsDuration(),
		LoopDetection:       o.GetLoopDetection(),
		LoopThreshold:       int(o.GetLoopDetectionThreshold()),
		Compaction:          o.GetContextCompaction(),
		CompactionThreshold: o.GetCompactionThresholdPercent(),
		ContextWindow:       info.GetRoute().GetContextWindowTokens(),
		ReplayBackoff:       s.replayBackoff,
		Expand:              sess.expandSkill,
		PromptEnd: func(ctx context.Context, promptID string, r *agentv1.PromptReport) {
			sess.hooks.Event(ctx, agentv1.HookEvent_HOOK_EVENT_PROMPT_END, promptID, r.GetStatus().String())
		},
	}
	sess.agent = loop.New(actingLLM{s.llm, sess}, toolAdapter{sess.toolset, sess.chain, &sess.policy.Rules}, sessionEmitter{s, sess}, lopts, history)
}

// taskList is the Anthropic task list of a session tree, shared by the
// root and every subagent: a change is emitted on the log of the session
// whose tool call made it.
func (s *Service) taskList(rootID string) *tools.TodoStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.taskLists[rootID]; ok {
		return t
	}
	t := tools.NewTodoStore(rootID, agentv1.TodoListKind_TODO_LIST_KIND_ANTHROPIC_TASKS, func(sessionID string, c tools.TodoChange) {
		// Called with the store locked: look the session up without
		// touching the store.
		s.mu.Lock()
		sess := s.sessions[sessionID]
		s.mu.Unlock()
		if sess != nil && sess.log != nil {
			sess.todoEvent(c)
		}
	})
	if s.taskLists == nil {
		s.taskLists = map[string]*tools.TodoStore{}
	}
	s.taskLists[rootID] = t
	return t
}

// sessionEmitter commits the loop's events to the session's log and
// tells the parent of a subagent when it starts a turn.
type sessionEmitter struct {
	svc  *Service
	sess *session
}

func (e sessionEmitter) Emit(ev *agentv1.AgentEvent) (uint64, error) {
	e.svc.checkpointEvent(e.sess, ev) // the workspace checkpoint of the turn before
	if ev.GetPromptCompleted() != nil {
		// Whoever sees the prompt end finds a record that no longer names
		// it as unfinished.
		e.sess.writeRecordAs(true)
	}
	if ts := ev.GetTurnStarted(); ts != nil && !e.svc.noTurnCheckpoint {
		// The checkpoint of a restart or a takeover, written before the
		// turn is announced: the history the turn starts from, the prompt
		// that runs and the turn, which then runs again from its start.
		e.sess.mu.Lock()
		e.sess.checkpointTurn = ts.GetTurn()
		e.sess.mu.Unlock()
		e.sess.checkpoint()
	}
	seq, err := e.sess.log.Emit(ev)
	if ts := ev.GetTurnStarted(); ts != nil && err == nil {
		if parent := e.svc.parentOf(e.sess); parent != nil {
			parent.emitLive(&agentv1.AgentEvent{PromptId: parent.currentPrompt(), Event: &agentv1.AgentEvent_SubAgentTurnStarted{
				SubAgentTurnStarted: &agentv1.SubAgentTurnStarted{ChildSessionId: e.sess.info.GetSessionId(), Turn: ts.GetTurn()}}})
		}
	}
	return seq, err
}

// toolAdapter runs the session's tool middleware chain for the loop; the
// tools every call of which a rule denies are not offered.
type toolAdapter struct {
	set    *tools.Set
	chain  toolchain.Next
	hidden interface{ Hidden(string) bool }
}

func (t toolAdapter) Definitions() []*llmv1.ToolDefinition {
	defs := t.set.Definitions()
	return slices.DeleteFunc(defs, func(d *llmv1.ToolDefinition) bool { return t.hidden.Hidden(d.GetName()) })
}
func (t toolAdapter) Serial(name string) bool { return t.set.Serial(name) }
func (t toolAdapter) Run(ctx context.Context, c loop.ToolCall) (r loop.ToolResult) {
	defer func() {
		// A broken link of the chain is not the model's doing: the prompt
		// stops with the ToolExecution error kind.
		if p := recover(); p != nil {
			r = loop.ToolResult{Output: fmt.Sprintf("the tool middleware failed: %v", p), IsError: true,
				Kind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_FAILED, Fatal: true}
		}
	}()
	return t.chain(ctx, toolchain.Call{ToolCall: c})
}

// runSet runs one call on the tool set: the chain's last link.
func runSet(ctx context.Context, set *tools.Set, c loop.ToolCall) loop.ToolResult {
	r := set.Run(ctx, tools.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	out := loop.ToolResult{Output: r.Output, Full: r.Full, IsError: r.IsError, Kind: r.ErrorKindProto(), CharsOmitted: r.CharsOmitted, Process: r.Process,
		ObservedBytes: r.ObservedBytes, RetainedBytes: r.RetainedBytes, OmittedBytes: r.OmittedBytes}
	for _, img := range r.Images {
		out.Images = append(out.Images, &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: img.Data}, MediaType: img.MediaType})
	}
	return out
}

func toolLimits(m map[string]*agentv1.ToolOutputLimit) map[string]tools.Limit {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]tools.Limit, len(m))
	for name, l := range m {
		tl := tools.Limit{MaxChars: int(l.GetMaxChars()), MaxLines: int(l.GetMaxLines())}
		if l.GetMode() == agentv1.TruncationMode_TRUNCATION_MODE_TAIL {
			tl.Mode = tools.Tail
		} else if l.GetMode() == agentv1.TruncationMode_TRUNCATION_MODE_UNSPECIFIED {
			tl.Mode = tools.DefaultLimit(name).Mode
		}
		out[name] = tl
	}
	return out
}

// summarizer answers web_fetch's prompt with the session's model.
func (s *Service) summarizer(route *agentv1.ModelRoute) func(ctx context.Context, prompt, content string) (string, error) {
	small := sync.OnceValue(func() string { return s.smallModel(route) })
	return func(ctx context.Context, prompt, content string) (string, error) {
		resp, err := s.llm.Complete(ctx, &llmv1.CompleteRequest{Request: &llmv1.Request{
			Model:  small(),
			System: "Answer the question about the web page below, using only its content. Be concise.",
			Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{
				Text: "Question: " + prompt + "\n\nPage:\n" + content}}}}}},
		}})
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range resp.GetResponse().GetParts() {
			b.WriteString(p.GetText().GetText())
		}
		return b.String(), nil
	}
}

// smallModel is the catalog's small model for web_fetch's prompt: the
// session provider's enabled model with the lowest output price; the
// session's own model when the catalog prices none.
func (s *Service) smallModel(route *agentv1.ModelRoute) string {
	own := route.GetProvider() + "/" + route.GetModel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	best, price := own, int64(-1)
	for token := ""; ; {
		resp, err := s.llm.ListModels(ctx, &llmv1.ListModelsRequest{ProviderId: route.GetProvider(), PageSize: 1000, PageToken: token})
		if err != nil {
			s.logger.Warn("list models for the small model", "provider", route.GetProvider(), "error", err)
			return own
		}
		for _, m := range resp.GetModels() {
			p := m.GetPricing().GetOutputUsdMicrosPerMillion()
			if !m.GetEnabled() || m.GetPricing() == nil || p <= 0 {
				continue
			}
			if price < 0 || p < price {
				best, price = route.GetProvider()+"/"+m.GetModelId(), p
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	return best
}

// shellOutput publishes live shell output; the tools cap it at
// tools.MaxLiveOutput bytes per call.
func (sess *session) shellOutput(callID string, stream sandboxv1.OutputStream, data []byte) {
	_, _ = sess.log.Emit(&agentv1.AgentEvent{PromptId: sess.currentPrompt(), Event: &agentv1.AgentEvent_ToolCallOutputDelta{
		ToolCallOutputDelta: &agentv1.ToolCallOutputDelta{ToolCallId: callID, Delta: string(data), Stream: stream}}})
}

func (sess *session) todoEvent(c tools.TodoChange) {
	ev := &agentv1.AgentEvent{PromptId: sess.currentPrompt()}
	switch {
	case c.Created != nil:
		ev.Event = &agentv1.AgentEvent_TodoCreated{TodoCreated: c.Created}
	case c.Updated != nil:
		ev.Event = &agentv1.AgentEvent_TodoUpdated{TodoUpdated: c.Updated}
	case c.Deleted != nil:
		ev.Event = &agentv1.AgentEvent_TodoDeleted{TodoDeleted: c.Deleted}
	default:
		return
	}
	_, _ = sess.log.Emit(ev)
}

func (sess *session) currentPrompt() string {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.promptID
}

// snapshotInfo returns the session's Session message as of now.
func (sess *session) snapshotInfo() *agentv1.Session {
	sess.mu.Lock()
	info := proto.CloneOf(sess.info)
	running := sess.running
	sess.mu.Unlock()
	if sess.agent != nil {
		info.Usage, info.Cost = sess.agent.Totals()
		if running {
			id, parked := sess.agent.Running()
			info.State = agentv1.SessionState_SESSION_STATE_RUNNING
			if parked {
				info.State = agentv1.SessionState_SESSION_STATE_PARKED
			}
			if id != "" {
				info.ActivePromptId = id
			}
		}
	}
	if sess.log != nil {
		info.LastSequence = sess.log.Committed()
	}
	if ttl := sess.svc.limits.IdleTTL; ttl > 0 && info.GetState() == agentv1.SessionState_SESSION_STATE_IDLE && info.GetParentSessionId() == "" {
		info.ExpireTime = timestamppb.New(info.GetUpdateTime().AsTime().Add(ttl))
	}
	return info
}

func (sess *session) state() agentv1.SessionState {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.info.GetState()
}

func (sess *session) agentAbort(reason string) {
	if sess.agent != nil {
		sess.agent.Abort(reason)
	}
}

// emit commits a session-level event (outside any prompt).
func (sess *session) emit(ev *agentv1.AgentEvent) {
	_, _ = sess.log.Emit(ev)
	sess.touch()
}

// emitLive commits an event about a subagent unless the session is closed
// (its log then refuses events anyway).
func (sess *session) emitLive(ev *agentv1.AgentEvent) {
	if sess.state() == agentv1.SessionState_SESSION_STATE_CLOSED || sess.log == nil {
		return
	}
	sess.emit(ev)
}

func (sess *session) touch() {
	sess.mu.Lock()
	sess.info.UpdateTime = timestamppb.Now()
	sess.mu.Unlock()
}

// end closes the session: aborts its prompt and waits for it, emits
// session_ended, writes the record and deletes an owned sandbox. It
// reports false when the session was already closed.
func (sess *session) end(ctx context.Context, reason agentv1.SessionEndReason, aerr *agentv1.AgentError) bool {
	sess.mu.Lock()
	fenced := sess.fenced
	sess.mu.Unlock()
	if fenced {
		return false // another replica's now, its sandbox too
	}
	done, ok := sess.markClosed()
	if !ok {
		return false
	}
	if done != nil {
		sess.agent.Abort("the session is closing")
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	usage, cost := sess.agent.Totals()
	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_SessionEnded{SessionEnded: &agentv1.SessionEnded{
		Reason: reason, Error: aerr, Usage: usage, Cost: cost}}})
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_ = sess.log.Flush(flushCtx)
	cancel()
	sess.log.Close()
	sess.writeRecord()
	sess.svc.release(ctx, sess.info.GetSessionId())
	sess.svc.unload(sess) // its record holds it from now on
	sess.svc.forgetApprovals(sess.info.GetSessionId())
	if sess.info.GetParentSessionId() == "" {
		sess.svc.mu.Lock()
		delete(sess.svc.taskLists, sess.info.GetSessionId()) // the record keeps it for a resume
		sess.svc.mu.Unlock()
	}
	sess.mcp.Close()
	if sess.info.GetSandboxOwned() {
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if _, err := sess.svc.sandbox.DeleteSandbox(delCtx, &sandboxv1.DeleteSandboxRequest{SandboxId: sess.info.GetSandboxId()}); err != nil {
			sess.svc.logger.WarnContext(ctx, "delete owned sandbox", "session_id", sess.info.GetSessionId(), "sandbox_id", sess.info.GetSandboxId(), "error", err)
		}
		cancel()
	}
	return true
}

// writeRecord stores the durable SessionRecord: the only writer of a
// loaded session's record.
func (sess *session) writeRecord() { sess.writeRecordAs(false) }

// writeRecordAs writes the record; promptDone records the running prompt
// as finished (it is about to report its end).
func (sess *session) writeRecordAs(promptDone bool) {
	if sess.agent == nil {
		return
	}
	sess.recordMu.Lock()
	defer sess.recordMu.Unlock()
	sess.ckMu.Lock()
	rec := sess.buildRecord(promptDone)
	sess.recordGen++
	gen := sess.recordGen
	sess.ckMu.Unlock()
	if rec != nil {
		sess.put(rec, gen)
	}
}

// checkpoint takes the record as it stands (the turn's checkpoint) and
// writes it in the background, off the loop's path: a record write costs
// milliseconds, a turn against a fast model hardly more. A later write of
// either kind supersedes it; the snapshot's sequence keeps a restart
// reading the log from before it.
func (sess *session) checkpoint() {
	if sess.agent == nil {
		return
	}
	sess.ckMu.Lock()
	defer sess.ckMu.Unlock()
	rec := sess.buildRecord(false)
	if rec == nil {
		return
	}
	sess.recordGen++
	sess.pendingRec, sess.pendingGen = rec, sess.recordGen
	if !sess.checkpointing {
		sess.checkpointing = true
		sess.svc.checkpoints.Go(sess.drainCheckpoints)
	}
}

// drainCheckpoints writes the newest pending checkpoint until none is
// left, skipping one a later write superseded.
func (sess *session) drainCheckpoints() {
	for {
		sess.ckMu.Lock()
		rec, gen := sess.pendingRec, sess.pendingGen
		sess.pendingRec = nil
		if rec == nil {
			sess.checkpointing = false
			sess.ckMu.Unlock()
			return
		}
		sess.ckMu.Unlock()
		sess.recordMu.Lock()
		if gen > sess.writtenGen {
			sess.put(rec, gen)
		}
		sess.recordMu.Unlock()
	}
}

// put writes rec, built as write gen; recordMu held.
func (sess *session) put(rec *agentv1.SessionRecord, gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sess.putRecord(ctx, rec); err != nil {
		sess.svc.logger.Warn("write session record", "session_id", rec.GetSession().GetSessionId(), "error", err)
	}
	sess.writtenGen = max(sess.writtenGen, gen)
}

// buildRecord is the loaded session's record as of now; nil once the
// session is fenced (the new owner's record). ckMu held.
func (sess *session) buildRecord(promptDone bool) *agentv1.SessionRecord {
	sess.mu.Lock()
	fenced := sess.fenced
	sess.mu.Unlock()
	if fenced {
		return nil
	}
	info := sess.snapshotInfo()
	info.ExpireTime = nil
	if promptDone {
		info.ActivePromptId = ""
	}
	sess.mu.Lock()
	turn := sess.checkpointTurn
	var gov governor
	if sess.governor != nil {
		gov = governor(*sess.governor)
	}
	sess.mu.Unlock()
	if info.GetActivePromptId() == "" {
		turn, gov = 0, governor{}
	}
	rec := &agentv1.SessionRecord{
		FormatVersion:  records.FormatVersion,
		Session:        info,
		RequestedModel: sess.requestedModel,
		Options:        sess.requestedOpts,
		Messages:       sess.agent.History(),
		TodoLists:      []*agentv1.TodoList{sess.todos.List()},
		WriteTime:      timestamppb.Now(),
		Settings:       sess.ext.request,

		UnfinishedPromptId:             info.GetActivePromptId(),
		UnfinishedPromptTurn:           turn,
		UnfinishedPromptTokenId:        gov.TokenID,
		UnfinishedPromptTokenPrincipal: gov.principal(),
		ApprovedProjectSettingsSha256:  sess.ext.approvedHash,
		ClientTools:                    sess.ext.clientTools,
	}
	return rec
}

// putRecord writes the loaded session's record with the revision it last
// wrote (compare-and-set). On a conflict, another writer changed it (a
// resume reads the record but not its revision; a close on another
// replica): a fresh read decides. The loaded session is the record's
// owner and writes again over the fresh revision, unless the stored
// record was closed or deleted meanwhile, which it does not undo. recordMu
// held.
func (sess *session) putRecord(ctx context.Context, rec *agentv1.SessionRecord) error {
	store := sess.svc.records
	id := rec.GetSession().GetSessionId()
	for attempt := 0; ; attempt++ {
		rev, err := store.Put(ctx, rec, sess.recordRev)
		if err == nil {
			sess.recordRev = rev
			return nil
		}
		if !errors.Is(err, records.ErrConflict) || attempt == 3 {
			return err
		}
		stored, fresh, gerr := store.Get(ctx, id)
		switch {
		case errors.Is(gerr, records.ErrNotFound):
			return fmt.Errorf("the record was deleted meanwhile; not written again: %w", err)
		case gerr != nil:
			return gerr
		case stored.GetSession().GetState() == agentv1.SessionState_SESSION_STATE_CLOSED &&
			rec.GetSession().GetState() != agentv1.SessionState_SESSION_STATE_CLOSED && stored.GetWriteTime().AsTime().After(sess.loadedAt):
			return fmt.Errorf("another writer closed the session; its record is kept: %w", err)
		}
		sess.recordRev = fresh
	}
}

// readSandboxFile reads a whole file through the sandbox service; a
// missing file is os.ErrNotExist.
func (s *Service) readSandboxFile(ctx context.Context, sandboxID, path string, limit int64) ([]byte, int64, error) {
	st, err := s.sandbox.StatFile(ctx, &sandboxv1.StatFileRequest{SandboxId: sandboxID, Path: path})
	if err != nil {
		return nil, 0, err
	}
	if !st.GetExists() || st.GetInfo().GetType() != sandboxv1.FileType_FILE_TYPE_FILE {
		return nil, 0, os.ErrNotExist
	}
	stream, err := s.sandbox.ReadFileBytes(ctx, &sandboxv1.ReadFileBytesRequest{SandboxId: sandboxID, Path: path, Length: limit})
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	var size int64
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, size, nil
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, m.GetData()...)
		size = m.GetSizeBytes()
	}
}

// describeTools lists every tool of the session's profile, allowed or not,
// for the snapshot.
func (sess *session) describeTools() []*agentv1.SessionTool {
	all := tools.NewSet(profileName(sess.info.GetRoute()), tools.Full, tools.Env{Extra: sess.extras}, nil)
	visible := map[string]bool{}
	for _, n := range sess.toolset.Names() {
		visible[n] = true
	}
	var out []*agentv1.SessionTool
	for _, d := range all.Definitions() {
		name := d.GetName()
		cat := toolCategory(name)
		st := &agentv1.SessionTool{Definition: d, Category: cat, Allowed: visible[name], Sequential: all.Serial(name)}
		if !st.Allowed {
			st.DeniedReason = fmt.Sprintf("permission level %s does not allow %s tools", sess.info.GetPermissionLevel(), strings.ToLower(strings.TrimPrefix(cat.String(), "TOOL_CATEGORY_")))
		} else if sess.policy.Rules.Hidden(name) {
			st.Allowed, st.DeniedReason = false, "a deny rule without a pattern forbids every call"
		}
		if l, ok := sess.opts.GetToolOutputLimits()[name]; ok {
			st.OutputLimit = l
		} else if l := tools.DefaultLimit(name); l.MaxChars > 0 || l.MaxLines > 0 {
			st.OutputLimit = &agentv1.ToolOutputLimit{Mode: agentv1.TruncationMode_TRUNCATION_MODE_HEAD_TAIL}
			if l.Mode == tools.Tail {
				st.OutputLimit.Mode = agentv1.TruncationMode_TRUNCATION_MODE_TAIL
			}
			if l.MaxChars > 0 {
				st.OutputLimit.MaxChars = proto.Int64(int64(l.MaxChars))
			}
			if l.MaxLines > 0 {
				st.OutputLimit.MaxLines = proto.Int32(int32(l.MaxLines))
			}
		}
		out = append(out, st)
	}
	return out
}

func toolCategory(name string) agentv1.ToolCategory {
	switch name {
	case "read_file", "read_many_files", "grep", "glob", "list_dir", "Read", "Grep", "Glob":
		return agentv1.ToolCategory_TOOL_CATEGORY_READ
	case "write_file", "edit_file", "apply_patch", "Write", "Edit", "update_plan", "TaskCreate", "TaskUpdate", "TaskGet", "TaskList":
		return agentv1.ToolCategory_TOOL_CATEGORY_WRITE
	case "spawn_agent", "send_input", "wait", "close_agent":
		return agentv1.ToolCategory_TOOL_CATEGORY_SUBAGENT
	}
	return agentv1.ToolCategory_TOOL_CATEGORY_SHELL
}
