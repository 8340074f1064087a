// Package hooks runs a session's hooks: commands given the event as JSON
// on stdin, on the host or in the sandbox, with a timeout. Exit codes
// follow Claude Code: 0 succeeds (stdout may hold a JSON object), 2 blocks
// (stderr is the reason). Anything else, a timeout, or stdout that is not
// a JSON object fails: a hook_failed event, and pre_tool_use denies (fail
// closed); the other events go on unchanged.
package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/toolchain"
)

// maxOutput caps what a hook's stdout and stderr keep.
const maxOutput = 256 << 10

// Outcome is how a hook's command ended.
type Outcome struct {
	Exit           int
	Stdout, Stderr []byte
	TimedOut       bool
	Err            error // it could not start, or its end is unknown
}

// Runner runs one hook command.
type Runner interface {
	Run(ctx context.Context, command string, stdin []byte, timeout time.Duration) Outcome
}

// Host runs commands on the agent's host with bash, in their own process
// group (killed whole on timeout).
type Host struct{ Dir string }

// Run implements Runner.
func (h Host) Run(ctx context.Context, command string, stdin []byte, timeout time.Duration) Outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = h.Dir
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb capped
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	o := Outcome{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.TimedOut = true
	case errors.As(err, &ee):
		o.Exit = ee.ExitCode()
		if o.Exit < 0 {
			o.Err = fmt.Errorf("killed by %v", ee.ProcessState)
		}
	case err != nil:
		o.Err = err
	}
	return o
}

// capped keeps the first maxOutput bytes written.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Execer is the sandbox service's ExecStream.
type Execer interface {
	ExecStream(ctx context.Context, in *sandboxv1.ExecStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[sandboxv1.ExecStreamResponse], error)
}

// Sandbox runs commands in a sandbox through the sandbox service.
type Sandbox struct {
	Client    Execer
	SandboxID string
}

// Run implements Runner.
func (s Sandbox) Run(ctx context.Context, command string, stdin []byte, timeout time.Duration) Outcome {
	stream, err := s.Client.ExecStream(ctx, &sandboxv1.ExecStreamRequest{SandboxId: s.SandboxID, Spec: &sandboxv1.ExecSpec{
		Command: command, Stdin: stdin, Timeout: durationpb.New(timeout), RetainedOutputLimitBytes: maxOutput}})
	if err != nil {
		return Outcome{Err: err}
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return Outcome{Err: errors.New("the sandbox did not report how the command ended")}
		}
		if err != nil {
			return Outcome{Err: err}
		}
		if f := m.GetFinished(); f != nil {
			o := Outcome{Stdout: f.GetStdout(), Stderr: f.GetStderr()}
			switch f.GetTermination() {
			case sandboxv1.Termination_TERMINATION_EXITED:
				if f.ExitCode == nil {
					o.Err = fmt.Errorf("killed by signal %s", f.GetSignal())
				}
				o.Exit = int(f.GetExitCode())
			case sandboxv1.Termination_TERMINATION_TIMED_OUT:
				o.TimedOut = true
			default:
				o.Err = fmt.Errorf("the command ended %s", f.GetTermination())
			}
			return o
		}
	}
}

// Engine runs the hooks of one session.
type Engine struct {
	Hooks     []*settings.Hook
	Host      Runner
	Sandbox   Runner
	SessionID string
	WorkDir   string
	// Failed reports a failure (a hook_failed event).
	Failed func(*agentv1.HookFailed)
	Logger *slog.Logger
}

var _ toolchain.Hooks = (*Engine)(nil)

var eventNames = map[agentv1.HookEvent]string{
	agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE:  "pre_tool_use",
	agentv1.HookEvent_HOOK_EVENT_POST_TOOL_USE: "post_tool_use",
	agentv1.HookEvent_HOOK_EVENT_SESSION_START: "session_start",
	agentv1.HookEvent_HOOK_EVENT_PROMPT_END:    "prompt_end",
}

