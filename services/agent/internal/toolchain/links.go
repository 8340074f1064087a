package toolchain

import (
	"context"
	"fmt"
	"path"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/permission"
)

// Resolver returns where each path leads inside the sandbox, links
// followed as the sandbox's own file calls follow them, in order.
type Resolver func(ctx context.Context, paths []string) ([]string, error)

// Rules is the link of the permission level and the rules: a deny rule
// (or default_mode deny_unless_allowed) refuses the call naming the rule,
// its source and what it matched; an allow rule runs it even below the
// level it would need; otherwise the level refuses what it does not allow,
// and an ask rule (or default_mode ask, or a shell line the rules cannot
// see into) marks the call for approval. level says why the permission
// level refuses a tool ("" when it does not). Paths are judged as written
// and, through resolve, where they lead: a call whose paths a rule judges
// but cannot be resolved is refused (fail closed).
func Rules(rs *permission.Set, workDir string, level func(name string) string, resolve Resolver) Middleware {
	return func(ctx context.Context, c Call, next Next) loop.ToolResult {
		if rs.Empty() {
			if why := level(c.Name); why != "" {
				return Denied(why)
			}
			return next(ctx, c)
		}
		sub := permission.SubjectOf(c.Name, c.Arguments, workDir)
		if sub.Path && len(sub.Values) > 0 && resolve != nil && rs.NeedsPaths(c.Name) {
			resolved, err := resolvePaths(ctx, resolve, workDir, sub.Values)
			if err != nil {
				return Denied(fmt.Sprintf("Permission denied: permission rules judge the paths of %s, and where they lead in the sandbox could not be found (%v), so the call was not run.", c.Name, err))
			}
			sub.Resolved = resolved
		}
		d := rs.Decide(c.Name, sub)
		switch d.Effect {
		case permission.Deny:
			return Denied(fmt.Sprintf("Permission denied: this call of %s is forbidden by %s. Do not retry it; choose another way or ask the user.", c.Name, d.Reason))
		case permission.Allow:
			// An allow rule lets the call through whatever the level.
			if c.Verdict == Undecided {
				c.Verdict, c.Reason = Allow, d.Reason
			}
			return next(ctx, c)
		}
		if why := level(c.Name); why != "" {
			return Denied(why)
		}
		if d.Effect == permission.Ask {
			c.Verdict, c.Reason, c.Key = Ask, d.Reason, d.Key
		}
		return next(ctx, c)
	}
}

// resolvePaths resolves the working directory and the paths together, and
// returns the paths' targets relative to the resolved working directory,
// as rules match them.
func resolvePaths(ctx context.Context, resolve Resolver, workDir string, values []string) ([]string, error) {
	abs := make([]string, 0, len(values)+1)
	abs = append(abs, workDir)
	for _, v := range values {
		if !path.IsAbs(v) {
			v = path.Join(workDir, v)
		}
		abs = append(abs, v)
	}
	out, err := resolve(ctx, abs)
	if err != nil {
		return nil, err
	}
	if len(out) != len(abs) {
		return nil, fmt.Errorf("%d paths resolved for %d asked", len(out), len(abs))
	}
	rel := make([]string, len(values))
	for i, p := range out[1:] {
		rel[i] = permission.Rel(out[0], p)
	}
	return rel, nil
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
