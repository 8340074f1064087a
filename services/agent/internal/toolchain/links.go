package toolchain

import (
	"context"
	"fmt"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/permission"
)

// Rules is the rules' link: a deny rule refuses the call with the rule's
// text and source; an ask rule marks it for approval; an allow rule marks
// it allowed (which skips nothing but a later ask). No rules: it costs one
// nil check.
func Rules(rs *permission.Set, workDir string) Middleware {
	return func(ctx context.Context, c Call, next Next) loop.ToolResult {
		if rs.Empty() {
			return next(ctx, c)
		}
		switch eff, r := rs.Decide(c.Name, permission.SubjectOf(c.Name, c.Arguments, workDir)); eff {
		case permission.Deny:
			return Denied(fmt.Sprintf("Permission denied: the rule %q (%s) forbids this call of %s. Do not retry it; choose another way or ask the user.", r.Text, r.Source, c.Name))
		case permission.Ask:
			c.Verdict, c.Reason = Ask, fmt.Sprintf("rule %q (%s)", r.Text, r.Source)
		case permission.Allow:
			if c.Verdict == Undecided {
				c.Verdict, c.Reason = Allow, fmt.Sprintf("rule %q (%s)", r.Text, r.Source)
			}
		}
		return next(ctx, c)
	}
}

// Hooks runs the pre_tool_use and post_tool_use hooks of a call.
type Hooks interface {
	// Pre returns the call as the hooks leave it (a rewrite, a verdict),
	// or a non-empty deny text.
	Pre(ctx context.Context, c Call) (out Call, rewritten bool, deny string)
	// Post returns the result with what the hooks add.
	Post(ctx context.Context, c Call, r loop.ToolResult) loop.ToolResult
}

// HookLink runs h around the rest of the chain. A rewritten call goes
// through recheck (the rules' link) again, so a rewrite cannot slip past
// a deny rule.
func HookLink(h Hooks, recheck Middleware) Middleware {
	return func(ctx context.Context, c Call, next Next) loop.ToolResult {
		out, rewritten, deny := h.Pre(ctx, c)
		if deny != "" {
			return Denied(deny)
		}
		var r loop.ToolResult
		if rewritten && recheck != nil {
			r = recheck(ctx, out, next)
		} else {
			r = next(ctx, out)
		}
		if r.Kind == agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED {
			return r // the tool did not run: nothing to post-process
		}
		return h.Post(ctx, out, r)
	}
}

// Approver asks for an approval and waits for the answer: ok runs the
// call, else message is what the model is told.
type Approver interface {
	Approve(ctx context.Context, c Call) (ok bool, message string)
}

// Approval is the approval's link: a call marked Ask waits for a.
func Approval(a Approver) Middleware {
	return func(ctx context.Context, c Call, next Next) loop.ToolResult {
		if c.Verdict == Ask {
			if ok, msg := a.Approve(ctx, c); !ok {
				return Denied(msg)
			}
		}
		return next(ctx, c)
	}
}