// input is the JSON a hook reads on stdin (Claude Code's field names).
type input struct {
	SessionID     string          `json:"session_id"`
	HookEventName string          `json:"hook_event_name"`
	Cwd           string          `json:"cwd"`
	ToolName      string          `json:"tool_name,omitempty"`
	ToolInput     json.RawMessage `json:"tool_input,omitempty"`
	ToolUseID     string          `json:"tool_use_id,omitempty"`
	ToolResponse  *toolResponse   `json:"tool_response,omitempty"`
	PromptID      string          `json:"prompt_id,omitempty"`
	Status        string          `json:"status,omitempty"`
}

type toolResponse struct {
	Output  string `json:"output"`
	IsError bool   `json:"is_error"`
}

// output is what a hook may print on stdout with exit 0.
type output struct {
	Decision           string `json:"decision"` // "block" or "approve" (Claude Code's older form)
	Reason             string `json:"reason"`
	HookSpecificOutput struct {
		PermissionDecision       string          `json:"permissionDecision"` // allow, deny, ask
		PermissionDecisionReason string          `json:"permissionDecisionReason"`
		UpdatedInput             json.RawMessage `json:"updatedInput"`
		AdditionalContext        string          `json:"additionalContext"`
	} `json:"hookSpecificOutput"`
}

// run runs one hook; a failure is reported and returned as an error.
func (e *Engine) run(ctx context.Context, h *settings.Hook, in input, callID string, failDenies bool) (*Outcome, *output, error) {
	in.SessionID, in.Cwd, in.HookEventName = e.SessionID, e.WorkDir, eventNames[h.Event]
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // hooks grep for "a > b" as the model wrote it
	_ = enc.Encode(in)
	stdin := buf.Bytes()
	r := e.Host
	if h.Place == agentv1.HookPlace_HOOK_PLACE_SANDBOX {
		r = e.Sandbox
	}
	start := time.Now()
	o := r.Run(ctx, h.Command, stdin, h.Timeout)
	fail := func(reason string, code int) (*Outcome, *output, error) {
		if ctx.Err() != nil {
			return &o, nil, ctx.Err() // cancelled with the round: not the hook's fault
		}
		if e.Failed != nil {
			e.Failed(&agentv1.HookFailed{Event: h.Event, Command: h.Command, ToolCallId: callID, Reason: reason, ExitCode: int32(code),
				Denied: failDenies, Duration: durationpb.New(time.Since(start))})
		}
		if e.Logger != nil {
			e.Logger.Warn("hook failed", "session_id", e.SessionID, "event", eventNames[h.Event], "command", h.Command, "source", h.Source, "reason", reason)
		}
		return &o, nil, errors.New(reason)
	}
	switch {
	case o.TimedOut:
		return fail(fmt.Sprintf("timed out after %s", h.Timeout), 0)
	case o.Err != nil:
		return fail(o.Err.Error(), 0)
	case o.Exit == 2:
		return &o, nil, nil
	case o.Exit != 0:
		return fail(fmt.Sprintf("exited with code %d: %s", o.Exit, clip(o.Stderr)), o.Exit)
	}
	out := &output{}
	if s := bytes.TrimSpace(o.Stdout); len(s) > 0 {
		if s[0] != '{' || json.Unmarshal(s, out) != nil {
			return fail(fmt.Sprintf("stdout is not a JSON object: %s", clip(s)), 0)
		}
	}
	return &o, out, nil
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// report is a hook_failed event for a pre_tool_use hook whose output was
// wrong in a way run does not see.
func (e *Engine) report(h *settings.Hook, callID, reason string) {
	if e.Failed != nil {
		e.Failed(&agentv1.HookFailed{Event: h.Event, Command: h.Command, ToolCallId: callID, Reason: reason, Denied: true})
	}
	if e.Logger != nil {
		e.Logger.Warn("hook failed", "session_id", e.SessionID, "event", eventNames[h.Event], "command", h.Command, "source", h.Source, "reason", reason)
	}
}

// Pre implements toolchain.Hooks: pre_tool_use hooks in order, each seeing
// the call as the previous left it.
func (e *Engine) Pre(ctx context.Context, c toolchain.Call) (toolchain.Call, bool, string) {
	rewritten := false
	for _, h := range e.Hooks {
		if h.Event != agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE || !h.Matches(c.Name) {
			continue
		}
		o, out, err := e.run(ctx, h, input{ToolName: c.Name, ToolInput: rawArgs(c.Arguments), ToolUseID: c.ID}, c.ID, true)
		if err != nil {
			return c, rewritten, fmt.Sprintf("A pre_tool_use hook failed (%v), so the call was not run.", err)
		}
		if o.Exit == 2 {
			return c, rewritten, "Blocked by a pre_tool_use hook: " + orDefault(clip(o.Stderr), "no reason given")
		}
		hs := out.HookSpecificOutput
		decision, reason := hs.PermissionDecision, hs.PermissionDecisionReason
		switch out.Decision {
		case "block":
			decision, reason = "deny", out.Reason
		case "approve":
			decision, reason = "allow", out.Reason
		}
		switch decision {
		case "deny":
			return c, rewritten, "Denied by a pre_tool_use hook: " + orDefault(reason, "no reason given")
		case "ask":
			c.Verdict, c.Reason = toolchain.Ask, "pre_tool_use hook: "+orDefault(reason, h.Command)
		case "allow":
			// A sandbox-side hook runs code the agent can rewrite, so its
			// allow never lifts an ask; a host-side one (a trusted file's)
			// may.
			if c.Verdict != toolchain.Ask || h.Place == agentv1.HookPlace_HOOK_PLACE_HOST {
				c.Verdict, c.Reason = toolchain.Allow, "pre_tool_use hook: "+orDefault(reason, h.Command)
			}
		case "":
		default:
			e.report(h, c.ID, fmt.Sprintf("unknown permissionDecision %q", decision))
			return c, rewritten, fmt.Sprintf("A pre_tool_use hook failed (unknown permissionDecision %q), so the call was not run.", decision)
		}
		if len(hs.UpdatedInput) > 0 && string(hs.UpdatedInput) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(hs.UpdatedInput, &obj) != nil {
				e.report(h, c.ID, "updatedInput is not a JSON object")
				return c, rewritten, "A pre_tool_use hook failed (updatedInput is not a JSON object), so the call was not run."
			}
			c.Arguments, rewritten = string(hs.UpdatedInput), true
		}
	}
	return c, rewritten, ""
}

