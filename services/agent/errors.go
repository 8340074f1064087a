package agent

import "github.com/fabro-sh/fabro-go/platform/grpcerr"

// domain builds every status the agent returns (docs/ERRORS.md, "## agent").
const domain grpcerr.Domain = "agent.fabro.dev"

// The agent's own ErrorInfo reasons; the shared ones (INVALID_ARGUMENT,
// UPSTREAM_UNAVAILABLE, INTERNAL...) come from grpcerr.
const (
	reasonSessionNotFound      = "SESSION_NOT_FOUND"
	reasonForwardRefused       = "FORWARD_REFUSED"
	reasonSessionClosed        = "SESSION_CLOSED"
	reasonSessionSuspended     = "SESSION_SUSPENDED"
	reasonSessionLoaded        = "SESSION_LOADED"
	reasonPromptRunning        = "PROMPT_RUNNING"
	reasonPromptResuming       = "PROMPT_RESUMING"
	reasonReplayLimit          = "REPLAY_LIMIT"
	reasonRecordConflict       = "RECORD_CONFLICT"
	reasonNoPrompt             = "NO_RUNNING_PROMPT"
	reasonNothingUnfinished    = "NOTHING_UNFINISHED"
	reasonParentNotOpen        = "PARENT_NOT_OPEN"
	reasonPermissionEscalation = "PERMISSION_ESCALATION"
	reasonTreeLimit            = "TREE_LIMIT"
	reasonSessionLimit         = "SESSION_LIMIT"
	reasonSandboxNotReady      = "SANDBOX_NOT_READY"
	reasonSandboxOwner         = "SANDBOX_OWNER_MISMATCH"
	reasonSandboxGone          = "SANDBOX_GONE"
	reasonRecordCorrupt        = "RECORD_CORRUPT"
	reasonShuttingDown         = "SHUTTING_DOWN"
	reasonEventLog             = "EVENT_LOG_FAILED"
	reasonNATSUnavailable      = "NATS_UNAVAILABLE"
	reasonEventsExpired        = "EVENTS_EXPIRED"
	reasonSequenceAhead        = "SEQUENCE_AHEAD"
	reasonRecordsUnavailable   = "RECORDS_UNAVAILABLE"
	reasonClientToolNotFound   = "TOOL_CALL_NOT_FOUND"
	reasonClientToolResolved   = "TOOL_CALL_RESOLVED"
	reasonApprovalNotFound     = "APPROVAL_NOT_FOUND"
	reasonApprovalResolved     = "APPROVAL_RESOLVED"
)
