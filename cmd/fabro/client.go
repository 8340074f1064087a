package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/server"
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server    string
	timeout   time.Duration
	tokenFile string
	dataDir   string
	dial      grpcclient.Options
	lookupEnv func(string) (string, bool)
}

// newClientFlagSet returns the flag set of a client command with the
// shared flags registered.
func newClientFlagSet(name string, e env) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	c := &clientFlags{lookupEnv: e.lookupEnv}
	c.register(fs, defaultGRPCAddr, e)
	return fs, c
}

// register binds -server, -timeout, -token-file, -data-dir and the client
// TLS flags.
func (c *clientFlags) register(fs *flag.FlagSet, server string, e env) {
	fs.StringVar(&c.server, "server", server, "gRPC address of a running fabro server")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the server")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the token to present; default $FABRO_TOKEN, else <data-dir>/auth/admin.token (written by fabro serve)")
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(e.lookupEnv), "data directory of the local fabro serve, where its admin token is")
	c.dial.RegisterFlags(fs, "")
	c.lookupEnv = e.lookupEnv
}

// token finds the token to present: -token-file, $FABRO_TOKEN, or the
// admin token fabro serve wrote into the data directory.
func (c *clientFlags) token() (string, error) {
	if c.tokenFile != "" {
		return auth.ReadTokenFile(c.tokenFile)
	}
	if t, ok := c.lookupEnv(grpcclient.EnvToken); ok && t != "" {
		return t, nil
	}
	if !loopbackTarget(c.server) {
		// The local serve's admin token is for the local serve only.
		return "", fmt.Errorf("no token for %s: give --token-file or $%s (the admin token in the data directory is presented to a server on this machine only)", c.server, grpcclient.EnvToken)
	}
	path := server.DefaultAdminTokenFile(c.dataDir)
	t, err := auth.ReadTokenFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no token: give --token-file or $%s, or start `fabro serve` once on this data directory (it writes %s)", grpcclient.EnvToken, path)
	}
	return t, err
}

// connect dials the server presenting the token.
func (c *clientFlags) connect(ctx context.Context) (*grpc.ClientConn, context.Context, func(), error) {
	tok, err := c.token()
	if err != nil {
		return nil, nil, nil, err
	}
	if !loopbackTarget(c.server) && c.dial.TLSCAFile == "" {
		return nil, nil, nil, fmt.Errorf("refusing to send a token in plaintext to %s, which is not on this machine: give --tls-ca-file", c.server)
	}
	o := c.dial
	o.Token = grpcclient.Static(tok)
	conn, err := grpcclient.New(c.server, o)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", c.server, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return conn, ctx, func() { cancel(); conn.Close() }, nil
}

func (c *clientFlags) vault(ctx context.Context) (vaultv1.VaultServiceClient, context.Context, func(), error) {
	conn, ctx, done, err := c.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return vaultv1.NewVaultServiceClient(conn), ctx, done, nil
}

func (c *clientFlags) tokens(ctx context.Context) (authv1.TokenServiceClient, context.Context, func(), error) {
	conn, ctx, done, err := c.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return authv1.NewTokenServiceClient(conn), ctx, done, nil
}

// loopbackTarget reports whether a gRPC target (host:port) names this
// machine: a loopback address or localhost.
func loopbackTarget(target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
