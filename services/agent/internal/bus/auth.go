package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Who may connect to the embedded server (credentials.go checks every
// connection): the agent's nkey, made at every start, which never leaves
// the process; the admin subscriber's nkey, whose seed is kept in a file
// (0600) that the operator hands to the processes allowed to read every
// session's events; and the per-session users IssueCredential makes.

// subscriberPermissions let the admin subscriber read every session's
// events, live (either encoding) or through
// JetStream consumers of the events stream, and nothing more: it cannot
// publish an event, purge or delete messages, delete consumers, or change
// or remove the stream.
func subscriberPermissions() *server.Permissions {
	api := func(s string) string { return "$JS.API." + s }
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{
				api("INFO"),
				api("STREAM.NAMES"),
				api("STREAM.INFO." + StreamName),
				api("STREAM.MSG.GET." + StreamName),
				api("DIRECT.GET." + StreamName),
				api("DIRECT.GET." + StreamName + ".>"),
				api("CONSUMER.CREATE." + StreamName),
				api("CONSUMER.CREATE." + StreamName + ".>"),
				api("CONSUMER.DURABLE.CREATE." + StreamName + ".*"),
				api("CONSUMER.INFO." + StreamName + ".*"),
				api("CONSUMER.MSG.NEXT." + StreamName + ".*"),
				"$JS.ACK." + StreamName + ".>",
				"$JS.ACK.*.*." + StreamName + ".>", // the v2 ack subject: domain, account hash
				"$JS.FC." + StreamName + ".>",
			},
			// Belt and braces: an allow above can never widen into these.
			Deny: []string{AllSubjects, AllJSONSubjects, api("STREAM.PURGE.>"), api("STREAM.DELETE.>"), api("STREAM.MSG.DELETE.>"),
				api("STREAM.UPDATE.>"), api("CONSUMER.DELETE.>")},
		},
		Subscribe: &server.SubjectPermission{Allow: []string{AllSubjects, AllJSONSubjects, "_INBOX.>"}},
	}
}

// ensureSeed returns the user nkey kept in file, creating the file (0600)
// with a fresh seed when absent, so subscribers keep their credential
// across restarts.
func ensureSeed(file string) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(append(seed, '\n')); err != nil {
			f.Close()
			return nil, err
		}
		return kp, f.Close()
	}
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data))))
	if err != nil {
		return nil, fmt.Errorf("%s does not hold an nkey seed: %w", file, err)
	}
	return kp, nil
}

// embeddedAuth makes the embedded server's only authenticator and
// returns the connect option of the agent's own key, made at every start.
func embeddedAuth(sopts *server.Options, subscriberFile string) (nats.Option, *authenticator, error) {
	agent, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, err
	}
	agentPub, _ := agent.PublicKey()
	a := newAuthenticator()
	a.nkeys[agentPub] = nil // the agent owns the stream: no limit
	if subscriberFile != "" {
		sub, err := ensureSeed(subscriberFile)
		if err != nil {
			return nil, nil, fmt.Errorf("bus: subscriber credential: %w", err)
		}
		subPub, _ := sub.PublicKey()
		a.nkeys[subPub] = subscriberPermissions()
	}
	// The server hands every connection to a, and still sends the nonce the
	// nkeys sign (it would send none without nkeys of its own).
	sopts.CustomClientAuthentication, sopts.AlwaysEnableNonce = a, true
	return nats.Nkey(agentPub, agent.Sign), a, nil
}

// embeddedTLS makes the embedded listener serve TLS, and verify client
// certificates when a client CA is given.
func embeddedTLS(sopts *server.Options, cfg Config) error {
	if cfg.ListenTLSCertFile == "" && cfg.ListenTLSKeyFile == "" && cfg.ListenTLSClientCAFile == "" {
		return nil
	}
	if cfg.ListenTLSCertFile == "" || cfg.ListenTLSKeyFile == "" {
		return errors.New("bus: serving NATS over TLS needs both a certificate and a key file")
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: cfg.ListenTLSCertFile, KeyFile: cfg.ListenTLSKeyFile, CaFile: cfg.ListenTLSClientCAFile,
		Verify: cfg.ListenTLSClientCAFile != "",
	})
	if err != nil {
		return fmt.Errorf("bus: NATS listener TLS: %w", err)
	}
	sopts.TLSConfig, sopts.TLS, sopts.TLSVerify, sopts.TLSTimeout = tc, true, cfg.ListenTLSClientCAFile != "", 2
	return nil
}

// checkExposure refuses an embedded listener on host, when host is not
// loopback, without TLS, unless cfg.Insecure; then it warns. The same rule
// as the gRPC and REST listeners' (platform/server). The credentials are
// a signed nonce or a password, and the events are in the clear: on a
// network, without TLS, anyone on the path reads them and can replay the
// password.
func checkExposure(ctx context.Context, logger *slog.Logger, cfg Config, host string) error {
	if cfg.Listen == "" || cfg.ListenTLSCertFile != "" || isLoopbackHost(host) {
		return nil
	}
	if !cfg.Insecure {
		return fmt.Errorf("bus: refusing to listen for NATS on %s, which is not loopback, without TLS: give -nats-listen-tls-cert-file and -nats-listen-tls-key-file, or pass -insecure", cfg.Listen)
	}
	logger.WarnContext(ctx, "INSECURE: NATS listening on a non-loopback address without TLS (-insecure)", "addr", cfg.Listen)
	return nil
}

// isLoopbackHost reports whether a listener on host is reachable only from
// this machine: a loopback IP or "localhost". An empty host, which the
// server takes for every interface, is not.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// externalOptions are the connect options for an operator's NATS server:
// its credentials and TLS settings, as given.
func externalOptions(cfg Config) ([]nats.Option, error) {
	var opts []nats.Option
	n := 0
	if cfg.CredsFile != "" {
		n++
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		n++
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("bus: -nats-nkey-file: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.User != "" || cfg.Password != "" {
		n++
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if n > 1 {
		return nil, errors.New("bus: give one NATS credential: a creds file, an nkey seed file, or a user and password")
	}
	if cfg.TLSCAFile != "" {
		if _, err := os.Stat(cfg.TLSCAFile); err != nil {
			return nil, fmt.Errorf("bus: -nats-tls-ca-file: %w", err)
		}
		opts = append(opts, nats.RootCAs(cfg.TLSCAFile))
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
			return nil, errors.New("bus: a NATS client certificate needs both -nats-tls-cert-file and -nats-tls-key-file")
		}
		opts = append(opts, nats.ClientCert(cfg.TLSCertFile, cfg.TLSKeyFile))
	}
	return opts, nil
}
