package agent

import (
	"context"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// A prompt's model calls are governed by a fabro token's policy (model
// list, budget, rate limits): the gateway reads the token id forwarded
// with each call (tenancy.go's forwarding). The token is the session's
// governor: the one that started the prompt, replaced by the token of
// each caller that drives the prompt on (FollowUp, Steer, Approve,
// SubmitToolResult), whose input the next turn carries to the model. So
// a token whose policy forbids the session's model, or whose budget is
// spent, cannot drive a prompt another token of the same person (or an
// admin) started: the next turn is refused by the gateway and the prompt
// fails. The governor is kept in the record (unfinished_prompt_token_id),
// so a prompt continued after a restart or a takeover is governed as
// before, and ended when that token has been revoked (restart.go).

// tokenHolder is ctx's caller when it holds a token that governs: a
// person's, not a service's own (a service's forwarded call carries the
// person's token id in the principal already).
func tokenHolder(ctx context.Context) *auth.Principal {
	p, ok := auth.FromContext(ctx)
	if !ok || p.TokenID == "" || p.Role == auth.RoleService {
		return nil
	}
	return &p
}

// drive makes ctx's caller the governor of the running prompt, when it
// holds a token, and returns what undoes it (the caller's input was not
// taken after all).
func (sess *session) drive(ctx context.Context) (restore func()) {
	p := tokenHolder(ctx)
	if p == nil {
		return func() {}
	}
	sess.mu.Lock()
	prev := sess.governor
	sess.governor = p
	sess.mu.Unlock()
	return func() {
		sess.mu.Lock()
		if sess.governor == p {
			sess.governor = prev
		}
		sess.mu.Unlock()
	}
}

// governed is ctx calling as the running prompt's governor, when it has
// one: the gateway then counts the call against that token.
func (sess *session) governed(ctx context.Context) context.Context {
	if sess == nil {
		return ctx
	}
	sess.mu.Lock()
	g := sess.governor
	sess.mu.Unlock()
	if g == nil {
		return ctx
	}
	return auth.WithPrincipal(ctx, *g)
}

// governor is a record's form of the governing principal.
type governor auth.Principal

func (g governor) principal() string {
	if g.TokenID == "" {
		return ""
	}
	return auth.Principal(g).String()
}