// Post implements toolchain.Hooks: post_tool_use hooks add their
// additionalContext (or, exiting 2, their stderr) to the result.
func (e *Engine) Post(ctx context.Context, c toolchain.Call, r loop.ToolResult) loop.ToolResult {
	for _, h := range e.Hooks {
		if h.Event != agentv1.HookEvent_HOOK_EVENT_POST_TOOL_USE || !h.Matches(c.Name) {
			continue
		}
		o, out, err := e.run(ctx, h, input{ToolName: c.Name, ToolInput: rawArgs(c.Arguments), ToolUseID: c.ID,
			ToolResponse: &toolResponse{Output: r.Output, IsError: r.IsError}}, c.ID, false)
		if err != nil {
			continue
		}
		add := ""
		if o.Exit == 2 {
			add = clip(o.Stderr)
		} else {
			add = out.HookSpecificOutput.AdditionalContext
		}
		if add != "" {
			note := "\n\n[post_tool_use hook]\n" + add
			r.Output += note
			if r.Full != "" {
				r.Full += note
			}
		}
	}
	return r
}

// Event runs the session_start or prompt_end hooks; only failures matter.
func (e *Engine) Event(ctx context.Context, ev agentv1.HookEvent, promptID, status string) {
	for _, h := range e.Hooks {
		if h.Event == ev {
			_, _, _ = e.run(ctx, h, input{PromptID: promptID, Status: status}, "", false)
		}
	}
}

func rawArgs(a string) json.RawMessage {
	if json.Valid([]byte(a)) && strings.TrimSpace(a) != "" {
		return json.RawMessage(a)
	}
	b, _ := json.Marshal(a) // a freeform call: the text itself
	return b
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
