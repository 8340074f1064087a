package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	"github.com/fabro-sh/fabro-go/platform/envflag"
)

// token dispatches `fabro token create|list|revoke`.
func token(ctx context.Context, args []string, e env) error {
	if len(args) == 0 {
		return usagef("token needs a subcommand: create, list or revoke")
	}
	switch args[0] {
	case "create":
		return tokenCreate(ctx, args[1:], e)
	case "list", "ls":
		return tokenList(ctx, args[1:], e)
	case "revoke", "rm":
		return tokenRevoke(ctx, args[1:], e)
	default:
		return usagef("unknown token subcommand %q: want create, list or revoke", args[0])
	}
}

func tokenCreate(ctx context.Context, args []string, e env) error {
	fs, c := newClientFlagSet("token create", e)
	role := fs.String("role", "user", "role of the new token: user or admin")
	name := fs.String("name", "", "who the token is for (required): it appears in logs and the vault's audit log")
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		return err
	}
	r, ok := map[string]authv1.Role{"user": authv1.Role_ROLE_USER, "admin": authv1.Role_ROLE_ADMIN}[*role]
	if !ok || *name == "" || fs.NArg() > 0 {
		return usagef("token create needs --name NAME and --role user|admin, and no arguments")
	}
	client, ctx, done, err := c.tokens(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := client.CreateToken(ctx, &authv1.CreateTokenRequest{Role: r, Name: *name})
	if err != nil {
		return rpcError(err)
	}
	// The value alone on stdout, so it can be redirected into a file.
	fmt.Fprintln(e.stdout, resp.GetValue())
	fmt.Fprintf(e.stderr, "created token %s for %s (%s); it is shown only this once\n",
		resp.GetToken().GetTokenId(), resp.GetToken().GetName(), *role)
	return nil
}

func tokenList(ctx context.Context, args []string, e env) error {
	fs, c := newClientFlagSet("token list", e)
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
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
		return rpcError(err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED")
	roles := map[authv1.Role]string{authv1.Role_ROLE_USER: "user", authv1.Role_ROLE_ADMIN: "admin", authv1.Role_ROLE_SERVICE: "service"}
	for _, t := range resp.GetTokens() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.GetTokenId(), t.GetName(), roles[t.GetRole()], t.GetCreateTime().AsTime().Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func tokenRevoke(ctx context.Context, args []string, e env) error {
	fs, c := newClientFlagSet("token revoke", e)
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) > 0 { // flags may follow the ID
		if err := fs.Parse(rest[1:]); err != nil {
			return err
		}
		rest = append(rest[:1], fs.Args()...)
	}
	if len(rest) != 1 {
		return usagef("token revoke takes one token ID (see fabro token list)")
	}
	client, ctx, done, err := c.tokens(ctx)
	if err != nil {
		return err
	}
	defer done()
	if _, err := client.RevokeToken(ctx, &authv1.RevokeTokenRequest{TokenId: rest[0]}); err != nil {
		return rpcError(err)
	}
	fmt.Fprintf(e.stdout, "revoked %s\n", rest[0])
	return nil
}
