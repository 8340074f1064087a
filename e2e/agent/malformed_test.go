package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/paging"
)

// recvErr is the error of a server-streaming call: at the call or at the
// first receive.
func recvErr[T any](s grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// enumReasons are the reasons an unknown enum value may get: the handler's
// own check, or the server runtime's, which walks every request first.
var enumReasons = []string{grpcerr.ReasonInvalidArgument, "UNKNOWN_ENUM_VALUE"}

// TestMalformedInput sends every agent RPC zero, unknown and out-of-range
// values, field by field, and checks the code, the ErrorInfo reason and
// the field named (metadata "field", and a BadRequest violation for
// INVALID_ARGUMENT). Nothing in it may be INTERNAL.
func TestMalformedInput(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	open := st.create(t, sbID, nil)
	closed := st.create(t, sbID, nil)
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: closed}); err != nil {
		t.Fatal(err)
	}
	sb := &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}
	const model = "anthropic/claude-sonnet-4.5"
	create := func(mod func(*agentv1.CreateSessionRequest)) func(context.Context) error {
		return func(ctx context.Context) error {
			req := &agentv1.CreateSessionRequest{Model: model, Sandbox: sb}
			mod(req)
			_, err := st.agent.CreateSession(ctx, req)
			return err
		}
	}
	withOpts := func(o *agentv1.AgentOptions) func(context.Context) error {
		return create(func(r *agentv1.CreateSessionRequest) { r.Options = o })
	}
	badIDs := map[string]string{"empty": "", "slash": "s_a/b", "space": "s a", "too long": "s_" + strings.Repeat("x", 200)}
	otherFilter := paging.Encode(paging.Filter("SESSION_STATE_CLOSED", "", "false"), "s_zzz")
	a := st.agent

	type tc struct {
		rpc, name string
		call      func(context.Context) error
		code      codes.Code
		reasons   []string // any of them
		field     string   // "" when the error names none
	}
	invalid := func(rpc, name, field string, call func(context.Context) error) tc {
		return tc{rpc, name, call, codes.InvalidArgument, []string{grpcerr.ReasonInvalidArgument}, field}
	}
	enum := func(rpc, name, field string, call func(context.Context) error) tc {
		return tc{rpc, name, call, codes.InvalidArgument, enumReasons, field}
	}
	tests := []tc{
		invalid("CreateSession", "no sandbox", "sandbox_id", create(func(r *agentv1.CreateSessionRequest) { r.Sandbox = nil })),
		enum("CreateSession", "unknown permission_level", "permission_level", create(func(r *agentv1.CreateSessionRequest) { r.PermissionLevel = 99 })),
		invalid("CreateSession", "compaction threshold 0", "options.compaction_threshold_percent", withOpts(&agentv1.AgentOptions{CompactionThresholdPercent: proto.Int32(0)})),
		invalid("CreateSession", "compaction threshold 101", "options.compaction_threshold_percent", withOpts(&agentv1.AgentOptions{CompactionThresholdPercent: proto.Int32(101)})),
		invalid("CreateSession", "negative max_tokens", "options.max_tokens", withOpts(&agentv1.AgentOptions{MaxTokens: proto.Int32(-1)})),
		invalid("CreateSession", "negative max_turns", "options.max_turns", withOpts(&agentv1.AgentOptions{MaxTurns: proto.Int32(-1)})),
		invalid("CreateSession", "negative max_open_sessions", "options.subagents.max_open_sessions", withOpts(&agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{MaxOpenSessions: proto.Int32(-1)}})),
		invalid("CreateSession", "negative max_depth", "options.subagents.max_depth", withOpts(&agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{MaxDepth: proto.Int32(-2)}})),
		invalid("CreateSession", "loop threshold 1", "options.loop_detection_threshold", withOpts(&agentv1.AgentOptions{LoopDetectionThreshold: proto.Int32(1)})),
		invalid("CreateSession", "loop threshold 11", "options.loop_detection_threshold", withOpts(&agentv1.AgentOptions{LoopDetectionThreshold: proto.Int32(11)})),
		invalid("CreateSession", "negative wall clock", "options.wall_clock_timeout", withOpts(&agentv1.AgentOptions{WallClockTimeout: durationpb.New(-1)})),
		invalid("CreateSession", "invalid wall clock", "options.wall_clock_timeout", withOpts(&agentv1.AgentOptions{WallClockTimeout: &durationpb.Duration{Seconds: 1, Nanos: -5}})),
		invalid("CreateSession", "negative default command timeout", "options.default_command_timeout", withOpts(&agentv1.AgentOptions{DefaultCommandTimeout: durationpb.New(-1)})),
		invalid("CreateSession", "negative max command timeout", "options.max_command_timeout", withOpts(&agentv1.AgentOptions{MaxCommandTimeout: durationpb.New(-1)})),
		enum("CreateSession", "unknown reasoning effort", "options.reasoning_effort", withOpts(&agentv1.AgentOptions{ReasoningEffort: llmv1.ReasoningEffort(99)})),
		invalid("CreateSession", "negative tool output limit", `options.tool_output_limits["read_file"]`, withOpts(&agentv1.AgentOptions{ToolOutputLimits: map[string]*agentv1.ToolOutputLimit{"read_file": {MaxChars: proto.Int64(-1)}}})),
		enum("CreateSession", "unknown truncation mode", `options.tool_output_limits["read_file"].mode`, withOpts(&agentv1.AgentOptions{ToolOutputLimits: map[string]*agentv1.ToolOutputLimit{"read_file": {Mode: 9}}})),
		invalid("CreateSession", "limit for a tool not in the profile", `options.tool_output_limits["nosuch"]`, withOpts(&agentv1.AgentOptions{ToolOutputLimits: map[string]*agentv1.ToolOutputLimit{"nosuch": {MaxChars: proto.Int64(1)}}})),
		{"CreateSession", "unknown model", create(func(r *agentv1.CreateSessionRequest) { r.Model = "nosuch/model-9" }), codes.NotFound, nil, ""},
		{"CreateSession", "unknown sandbox", create(func(r *agentv1.CreateSessionRequest) {
			r.Sandbox = &agentv1.CreateSessionRequest_SandboxId{SandboxId: "sb_nope"}
		}), codes.NotFound, nil, ""},
		{"CreateSession", "bad sandbox spec", create(func(r *agentv1.CreateSessionRequest) {
			r.Sandbox = &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "nosuchdriver"}}
		}), codes.InvalidArgument, nil, ""},
		invalid("CreateSession", "bad parent id", "parent_session_id", create(func(r *agentv1.CreateSessionRequest) { r.ParentSessionId = "s/../x" })),
		{"CreateSession", "unknown parent", create(func(r *agentv1.CreateSessionRequest) { r.ParentSessionId = "s_nope" }), codes.NotFound, []string{"SESSION_NOT_FOUND"}, "parent_session_id"},
		{"CreateSession", "closed parent", create(func(r *agentv1.CreateSessionRequest) { r.ParentSessionId = closed }), codes.FailedPrecondition, []string{"PARENT_NOT_OPEN"}, ""},
		{"CreateSession", "bad client tool", create(func(r *agentv1.CreateSessionRequest) {
			r.ClientTools = []*agentv1.ClientTool{{Name: "bad name!", Description: "x"}}
		}), codes.InvalidArgument, []string{"INVALID_CLIENT_TOOL"}, "client_tools[0]"},

		invalid("Prompt", "empty text", "text", func(ctx context.Context) error {
			return recvErr(a.Prompt(ctx, &agentv1.PromptRequest{SessionId: open}))
		}),
		invalid("Prompt", "blank text", "text", func(ctx context.Context) error {
			return recvErr(a.Prompt(ctx, &agentv1.PromptRequest{SessionId: open, Text: " \n\t"}))
		}),
		invalid("Prompt", "text with continue_unfinished", "text", func(ctx context.Context) error {
			return recvErr(a.Prompt(ctx, &agentv1.PromptRequest{SessionId: open, Text: "x", ContinueUnfinished: true}))
		}),
		{"Prompt", "nothing unfinished", func(ctx context.Context) error {
			return recvErr(a.Prompt(ctx, &agentv1.PromptRequest{SessionId: open, ContinueUnfinished: true}))
		}, codes.FailedPrecondition, []string{"NOTHING_UNFINISHED"}, ""},
		{"Prompt", "closed session", func(ctx context.Context) error {
			return recvErr(a.Prompt(ctx, &agentv1.PromptRequest{SessionId: closed, Text: "x"}))
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		invalid("StartPrompt", "empty text", "text", func(ctx context.Context) error {
			_, err := a.StartPrompt(ctx, &agentv1.StartPromptRequest{SessionId: open})
			return err
		}),
		{"StartPrompt", "closed session", func(ctx context.Context) error {
			_, err := a.StartPrompt(ctx, &agentv1.StartPromptRequest{SessionId: closed, Text: "x"})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		invalid("Steer", "empty text", "text", func(ctx context.Context) error {
			_, err := a.Steer(ctx, &agentv1.SteerRequest{SessionId: open})
			return err
		}),
		enum("Steer", "unknown mode", "mode", func(ctx context.Context) error {
			_, err := a.Steer(ctx, &agentv1.SteerRequest{SessionId: open, Text: "x", Mode: 7})
			return err
		}),
		{"Steer", "closed session", func(ctx context.Context) error {
			_, err := a.Steer(ctx, &agentv1.SteerRequest{SessionId: closed, Text: "x"})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		invalid("FollowUp", "empty text", "text", func(ctx context.Context) error {
			_, err := a.FollowUp(ctx, &agentv1.FollowUpRequest{SessionId: open})
			return err
		}),
		{"FollowUp", "no running prompt", func(ctx context.Context) error {
			_, err := a.FollowUp(ctx, &agentv1.FollowUpRequest{SessionId: open, Text: "x"})
			return err
		}, codes.FailedPrecondition, []string{"NO_RUNNING_PROMPT"}, ""},
		{"Interrupt", "closed session", func(ctx context.Context) error {
			_, err := a.Interrupt(ctx, &agentv1.InterruptRequest{SessionId: closed})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		{"Abort", "closed session", func(ctx context.Context) error {
			_, err := a.Abort(ctx, &agentv1.AbortRequest{SessionId: closed})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		{"GetSnapshot", "closed session", func(ctx context.Context) error {
			_, err := a.GetSnapshot(ctx, &agentv1.GetSnapshotRequest{SessionId: closed})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		invalid("IssueEventsCredential", "no session", "session_ids", func(ctx context.Context) error {
			_, err := a.IssueEventsCredential(ctx, &agentv1.IssueEventsCredentialRequest{})
			return err
		}),
		invalid("ListSessions", "negative page_size", "page_size", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{PageSize: -1})
			return err
		}),
		invalid("ListSessions", "forged page_token", "page_token", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{PageToken: "not-a-token"})
			return err
		}),
		invalid("ListSessions", "the old offset token", "page_token", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{PageToken: "b2Zmc2V0OjI"}) // base64("offset:2")
			return err
		}),
		invalid("ListSessions", "a token of other filters", "page_token", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{PageToken: otherFilter})
			return err
		}),
		invalid("ListSessions", "a token holding a bad id", "page_token", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{PageToken: paging.Encode(paging.Filter("", "", "false"), "../x")})
			return err
		}),
		enum("ListSessions", "unknown state", "states[0]", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{States: []agentv1.SessionState{99}})
			return err
		}),
		invalid("ListSessions", "unspecified state", "states[1]", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{States: []agentv1.SessionState{agentv1.SessionState_SESSION_STATE_IDLE, 0}})
			return err
		}),
		invalid("ListSessions", "bad parent id", "parent_session_id", func(ctx context.Context) error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{ParentSessionId: "a b"})
			return err
		}),
		{"ResumeSession", "loaded session", func(ctx context.Context) error {
			_, err := a.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: open})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_LOADED"}, ""},
		invalid("ResumeSession", "bad options", "options.max_turns", func(ctx context.Context) error {
			_, err := a.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: closed, Options: &agentv1.AgentOptions{MaxTurns: proto.Int32(-3)}})
			return err
		}),
		{"ResumeSession", "unknown model", func(ctx context.Context) error {
			_, err := a.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: closed, Model: "nosuch/model-9"})
			return err
		}, codes.NotFound, nil, ""},
		{"StreamEvents", "sequence ahead", func(ctx context.Context) error {
			return recvErr(a.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: open, FromSequence: 1 << 40}))
		}, codes.OutOfRange, []string{"SEQUENCE_AHEAD"}, "from_sequence"},
		invalid("StreamEvents", "bad prompt id", "prompt_id", func(ctx context.Context) error {
			return recvErr(a.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: open, PromptId: "p/1"}))
		}),
		invalid("Approve", "empty approval_id", "approval_id", func(ctx context.Context) error {
			_, err := a.Approve(ctx, &agentv1.ApproveRequest{SessionId: open, Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY})
			return err
		}),
		invalid("Approve", "no decision", "decision", func(ctx context.Context) error {
			_, err := a.Approve(ctx, &agentv1.ApproveRequest{SessionId: open, ApprovalId: "ap_1"})
			return err
		}),
		enum("Approve", "unknown decision", "decision", func(ctx context.Context) error {
			_, err := a.Approve(ctx, &agentv1.ApproveRequest{SessionId: open, ApprovalId: "ap_1", Decision: 99})
			return err
		}),
		{"Approve", "unknown approval", func(ctx context.Context) error {
			_, err := a.Approve(ctx, &agentv1.ApproveRequest{SessionId: open, ApprovalId: "ap_1", Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY})
			return err
		}, codes.NotFound, []string{"APPROVAL_NOT_FOUND"}, ""},
		invalid("SubmitToolResult", "empty tool_call_id", "tool_call_id", func(ctx context.Context) error {
			_, err := a.SubmitToolResult(ctx, &agentv1.SubmitToolResultRequest{SessionId: open})
			return err
		}),
		invalid("SubmitToolResult", "long tool_call_id", "tool_call_id", func(ctx context.Context) error {
			_, err := a.SubmitToolResult(ctx, &agentv1.SubmitToolResultRequest{SessionId: open, ToolCallId: strings.Repeat("c", 300)})
			return err
		}),
		{"SubmitToolResult", "unknown call", func(ctx context.Context) error {
			_, err := a.SubmitToolResult(ctx, &agentv1.SubmitToolResultRequest{SessionId: open, ToolCallId: "c1"})
			return err
		}, codes.NotFound, []string{"TOOL_CALL_NOT_FOUND"}, ""},
		{"SubmitToolResult", "closed session", func(ctx context.Context) error {
			_, err := a.SubmitToolResult(ctx, &agentv1.SubmitToolResultRequest{SessionId: closed, ToolCallId: "c1"})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
		invalid("DiffCheckpoint", "negative turn", "turn", func(ctx context.Context) error {
			_, err := a.DiffCheckpoint(ctx, &agentv1.DiffCheckpointRequest{SessionId: open, Turn: proto.Int32(-1)})
			return err
		}),
		{"DiffCheckpoint", "no such turn", func(ctx context.Context) error {
			_, err := a.DiffCheckpoint(ctx, &agentv1.DiffCheckpointRequest{SessionId: open, Turn: proto.Int32(7)})
			return err
		}, codes.NotFound, []string{"CHECKPOINT_NOT_FOUND"}, ""},
		invalid("RestoreCheckpoint", "negative turn", "turn", func(ctx context.Context) error {
			_, err := a.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: open, Turn: -3})
			return err
		}),
		{"RestoreCheckpoint", "no such turn", func(ctx context.Context) error {
			_, err := a.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: open, Turn: 9})
			return err
		}, codes.NotFound, []string{"CHECKPOINT_NOT_FOUND"}, ""},
		{"RestoreCheckpoint", "closed session", func(ctx context.Context) error {
			_, err := a.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: closed, Conversation: true})
			return err
		}, codes.FailedPrecondition, []string{"SESSION_CLOSED"}, ""},
	}
	// Every RPC naming a session: bad ids, and an unknown one.
	bySession := map[string]func(ctx context.Context, id string) error{
		"Prompt": func(ctx context.Context, id string) error {
			return recvErr(a.Prompt(ctx, &agentv1.PromptRequest{SessionId: id, Text: "x"}))
		},
		"StartPrompt": func(ctx context.Context, id string) error {
			_, err := a.StartPrompt(ctx, &agentv1.StartPromptRequest{SessionId: id, Text: "x"})
			return err
		},
		"Steer": func(ctx context.Context, id string) error {
			_, err := a.Steer(ctx, &agentv1.SteerRequest{SessionId: id, Text: "x"})
			return err
		},
		"FollowUp": func(ctx context.Context, id string) error {
			_, err := a.FollowUp(ctx, &agentv1.FollowUpRequest{SessionId: id, Text: "x"})
			return err
		},
		"Interrupt": func(ctx context.Context, id string) error {
			_, err := a.Interrupt(ctx, &agentv1.InterruptRequest{SessionId: id})
			return err
		},
		"Abort": func(ctx context.Context, id string) error {
			_, err := a.Abort(ctx, &agentv1.AbortRequest{SessionId: id})
			return err
		},
		"GetHistory": func(ctx context.Context, id string) error {
			_, err := a.GetHistory(ctx, &agentv1.GetHistoryRequest{SessionId: id})
			return err
		},
		"ListCheckpoints": func(ctx context.Context, id string) error {
			_, err := a.ListCheckpoints(ctx, &agentv1.ListCheckpointsRequest{SessionId: id})
			return err
		},
		"DiffCheckpoint": func(ctx context.Context, id string) error {
			_, err := a.DiffCheckpoint(ctx, &agentv1.DiffCheckpointRequest{SessionId: id})
			return err
		},
		"RestoreCheckpoint": func(ctx context.Context, id string) error {
			_, err := a.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: id})
			return err
		},
		"GetSnapshot": func(ctx context.Context, id string) error {
			_, err := a.GetSnapshot(ctx, &agentv1.GetSnapshotRequest{SessionId: id})
			return err
		},
		"GetSession": func(ctx context.Context, id string) error {
			_, err := a.GetSession(ctx, &agentv1.GetSessionRequest{SessionId: id})
			return err
		},
		"CloseSession": func(ctx context.Context, id string) error {
			_, err := a.CloseSession(ctx, &agentv1.CloseSessionRequest{SessionId: id})
			return err
		},
		"DeleteSession": func(ctx context.Context, id string) error {
			_, err := a.DeleteSession(ctx, &agentv1.DeleteSessionRequest{SessionId: id})
			return err
		},
		"ResumeSession": func(ctx context.Context, id string) error {
			_, err := a.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: id})
			return err
		},
		"StreamEvents": func(ctx context.Context, id string) error {
			return recvErr(a.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id}))
		},
		"Approve": func(ctx context.Context, id string) error {
			_, err := a.Approve(ctx, &agentv1.ApproveRequest{SessionId: id, ApprovalId: "ap_1", Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY})
			return err
		},
		"SubmitToolResult": func(ctx context.Context, id string) error {
			_, err := a.SubmitToolResult(ctx, &agentv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "c1"})
			return err
		},
	}
	for rpc, call := range bySession {
		for name, id := range badIDs {
			tests = append(tests, invalid(rpc, "session_id "+name, "session_id", func(ctx context.Context) error { return call(ctx, id) }))
		}
		tests = append(tests, tc{rpc, "unknown session", func(ctx context.Context) error { return call(ctx, "s_unknown") }, codes.NotFound, []string{"SESSION_NOT_FOUND"}, "session_id"})
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.rpc] = true
		t.Run(tc.rpc+"/"+tc.name, func(t *testing.T) {
			err := tc.call(t.Context())
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			info := grpcerr.InfoOf(err)
			if info == nil || info.GetDomain() == "" {
				t.Fatalf("no ErrorInfo: %v", err)
			}
			if len(tc.reasons) > 0 && !slices.Contains(tc.reasons, info.GetReason()) {
				t.Errorf("reason %s, want one of %v (%v)", info.GetReason(), tc.reasons, err)
			}
			if tc.field == "" {
				return
			}
			if got := info.GetMetadata()["field"]; got != tc.field {
				t.Errorf("ErrorInfo field %q, want %q (%v)", got, tc.field, err)
			}
			if tc.code == codes.InvalidArgument {
				var fields []string
				for _, v := range grpcerr.ViolationsOf(err) {
					fields = append(fields, v.GetField())
				}
				if !slices.Contains(fields, tc.field) {
					t.Errorf("BadRequest fields %v, want %q", fields, tc.field)
				}
			}
		})
	}
	methods := agentv1.File_fabro_agent_v1_agent_proto.Services().Get(0).Methods()
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		if !covered[name] {
			t.Errorf("RPC %s has no malformed-input case", name)
		}
	}
}

// TestCreateSubagentThroughTheAPI is the parent_session_id panic: a root
// session without subagent options, and a child created by CreateSession.
func TestCreateSubagentThroughTheAPI(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	parent := st.create(t, sbID, nil)
	resp, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5",
		Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}, ParentSessionId: parent})
	if err != nil {
		t.Fatalf("CreateSession with parent_session_id: %v", err)
	}
	if s := resp.GetSession(); s.GetParentSessionId() != parent || s.GetDepth() != 1 || s.GetRootSessionId() != parent {
		t.Errorf("child %v", s)
	}
}
