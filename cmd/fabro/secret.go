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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/envflag"
)

// secret dispatches `fabro secret set|list|rm`.
func secret(ctx context.Context, args []string, e env) error {
	if len(args) == 0 {
		return usagef("secret needs a subcommand: set, list or rm")
	}
	switch args[0] {
	case "set":
		return secretSet(ctx, args[1:], e)
	case "list", "ls":
		return secretList(ctx, args[1:], e)
	case "rm", "delete":
		return secretRm(ctx, args[1:], e)
	default:
		return usagef("unknown secret subcommand %q: want set, list or rm", args[0])
	}
}

// parseNamed parses flags given before or after the one positional NAME.
func parseNamed(fs *flag.FlagSet, args []string, e env) (string, error) {
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		return "", err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", usagef("%s needs a secret NAME", fs.Name())
	}
	name := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", usagef("%s takes one NAME; the value is read from stdin or a prompt, never from the command line", fs.Name())
	}
	return name, nil
}

func secretSet(ctx context.Context, args []string, e env) error {
	fs, c := newClientFlagSet("secret set", e)
	expected := fs.Int64("expected-version", -1, "write only if the current version is this (0: only if the secret does not exist)")
	noProbe := fs.Bool("no-probe", false, "store a provider key without first probing the provider with it")
	overlay := fs.String("llm-catalog-overlay", "", "catalog overlay the probe uses (as the server's -llm-catalog-overlay)")
	name, err := parseNamed(fs, args, e)
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
		return rpcError(err)
	}
	fmt.Fprintf(e.stdout, "stored %s version %d\n", name, resp.GetSecret().GetCurrentVersion())
	return nil
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

func secretList(ctx context.Context, args []string, e env) error {
	fs, c := newClientFlagSet("secret list", e)
	prefix := fs.String("prefix", "", "only names starting with this")
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
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
		return rpcError(err)
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

func secretRm(ctx context.Context, args []string, e env) error {
	fs, c := newClientFlagSet("secret rm", e)
	version := fs.Int64("version", 0, "destroy only this version")
	expected := fs.Int64("expected-version", 0, "delete only if the current version is this")
	name, err := parseNamed(fs, args, e)
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
		return rpcError(err)
	}
	fmt.Fprintf(e.stdout, "deleted %s (%d version(s))\n", name, resp.GetDeletedVersions())
	return nil
}

// rpcError shows a status as its code and message, without the Go wrapping.
func rpcError(err error) error {
	st := status.Convert(err)
	return fmt.Errorf("%s: %s", st.Code(), st.Message())
}
