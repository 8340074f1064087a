package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
	"google.golang.org/protobuf/proto"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
)

// secretCommand is `fabro secret set|list|rm`.
func secretCommand() *command {
	return &command{
		name: "secret", summary: "store, list and delete credentials in the server's vault",
		long: `Credentials (provider keys such as ANTHROPIC_API_KEY, tool tokens such as
BRAVE_SEARCH_API_KEY) live in the vault of the server at --server. The
gateway and the agent resolve them from there; ` + "`fabro exec`" + ` without --server
reads the same data directory's vault, then the environment.`,
		examples: `  fabro secret set ANTHROPIC_API_KEY          # asks for the value, without echo
  fabro secret set OPENAI_API_KEY < key.txt
  fabro secret list
  fabro secret rm OPENAI_API_KEY`,
		subs: []*command{{
			name: "set", aliases: []string{"put"}, args: "NAME", summary: "store a credential; the value is read from stdin or a prompt",
			long: `Stores the value under NAME as a new version. The value is read from a
prompt without echo on a terminal, else from all of stdin (one trailing
newline removed); never from the command line. A provider key is first
probed with one small call, and not stored when every provider using the
name refuses it.`,
			examples: "  fabro secret set ANTHROPIC_API_KEY\n  fabro secret set OPENAI_API_KEY < key.txt\n  fabro secret set BRAVE_SEARCH_API_KEY --no-probe --expected-version 0",
			define:   secretSet,
		}, {
			name: "list", aliases: []string{"ls"}, summary: "list stored credentials (names and metadata, never values)",
			examples: "  fabro secret list\n  fabro secret list --prefix AWS_",
			define:   secretList,
		}, {
			name: "rm", aliases: []string{"delete"}, args: "NAME", summary: "delete a credential, or one version of it",
			examples: "  fabro secret rm OPENAI_API_KEY\n  fabro secret rm OPENAI_API_KEY --version 2",
			define:   secretRm,
		}},
	}
}

// oneName is the one positional NAME of a secret command.
func oneName(cmd string, args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usagef("%s needs a secret NAME", cmd)
	case len(args) > 1:
		return "", usagef("%s takes one NAME; the value is read from stdin or a prompt, never from the command line", cmd)
	}
	return args[0], nil
}

func secretSet(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	expected := fs.Int64("expected-version", -1, "write only if the current version is this (0: only if the secret does not exist)")
	noProbe := fs.Bool("no-probe", false, "store a provider key without first probing the provider with it")
	overlay := fs.String("llm-catalog-overlay", "", "catalog overlay the probe uses (as the server's --llm-catalog-overlay)")
	return func(ctx context.Context, args []string) error {
		name, err := oneName("secret set", args)
		if err != nil {
			return err
		}
		value, err := readValue(name, e)
		if err != nil {
			return err
		}
		if !*noProbe {
			if err := probeBeforeStore(ctx, name, value, *overlay, e); err != nil {
				return err
			}
		}
		client, ctx, done, err := c.vault(ctx)
		if err != nil {
			return err
		}
		defer done()
		req := &vaultv1.PutSecretRequest{Name: name, Value: value}
		if *expected >= 0 {
			req.ExpectedVersion = proto.Int64(*expected)
		}
		resp, err := client.PutSecret(ctx, req)
		if err != nil {
			return c.rpcError(err)
		}
		fmt.Fprintf(e.stdout, "stored %s version %d\n", name, resp.GetSecret().GetCurrentVersion())
		return nil
	}
}

// readValue reads a secret value from a terminal prompt without echo, or
// else from all of stdin with one trailing newline removed.
func readValue(name string, e env) (string, error) {
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(e.stderr, "Value for %s: ", name)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return "", fmt.Errorf("read value: %w", err)
		}
		return nonEmpty(string(b))
	}
	b, err := io.ReadAll(bufio.NewReader(e.stdin))
	if err != nil {
		return "", fmt.Errorf("read value from stdin: %w", err)
	}
	v := strings.TrimSuffix(string(b), "\n")
	return nonEmpty(strings.TrimSuffix(v, "\r"))
}

func nonEmpty(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty value: pipe the value on stdin, e.g. `fabro secret set NAME < keyfile`")
	}
	return v, nil
}

func secretList(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	prefix := fs.String("prefix", "", "only names starting with this")
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("secret list takes no arguments")
		}
		client, ctx, done, err := c.vault(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := allPages(func(tok string) (*vaultv1.ListSecretsResponse, error) {
			return client.ListSecrets(ctx, &vaultv1.ListSecretsRequest{Prefix: *prefix, PageSize: 1000, PageToken: tok})
		}, func(all, page *vaultv1.ListSecretsResponse) {
			all.Secrets = append(all.Secrets, page.GetSecrets()...)
			all.CorruptNames = append(all.CorruptNames, page.GetCorruptNames()...)
		})
		if err != nil {
			return c.rpcError(err)
		}
		if out.json() {
			return out.print(e.stdout, resp)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tUPDATED\tBY")
		for _, s := range resp.GetSecrets() {
			v := s.GetVersions()[0]
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.GetName(), s.GetCurrentVersion(),
				s.GetUpdateTime().AsTime().Local().Format(time.DateTime), v.GetCreatedBy())
		}
		for _, n := range resp.GetCorruptNames() {
			fmt.Fprintf(tw, "%s\t-\tCORRUPT (delete and set again)\t-\n", n)
		}
		return tw.Flush()
	}
}

func secretRm(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	version := fs.Int64("version", 0, "destroy only this version")
	expected := fs.Int64("expected-version", 0, "delete only if the current version is this")
	return func(ctx context.Context, args []string) error {
		name, err := oneName("secret rm", args)
		if err != nil {
			return err
		}
		client, ctx, done, err := c.vault(ctx)
		if err != nil {
			return err
		}
		defer done()
		req := &vaultv1.DeleteSecretRequest{Name: name}
		if *version > 0 {
			req.Version = version
		}
		if *expected > 0 {
			req.ExpectedVersion = expected
		}
		resp, err := client.DeleteSecret(ctx, req)
		if err != nil {
			return c.rpcError(err)
		}
		fmt.Fprintf(e.stdout, "deleted %s (%d version(s))\n", name, resp.GetDeletedVersions())
		return nil
	}
}
