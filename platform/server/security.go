package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
)

// TLSConfig names the files a listener serves TLS from.
type TLSConfig struct {
	CertFile string // certificate chain (PEM)
	KeyFile  string // its private key (PEM)
	// ClientCAFile, when set, makes the listeners require a client
	// certificate signed by one of these CAs (mTLS).
	ClientCAFile string
}

// RegisterFlags binds -tls-cert-file, -tls-key-file and -tls-client-ca-file.
// The NATS listener uses the same names, prefixed "nats-".
func (t *TLSConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.CertFile, "tls-cert-file", t.CertFile, "certificate (PEM) the gRPC and REST listeners serve TLS with; empty: plaintext")
	fs.StringVar(&t.KeyFile, "tls-key-file", t.KeyFile, "private key (PEM) of -tls-cert-file")
	fs.StringVar(&t.ClientCAFile, "tls-client-ca-file", t.ClientCAFile, "CA certificates (PEM); when set, clients must present a certificate they signed (mTLS)")
}

// serverConfig loads the files; nil without a certificate.
func (t TLSConfig) serverConfig() (*tls.Config, error) {
	if t.CertFile == "" && t.KeyFile == "" {
		if t.ClientCAFile != "" {
			return nil, errors.New("server: -tls-client-ca-file needs -tls-cert-file and -tls-key-file")
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server: TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server: client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: %s holds no PEM certificate", t.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// isLoopback reports whether a listener's address is reachable only from
// this machine. An unspecified address (":7700", "0.0.0.0") is not.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP != nil && ta.IP.IsLoopback()
}

// checkExposure refuses a non-loopback listener without TLS or without
// authentication, unless the operator passed -insecure; then it warns.
func (s *Server) checkExposure(ctx context.Context, what string, addr net.Addr, hasTLS bool) error {
	if isLoopback(addr) || (hasTLS && !s.cfg.NoAuth) {
		return nil
	}
	var missing []string
	if !hasTLS {
		missing = append(missing, "TLS")
	}
	if s.cfg.NoAuth {
		missing = append(missing, "authentication")
	}
	if !s.cfg.Insecure {
		return fmt.Errorf("server: refusing to listen for %s on %s, which is not loopback, without %s: give -tls-cert-file and -tls-key-file, or pass -insecure",
			what, addr, strings.Join(missing, " and "))
	}
	s.logger.WarnContext(ctx, "INSECURE: listening on a non-loopback address without "+strings.Join(missing, " and ")+" (-insecure)",
		"listener", what, "addr", addr.String())
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
