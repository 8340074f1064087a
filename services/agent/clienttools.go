package agent

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/mcptools"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// DefaultClientToolTimeout is how long a client tool call waits for
// SubmitToolResult by default.
const DefaultClientToolTimeout = 5 * time.Minute

var clientToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// reservedTools are names the session's own tools take.
var reservedTools = map[string]bool{"spawn_agent": true, "send_input": true, "wait": true, "close_agent": true, "use_skill": true}

// clientCalls are a session's client tool calls waiting for their result,
// and those answered or timed out (to tell NOT_FOUND from
// FAILED_PRECONDITION), by tool call id.
type clientCalls struct {
	mu    sync.Mutex
	calls map[string]*clientCall
	// resolved are the ids of ended calls, oldest first, kept so that a
	// late answer is FAILED_PRECONDITION; at most maxResolvedClientCalls,
	// so a long session does not keep every call it ever made.
	resolved []string
}

// maxResolvedClientCalls bounds the ended client calls a session remembers.
const maxResolvedClientCalls = 1024

type clientCall struct {
	answer   chan clientAnswer // buffered 1; sent once, under mu
	answered bool
}

type clientAnswer struct {
	output  string
	isError bool
}

func badClientTool(i int, name, msg string) error {
	field := fmt.Sprintf("client_tools[%d]", i)
	full := fmt.Sprintf("%s %q: %s", field, name, msg)
	return domain.New(codes.InvalidArgument, "INVALID_CLIENT_TOOL", full, grpcerr.Meta("field", field, "name", name), grpcerr.Field(field, full))
}

// clientTools validates the client's tool definitions and wraps them: a
// call emits client_tool_requested and waits for SubmitToolResult, the
// call's cancellation or the timeout.
func (sess *session) clientTools(defs []*agentv1.ClientTool) ([]tools.Extra, error) {
	sess.clientCalls = &clientCalls{calls: map[string]*clientCall{}}
	seen := map[string]bool{}
	var out []tools.Extra
	for i, d := range defs {
		name := d.GetName()
		switch {
		case !clientToolName.MatchString(name):
			return nil, badClientTool(i, name, "the name must be letters, digits, _ and -, at most 64")
		case tools.IsBuiltin(name) || reservedTools[name] || strings.HasPrefix(name, "mcp__") || seen[name]:
			return nil, badClientTool(i, name, "the name is taken by another tool")
		case strings.TrimSpace(d.GetDescription()) == "":
			return nil, badClientTool(i, name, "a description is required")
		}
		seen[name] = true
		params := d.GetParameters()
		if strings.TrimSpace(params) == "" {
			params = `{"type":"object"}`
		}
		if _, err := mcptools.Compile([]byte(params)); err != nil {
			return nil, badClientTool(i, name, "parameters: "+strings.TrimPrefix(err.Error(), "its input schema "))
		}
		timeout := DefaultClientToolTimeout
		if t := d.GetTimeout(); t != nil {
			if t.CheckValid() != nil || t.AsDuration() <= 0 {
				return nil, badClientTool(i, name, "timeout must be a positive duration")
			}
			timeout = t.AsDuration()
		}
		out = append(out, tools.Extra{
			Name: name, Description: d.GetDescription(), Parameters: params, Category: tools.CategorySubagent,
			Limit: tools.Limit{MaxChars: mcptools.OutputLimit, Mode: tools.HeadTail},
			Run: func(ctx context.Context, callID string, args []byte) (string, bool) {
				return sess.callClient(ctx, name, callID, string(args), timeout)
			},
		})
	}
	return out, nil
}

func (sess *session) callClient(ctx context.Context, name, callID, args string, timeout time.Duration) (string, bool) {
	cc := sess.clientCalls
	c := &clientCall{answer: make(chan clientAnswer, 1)}
	cc.mu.Lock()
	cc.calls[callID] = c
	cc.mu.Unlock()
	sess.emitLive(&agentv1.AgentEvent{PromptId: sess.currentPrompt(), Event: &agentv1.AgentEvent_ClientToolRequested{ClientToolRequested: &agentv1.ClientToolRequested{
		ToolCallId: callID, ToolName: name, Arguments: args, ExpireTime: timestamppb.New(time.Now().Add(timeout))}}})
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var (
		ans  clientAnswer
		got  bool
		why  string
		done = func() {
			cc.mu.Lock()
			defer cc.mu.Unlock()
			if c.answered { // a SubmitToolResult raced the timeout: take it
				ans, got = <-c.answer, true
				return
			}
			c.answered = true
		}
	)
	select {
	case ans = <-c.answer:
		got = true
	case <-timer.C:
		why = fmt.Sprintf("The client did not return a result for %s within %s.", name, timeout)
		done()
	case <-ctx.Done():
		why = "Cancelled"
		done()
	}
	cc.forget(callID)
	if !got {
		return why, true
	}
	return ans.output, ans.isError
}

// forget records that the call of id has ended, dropping the oldest ended
// calls beyond the bound.
func (cc *clientCalls) forget(id string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.resolved = append(cc.resolved, id)
	for len(cc.resolved) > maxResolvedClientCalls {
		old := cc.resolved[0]
		cc.resolved = cc.resolved[1:]
		if e, ok := cc.calls[old]; ok && e.answered { // not a live call that reused the id
			delete(cc.calls, old)
		}
	}
}

// SubmitToolResult implements agentv1.AgentServiceServer.
func (s *Service) SubmitToolResult(ctx context.Context, req *agentv1.SubmitToolResultRequest) (*agentv1.SubmitToolResultResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	switch id := req.GetToolCallId(); {
	case id == "":
		return nil, domain.InvalidField("tool_call_id", "tool_call_id is required")
	case len(id) > maxIDLen:
		return nil, domain.InvalidField("tool_call_id", fmt.Sprintf("tool_call_id is longer than %d characters", maxIDLen))
	}
	sess, err := s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	cc := sess.clientCalls
	if cc == nil {
		return nil, withInfo(codes.NotFound, fmt.Sprintf("session %q waits for no client tool call %q", req.GetSessionId(), req.GetToolCallId()),
			reasonClientToolNotFound, map[string]string{"session_id": req.GetSessionId(), "tool_call_id": req.GetToolCallId()})
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	c, ok := cc.calls[req.GetToolCallId()]
	if !ok {
		return nil, withInfo(codes.NotFound, fmt.Sprintf("session %q waits for no client tool call %q", req.GetSessionId(), req.GetToolCallId()),
			reasonClientToolNotFound, map[string]string{"session_id": req.GetSessionId(), "tool_call_id": req.GetToolCallId()})
	}
	if c.answered {
		return nil, withInfo(codes.FailedPrecondition, fmt.Sprintf("client tool call %q was already answered or timed out", req.GetToolCallId()),
			reasonClientToolResolved, map[string]string{"tool_call_id": req.GetToolCallId()})
	}
	c.answered = true
	sess.drive(ctx) // the result goes to the model: governed by its sender's token
	c.answer <- clientAnswer{output: req.GetOutput(), isError: req.GetIsError()}
	return &agentv1.SubmitToolResultResponse{}, nil
}
