package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
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
	tokenFrom string // where the token presented came from, for errors
}

// newClientFlags registers the shared client flags on fs, with --server
// defaulting to the local fabro serve.
func newClientFlags(fs *flag.FlagSet, e env) *clientFlags {
	c := &clientFlags{lookupEnv: e.lookupEnv}
	c.register(fs, defaultGRPCAddr, e)
	return c
}

// register binds --server, --timeout, --token-file, --data-dir and the
// client TLS flags.
func (c *clientFlags) register(fs *flag.FlagSet, server string, e env) {
	fs.StringVar(&c.server, "server", server, "address (host:port) of the fabro server: fabro serve, or the compose stack's front door")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the server")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the token to present; default $FABRO_TOKEN, else <data-dir>/auth/admin.token (written by fabro serve)")
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(e.lookupEnv), "data directory of the local fabro serve, where its admin token is")
	c.dial.RegisterFlags(fs, "")
	c.lookupEnv = e.lookupEnv
}

// token finds the token to present: --token-file, $FABRO_TOKEN, or the
// admin token fabro serve wrote into the data directory.
func (c *clientFlags) token() (string, error) {
	if c.tokenFile != "" {
		c.tokenFrom = c.tokenFile
		t, err := auth.ReadTokenFile(c.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w; give a file holding your token (an admin issues one with `fabro token create --name NAME > FILE`)", err)
		}
		return t, nil
	}
	if t, ok := c.lookupEnv(grpcclient.EnvToken); ok && t != "" {
		c.tokenFrom = "$" + grpcclient.EnvToken
		return t, nil
	}
	if !loopbackTarget(c.server) {
		// The local serve's admin token is for the local serve only.
		return "", fmt.Errorf("no token for %s: give --token-file or $%s (the admin token in the data directory is presented to a server on this machine only)", c.server, grpcclient.EnvToken)
	}
	path := server.DefaultAdminTokenFile(c.dataDir)
	c.tokenFrom = path
	t, err := auth.ReadTokenFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if !listening(c.server) {
			// Neither a token nor a server: the server is what is missing.
			return "", noServer(c.server)
		}
		return "", fmt.Errorf("no token: give --token-file or $%s, or start `fabro serve` once on this data directory (it writes %s)", grpcclient.EnvToken, path)
	}
	return t, err
}

// connect dials the server presenting the token, for calls that end
// within --timeout.
func (c *clientFlags) connect(ctx context.Context) (*grpc.ClientConn, context.Context, func(), error) {
	conn, err := c.dialServer()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return conn, ctx, func() { cancel(); conn.Close() }, nil
}

// dialServer dials --server presenting the token, with no call timeout
// (for streams).
func (c *clientFlags) dialServer() (*grpc.ClientConn, error) {
	if err := checkServerAddr(c.server); err != nil {
		return nil, err
	}
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	if !loopbackTarget(c.server) && c.dial.TLSCAFile == "" {
		return nil, fmt.Errorf("refusing to send a token in plaintext to %s, which is not on this machine: give --tls-ca-file", c.server)
	}
	o := c.dial
	o.Token = grpcclient.Static(tok)
	conn, err := grpcclient.New(c.server, o)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.server, err)
	}
	return conn, nil
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

// checkServerAddr refuses a --server that is not host:port with the fix,
// rather than letting it read as a remote host (a forgotten port is the
// usual mistake).
func checkServerAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	var ae *net.AddrError
	switch {
	case errors.As(err, &ae) && strings.Contains(ae.Err, "missing port"):
		return configError{fmt.Errorf("missing port in --server %s: use %s", addr, net.JoinHostPort(strings.Trim(addr, "[]"), "7700"))}
	case err != nil:
		return configError{fmt.Errorf("--server %s is not host:port: %w", addr, err)}
	case port == "":
		return configError{fmt.Errorf("missing port in --server %s: use %s7700", addr, addr)}
	}
	return nil
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

// rpcError says what went wrong with a call in plain words: a server that
// is not there, a token it refused, or else the status's code and message.
func (c *clientFlags) rpcError(err error) error {
	return explain(err, c.server, c.tokenFrom, c.timeout)
}

// explain is rpcError for a server at addr; tokenFrom says where the token
// came from ("" when unknown).
func explain(err error, addr, tokenFrom string, timeout time.Duration) error {
	st := status.Convert(err)
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		switch {
		case strings.Contains(msg, "connection refused"):
			return noServer(addr)
		case strings.Contains(msg, "no such host"), strings.Contains(msg, "produced zero addresses"), strings.Contains(msg, "name resolver"):
			return fmt.Errorf("cannot find the server %s: its host name does not resolve; check --server", addr)
		case strings.Contains(msg, "server preface"), strings.Contains(msg, "first record does not look like a TLS handshake"), strings.Contains(msg, "authentication handshake failed"):
			return fmt.Errorf("%s does not speak the same protocol: a server with TLS needs --tls-ca-file, one without TLS needs none (%s)", addr, msg)
		case strings.Contains(msg, "transport: Error while dialing"), strings.Contains(msg, "connection reset"), strings.Contains(msg, "error reading from server"), strings.Contains(msg, "EOF"):
			return fmt.Errorf("lost the connection to %s (%s): check that the server is running, then try again", addr, firstLine(msg))
		}
		return fmt.Errorf("the server at %s is unavailable: %s", addr, msg)
	case codes.Unimplemented:
		return fmt.Errorf("the server at %s does not offer this call (%s): it is older than this fabro command; upgrade it", addr, msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s did not answer within %s: check that --server names a running fabro server, or allow longer with --timeout", addr, timeout)
	case codes.Unauthenticated:
		return fmt.Errorf("the server at %s refused the token%s as missing, invalid or revoked: give a valid one with --token-file FILE or $%s; an admin issues one with `fabro token create --name NAME`", addr, fromNote(tokenFrom), grpcclient.EnvToken)
	case codes.PermissionDenied:
		if grpcerr.ReasonOf(err) == "PERMISSION_DENIED" {
			return fmt.Errorf("the server at %s does not allow this call with your token%s: it needs another role (an admin's token can; see `fabro token list`)", addr, fromNote(tokenFrom))
		}
	}
	return fmt.Errorf("%s: %s", st.Code(), msg)
}

func fromNote(tokenFrom string) string {
	if tokenFrom == "" {
		return ""
	}
	return " (from " + tokenFrom + ")"
}

func noServer(addr string) error {
	return fmt.Errorf("no server at %s: start one with `fabro serve`, or pass --server with the address of a running one", addr)
}

// listening reports whether anything accepts connections at addr.
func listening(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
