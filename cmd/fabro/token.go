package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
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
		client, ctx, done, err := c.tokens(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := client.CreateToken(ctx, &authv1.CreateTokenRequest{Role: r, Name: *name})
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
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED")
		roles := map[authv1.Role]string{authv1.Role_ROLE_USER: "user", authv1.Role_ROLE_ADMIN: "admin", authv1.Role_ROLE_SERVICE: "service"}
		for _, t := range resp.GetTokens() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.GetTokenId(), t.GetName(), roles[t.GetRole()], t.GetCreateTime().AsTime().Local().Format(time.DateTime))
		}
		return tw.Flush()
	}
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
