// Package toolchain is the one ordered chain every tool call of a session
// goes through: the permission level, the rules, the pre_tool_use hooks,
// the approval, then the tool (whose result the post_tool_use hooks may
// add to). Built-in, subagent, skill and any other tools take the same
// path. A link may allow (call next), deny (return an error result the
// model sees without calling next), rewrite the call (call next with other
// arguments) or replace the result (change what next returned).
package toolchain

import (
	"context"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
)

// Verdict is what the links before the approval decided about a call.
type Verdict int

// Verdicts. Undecided and Allow run the call; Ask makes the approval link
// wait for an answer.
const (
	Undecided Verdict = iota
	Allow
	Ask
)

// Call is a tool call on its way through the chain.
type Call struct {
	loop.ToolCall
	// Verdict and Reason are set by the rules and the hooks.
	Verdict Verdict
	Reason  string
	// Key is what an "allow for session" answer to the ask covers (the
	// rule that asked); empty: the tool.
	Key string
}

// Next runs the rest of the chain.
type Next func(ctx context.Context, c Call) loop.ToolResult

// Middleware is one link: it calls next to go on, or returns without.
type Middleware func(ctx context.Context, c Call, next Next) loop.ToolResult

// Build returns the chain: links in order (the first runs first), then
// tool. The closures are built once; a call allocates nothing here.
func Build(tool Next, links ...Middleware) Next {
	next := tool
	for i := len(links) - 1; i >= 0; i-- {
		link, rest := links[i], next
		next = func(ctx context.Context, c Call) loop.ToolResult { return link(ctx, c, rest) }
	}
	return next
}

// Denied is the error result of a refused call.
func Denied(message string) loop.ToolResult {
	return loop.ToolResult{Output: message, IsError: true, Kind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED}
}
