// Package grpcclient is the one constructor every fabro connection dials
// through, service to service and from the CLI: TLS with a CA file (or
// plaintext), a bearer token presented on every call, keepalive, message
// limits and the OpenTelemetry client stats handler.
//
//	conn, err := grpcclient.New("127.0.0.1:7701", grpcclient.Options{
//		TLSCAFile: "/etc/fabro/ca.pem",
//		Token:     grpcclient.TokenFile("/run/fabro/agent.token"),
//	})
package grpcclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// DefaultMaxMsgBytes matches the servers' default message limit.
const DefaultMaxMsgBytes = 64 << 20

// Options configures a connection. The zero value dials plaintext without a
// credential.
type Options struct {
	// TLSCAFile, when set, makes the connection TLS, trusting the
	// certificates (PEM) in this file. Empty: plaintext (loopback, or a
	// network the operator trusts).
	TLSCAFile string
	// TLSServerName overrides the name the server's certificate must hold
	// (default: the target's host).
	TLSServerName string
	// TLSCertFile and TLSKeyFile are a client certificate for servers that
	// verify clients (mTLS).
	TLSCertFile, TLSKeyFile string
	// Token returns the bearer token presented on every call; nil presents
	// none. It is asked on every call (TokenFile re-reads its file only when
	// the file changed), so a token file written or rotated after this
	// process started is picked up.
	Token func() (string, error)
	// MaxMsgBytes bounds messages both ways (default DefaultMaxMsgBytes).
	MaxMsgBytes int
	// Dialer replaces the network dialer (an in-process listener).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Extra are further dial options, applied after the constructor's
	// own (interceptors of the caller's).
	Extra []grpc.DialOption
}

// RegisterFlags binds -tls-ca-file, -tls-server-name, -tls-client-cert-file
// and -tls-client-key-file, prefixed with prefix (e.g. "vault-" gives
// -vault-tls-ca-file; "" the plain names).
func (o *Options) RegisterFlags(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&o.TLSCAFile, prefix+"tls-ca-file", o.TLSCAFile, "CA certificates (PEM) to verify the server with; set to dial TLS (empty: plaintext)")
	fs.StringVar(&o.TLSServerName, prefix+"tls-server-name", o.TLSServerName, "name the server's certificate must hold (default: the address's host)")
	fs.StringVar(&o.TLSCertFile, prefix+"tls-client-cert-file", o.TLSCertFile, "client certificate (PEM) for servers that verify clients")
	fs.StringVar(&o.TLSKeyFile, prefix+"tls-client-key-file", o.TLSKeyFile, "key (PEM) of -"+prefix+"tls-client-cert-file")
}

// New returns a lazily connecting client for target (host:port or a gRPC
// target URI).
func New(target string, o Options) (*grpc.ClientConn, error) {
	max := o.MaxMsgBytes
	if max == 0 {
		max = DefaultMaxMsgBytes
	}
	tc := insecure.NewCredentials()
	if o.TLSCAFile == "" && (o.TLSCertFile != "" || o.TLSKeyFile != "" || o.TLSServerName != "") {
		// TLS settings without the CA that turns TLS on would otherwise dial
		// plaintext, the bearer token included.
		return nil, fmt.Errorf("grpcclient: %s: a TLS server name or client certificate without -tls-ca-file: give the CA file to dial TLS", target)
	}
	if o.TLSCAFile != "" {
		cfg, err := o.tlsConfig()
		if err != nil {
			return nil, err
		}
		tc = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(tc),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max), grpc.MaxCallSendMsgSize(max)),
		// Within the servers' enforcement policy (pings at most every 15 s).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
	if o.Token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(&tokenCreds{source: o.Token}))
	}
	if o.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(o.Dialer))
	}
	opts = append(opts, o.Extra...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: %s: %w", target, err)
	}
	return conn, nil
}

func (o Options) tlsConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(o.TLSCAFile)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("grpcclient: %s holds no PEM certificate", o.TLSCAFile)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: o.TLSServerName, MinVersion: tls.VersionTLS12}
	if o.TLSCertFile != "" || o.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("grpcclient: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Static returns a token source for a token known in memory.
func Static(token string) func() (string, error) {
	return func() (string, error) { return token, nil }
}

// TokenFile returns a token source reading the first line of path. The file
// is read again whenever it changes (a stat per call), so a token the vault
// re-issues, or an operator rotates, is presented from the next call on
// without a restart.
func TokenFile(path string) func() (string, error) {
	var (
		mu     sync.Mutex
		cached string
		seen   os.FileInfo
	)
	return func() (string, error) {
		info, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if cached != "" && seen != nil && os.SameFile(seen, info) && seen.ModTime().Equal(info.ModTime()) && seen.Size() == info.Size() {
			return cached, nil
		}
		tok, err := auth.ReadTokenFile(path)
		if err != nil {
			return "", err
		}
		cached, seen = tok, info
		return tok, nil
	}
}

// ErrNoToken wraps the reason a connection has no token to present.
var ErrNoToken = errors.New("no token")

// tokenCreds presents "authorization: Bearer <token>". It does not demand a
// secure transport: plaintext is allowed where the operator allows it (the
// server refuses plaintext on non-loopback addresses unless -insecure).
type tokenCreds struct {
	source func() (string, error)
}

// GetRequestMetadata asks the source on every call: a file source caches
// what it read until the file changes.
func (c *tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := c.source()
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "%v: %v", ErrNoToken, err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (*tokenCreds) RequireTransportSecurity() bool { return false }

// EnvToken is the environment variable a token may be given in instead of
// a token file.
const EnvToken = "FABRO_TOKEN"

// TokenFileOrEnv is the token source of a process configured with a token
// file flag: the file when set, else $FABRO_TOKEN when set, else nil (no
// token presented). lookupEnv defaults to os.LookupEnv.
func TokenFileOrEnv(file string, lookupEnv func(string) (string, bool)) func() (string, error) {
	if file != "" {
		return TokenFile(file)
	}
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	if t, ok := lookupEnv(EnvToken); ok && t != "" {
		return Static(t)
	}
	return nil
}
