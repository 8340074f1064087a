// Package tooltest exposes the agent's tool set (internal/tools) to tests
// outside this module: e2e/tools runs every tool against the real sandbox
// service, a module the agent must not require (docs/ARCHITECTURE.md,
// "Module boundaries"). It is a test-support surface of aliases, not an API
// for programs: the agent's own code uses internal/tools, and what is here
// changes with it.
package tooltest

import "github.com/fabro-sh/fabro-go/services/agent/internal/tools"

// The tool set and what it runs on.
type (
	Set             = tools.Set
	Env             = tools.Env
	Call            = tools.Call
	Result          = tools.Result
	Extra           = tools.Extra
	Category        = tools.Category
	PermissionLevel = tools.PermissionLevel
	Limit           = tools.Limit
	Mode            = tools.Mode
)

// NewSet is the tool set of a profile at a permission level.
var NewSet = tools.NewSet

// Permission levels.
const (
	ReadOnly  = tools.ReadOnly
	ReadWrite = tools.ReadWrite
	Full      = tools.Full
)

// Extra tools' categories.
const (
	CategoryShell    = tools.CategoryShell
	CategorySubagent = tools.CategorySubagent
)

// Truncation modes.
const (
	HeadTail = tools.HeadTail
	Tail     = tools.Tail
	Head     = tools.Head
)

// Result.ErrorKind values.
const (
	KindUnknownTool        = tools.KindUnknownTool
	KindInvalidArguments   = tools.KindInvalidArguments
	KindDenied             = tools.KindDenied
	KindFailed             = tools.KindFailed
	KindCancelled          = tools.KindCancelled
	KindTimeout            = tools.KindTimeout
	KindSandboxUnavailable = tools.KindSandboxUnavailable
)

// The shell's live output cap (Env.ShellOutput) and the marker it ends with.
const (
	MaxLiveOutput    = tools.MaxLiveOutput
	LiveOutputCapped = tools.LiveOutputCapped
)
