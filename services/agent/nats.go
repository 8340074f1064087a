package agent

import (
	"flag"
	"path/filepath"

	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// NATSSecurity holds the credentials and TLS settings of the agent's NATS
// connection and of the embedded server's listener.
type NATSSecurity struct {
	// SubscriberKeyFile keeps the embedded server's subscriber credential
	// (an nkey seed, mode 0600), created when absent. Default
	// <data-dir>/agent/nats-subscriber.nk when the server listens.
	SubscriberKeyFile string
	// ListenTLSCertFile, ListenTLSKeyFile and ListenTLSClientCAFile make the
	// embedded listener serve TLS, and require client certificates.
	ListenTLSCertFile, ListenTLSKeyFile, ListenTLSClientCAFile string
	// CredsFile, NKeyFile, or User and Password authenticate to an external
	// server (one of them); TLSCAFile verifies it, and TLSCertFile and
	// TLSKeyFile are the client certificate it may ask for.
	CredsFile, NKeyFile, User, Password string
	TLSCAFile, TLSCertFile, TLSKeyFile  string
}

// RegisterFlags binds the -nats-* security flags to n.
func (n *NATSSecurity) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&n.SubscriberKeyFile, "nats-subscriber-key-file", n.SubscriberKeyFile, "embedded nats-server: file keeping the subscriber credential (nkey seed, 0600, created when absent); default <data-dir>/agent/nats-subscriber.nk")
	fs.StringVar(&n.ListenTLSCertFile, "nats-listen-tls-cert-file", n.ListenTLSCertFile, "embedded nats-server: TLS certificate (PEM) of its listener")
	fs.StringVar(&n.ListenTLSKeyFile, "nats-listen-tls-key-file", n.ListenTLSKeyFile, "embedded nats-server: TLS key (PEM) of its listener")
	fs.StringVar(&n.ListenTLSClientCAFile, "nats-listen-tls-client-ca-file", n.ListenTLSClientCAFile, "embedded nats-server: CA (PEM) that client certificates must be signed by (mTLS)")
	fs.StringVar(&n.CredsFile, "nats-creds-file", n.CredsFile, "external NATS: user credentials file (JWT and seed)")
	fs.StringVar(&n.NKeyFile, "nats-nkey-file", n.NKeyFile, "external NATS: file holding a user nkey seed")
	fs.StringVar(&n.User, "nats-user", n.User, "external NATS: user name")
	fs.StringVar(&n.Password, "nats-password", n.Password, "external NATS: password (prefer $FABRO_NATS_PASSWORD: flags are visible to other processes)")
	fs.StringVar(&n.TLSCAFile, "nats-tls-ca-file", n.TLSCAFile, "external NATS: CA (PEM) to verify the server's certificate")
	fs.StringVar(&n.TLSCertFile, "nats-tls-cert-file", n.TLSCertFile, "external NATS: client certificate (PEM)")
	fs.StringVar(&n.TLSKeyFile, "nats-tls-key-file", n.TLSKeyFile, "external NATS: client key (PEM)")
}

// DefaultNATSSubscriberKeyFile is where the embedded server keeps the
// subscriber credential under a data directory.
func DefaultNATSSubscriberKeyFile(dataDir string) string {
	return filepath.Join(dataDir, "agent", "nats-subscriber.nk")
}

func (c *Config) busConfig(listen string) bus.Config {
	n := c.NATS
	if n.SubscriberKeyFile == "" && listen != "" && c.NATSURL == "" {
		n.SubscriberKeyFile = DefaultNATSSubscriberKeyFile(c.DataDir)
	}
	return bus.Config{
		URL: c.NATSURL, Listen: listen, StoreDir: filepath.Join(c.DataDir, "agent", "nats"),
		SubscriberKeyFile: n.SubscriberKeyFile,
		ListenTLSCertFile: n.ListenTLSCertFile, ListenTLSKeyFile: n.ListenTLSKeyFile, ListenTLSClientCAFile: n.ListenTLSClientCAFile,
		CredsFile: n.CredsFile, NKeyFile: n.NKeyFile, User: n.User, Password: n.Password,
		TLSCAFile: n.TLSCAFile, TLSCertFile: n.TLSCertFile, TLSKeyFile: n.TLSKeyFile,
		Writer: c.Events, Replicas: c.Cluster.NATSReplicas,
	}
}

// NATSSubscriberKeyFile is the file holding the embedded server's
// subscriber credential; "" with an external server or no listener.
func (s *Service) NATSSubscriberKeyFile() string { return s.natsSubscriberKeyFile }
