package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// tokenCommand is `fabro token create|list|revoke`.
func tokenCommand() *command {
	return &command{
		name: "token", summary: "issue, list and revoke people's tokens (admin)",
		long: `Tokens let people and programs call the server. Each has a role: user
(sessions, models, their own calls) or admin (also tokens and the vault's
audit). Managing tokens needs an admin token, such as the one fabro serve
writes to <data-dir>/auth/admin.token.`,
		examples: `  fabro token create --name alice > alice.token
  fabro token create --name bot --budget 50usd/month --rpm 60 --models 'anthropic/*'
  fabro token create --name ci --role admin
  fabro token list
  fabro token revoke tok_0123abcd`,
		subs: []*command{{
			name: "create", summary: "issue a token; its value is printed once, alone on stdout",
			examples: "  fabro token create --name alice > alice.token\n  FABRO_TOKEN=$(fabro token create --name bot) fabro models",
			define:   tokenCreate,
		}, {
			name: "list", aliases: []string{"ls"}, summary: "list tokens (ids, names, roles; never values)",
			examples: "  fabro token list",
			define:   tokenList,
		}, {
			name: "revoke", aliases: []string{"rm"}, args: "ID", summary: "revoke a token; its next call is refused",
			examples: "  fabro token revoke tok_0123abcd",
			define:   tokenRevoke,
		}},
	}
}

func tokenCreate(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	role := fs.String("role", "user", "role of the new token: user or admin")
	name := fs.String("name", "", "who the token is for (required): it appears in logs and the vault's audit log")
	budget := fs.String("budget", "", "the LLM gateway's spend limit, AMOUNTusd/PERIOD (day, week or month, UTC), e.g. 50usd/month")
	soft := fs.Bool("budget-soft", false, "a soft budget: crossing it is logged and counted, calls go on")
	warn := fs.Int("budget-warn", 0, "percentage of the budget at which a warning is logged (default 80)")
	rpm := fs.Int("rpm", 0, "model calls the token may start per minute (0: no limit)")
	tpm := fs.Int64("tpm", 0, "model tokens (input plus output) the token may use per minute (0: no limit)")
	conc := fs.Int("max-concurrent", 0, "model calls the token may have in progress at once, per gateway replica (0: no limit)")
	models := fs.String("models", "", "comma-separated models the token may call, provider/model with '*' as a wildcard, e.g. 'anthropic/*' (default: all)")
	return func(ctx context.Context, args []string) error {
		r, ok := map[string]authv1.Role{"user": authv1.Role_ROLE_USER, "admin": authv1.Role_ROLE_ADMIN}[*role]
		switch {
		case len(args) > 0:
			return usagef("token create takes no arguments (the name goes in --name)")
		case *name == "":
			return usagef("token create needs --name NAME")
		case !ok:
			return usagef("--role must be user or admin, not %q", *role)
		}
		policy, err := tokenPolicy(*budget, *soft, *warn, *rpm, *tpm, *conc, *models)
		if err != nil {
			return err
		}
		client, ctx, done, err := c.tokens(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := client.CreateToken(ctx, &authv1.CreateTokenRequest{Role: r, Name: *name, Policy: policy})
		if err != nil {
			return c.rpcError(err)
		}
		// The value alone on stdout, so it can be redirected into a file.
		fmt.Fprintln(e.stdout, resp.GetValue())
		fmt.Fprintf(e.stderr, "created token %s for %s (%s); it is shown only this once\n",
			resp.GetToken().GetTokenId(), resp.GetToken().GetName(), *role)
		return nil
	}
}

// tokenPolicy reads token create's governance flags; nil when none is set.
func tokenPolicy(budget string, soft bool, warn, rpm int, tpm int64, conc int, models string) (*authv1.TokenPolicy, error) {
	p := &auth.Policy{}
	set := false
	if budget != "" {
		b, err := auth.ParseBudget(budget)
		if err != nil {
			return nil, usagef("--budget: %v", err)
		}
		if warn < 0 || warn > 100 {
			return nil, usagef("--budget-warn must be 0 to 100, not %d", warn)
		}
		b.Soft, b.WarnPercent = soft, int32(warn)
		p.Budget, set = &b, true
	} else if soft || warn != 0 {
		return nil, usagef("--budget-soft and --budget-warn need --budget")
	}
	switch {
	case rpm < 0 || rpm > math.MaxInt32:
		return nil, usagef("--rpm must be a number of requests per minute, not %d", rpm)
	case tpm < 0:
		return nil, usagef("--tpm must be a number of tokens per minute, not %d", tpm)
	case conc < 0 || conc > math.MaxInt32:
		return nil, usagef("--max-concurrent must be a number of calls, not %d", conc)
	}
	p.RequestsPerMinute, p.TokensPerMinute, p.MaxConcurrent = int32(rpm), tpm, int32(conc)
	set = set || rpm > 0 || tpm > 0 || conc > 0
	if models != "" {
		for m := range strings.SplitSeq(models, ",") {
			m = strings.TrimSpace(m)
			if err := auth.ValidModelPattern(m); err != nil {
				return nil, usagef("--models: %v", err)
			}
			p.Models = append(p.Models, m)
		}
		set = true
	}
	if !set {
		return nil, nil
	}
	return auth.PolicyToProto(p), nil
}

func tokenList(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("token list takes no arguments")
		}
		client, ctx, done, err := c.tokens(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := allPages(func(tok string) (*authv1.ListTokensResponse, error) {
			return client.ListTokens(ctx, &authv1.ListTokensRequest{PageSize: 1000, PageToken: tok})
		}, func(all, page *authv1.ListTokensResponse) {
			all.Tokens = append(all.Tokens, page.GetTokens()...)
		})
		if err != nil {
			return c.rpcError(err)
		}
		if out.json() {
			return out.print(e.stdout, resp)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tPOLICY")
		roles := map[authv1.Role]string{authv1.Role_ROLE_USER: "user", authv1.Role_ROLE_ADMIN: "admin", authv1.Role_ROLE_SERVICE: "service"}
		for _, t := range resp.GetTokens() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.GetTokenId(), t.GetName(), roles[t.GetRole()], t.GetCreateTime().AsTime().Local().Format(time.DateTime), policySummary(t.GetPolicy()))
		}
		return tw.Flush()
	}
}

// policySummary is a token's policy in token create's flags, "-" for none.
func policySummary(tp *authv1.TokenPolicy) string {
	p, _, err := auth.PolicyFromProto(tp)
	if p == nil || err != nil {
		return "-"
	}
	var parts []string
	if b := p.Budget; b != nil {
		s := "budget=" + b.String()
		if b.Soft {
			s += "(soft)"
		}
		parts = append(parts, s)
	}
	if p.RequestsPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("rpm=%d", p.RequestsPerMinute))
	}
	if p.TokensPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("tpm=%d", p.TokensPerMinute))
	}
	if p.MaxConcurrent > 0 {
		parts = append(parts, fmt.Sprintf("max-concurrent=%d", p.MaxConcurrent))
	}
	if len(p.Models) > 0 {
		parts = append(parts, "models="+strings.Join(p.Models, ","))
	}
	return strings.Join(parts, " ")
}

func tokenRevoke(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("token revoke takes one token ID (see fabro token list)")
		}
		client, ctx, done, err := c.tokens(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := client.RevokeToken(ctx, &authv1.RevokeTokenRequest{TokenId: args[0]}); err != nil {
			return c.rpcError(err)
		}
		fmt.Fprintf(e.stdout, "revoked %s\n", args[0])
		return nil
	}
}
