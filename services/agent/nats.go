package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
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
	// Insecure lets the embedded server listen on an address that is not
	// loopback without TLS (a warning at start); no flag of its own: the
	// server's -insecure sets it.
	Insecure bool
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
		Insecure:  n.Insecure,
		CredsFile: n.CredsFile, NKeyFile: n.NKeyFile, User: n.User, Password: n.Password,
		TLSCAFile: n.TLSCAFile, TLSCertFile: n.TLSCertFile, TLSKeyFile: n.TLSKeyFile,
		Writer: c.Events, Replicas: c.Cluster.NATSReplicas,
	}
}

// NATSSubscriberKeyFile is the file holding the embedded server's
// subscriber credential; "" with an external server or no listener.
func (s *Service) NATSSubscriberKeyFile() string { return s.natsSubscriberKeyFile }

// Bounds of IssueEventsCredential's ttl.
const (
	defaultEventsCredentialTTL = 15 * time.Minute
	minEventsCredentialTTL     = time.Minute
	maxEventsCredentialTTL     = time.Hour
)

const (
	reasonNATSNotEmbedded       = "NATS_NOT_EMBEDDED"
	reasonEventsCredentialLimit = "EVENTS_CREDENTIAL_LIMIT"
)

// IssueEventsCredential implements agentv1.AgentServiceServer: a user of
// the embedded NATS server that subscribes to the named sessions' live
// events only (no publish, so no JetStream API: replay is StreamEvents). A
// session of another principal is NOT_FOUND, as an unknown one is, so ids
// are no oracle.
func (s *Service) IssueEventsCredential(ctx context.Context, req *agentv1.IssueEventsCredentialRequest) (*agentv1.IssueEventsCredentialResponse, error) {
	ids := req.GetSessionIds()
	switch {
	case len(ids) == 0:
		return nil, domain.InvalidField("session_ids", "session_ids: name at least one session")
	case len(ids) > bus.MaxCredentialSessions:
		return nil, domain.InvalidField("session_ids", fmt.Sprintf("session_ids: at most %d sessions, got %d", bus.MaxCredentialSessions, len(ids)))
	}
	ttl := defaultEventsCredentialTTL
	if req.GetTtl() != nil {
		if err := req.GetTtl().CheckValid(); err != nil {
			return nil, domain.InvalidField("ttl", "ttl: "+err.Error())
		}
		if ttl = req.GetTtl().AsDuration(); ttl < minEventsCredentialTTL || ttl > maxEventsCredentialTTL {
			return nil, domain.InvalidField("ttl", fmt.Sprintf("ttl: %s is outside %s to %s", ttl, minEventsCredentialTTL, maxEventsCredentialTTL))
		}
	}
	caller, _ := auth.FromContext(ctx)
	who := principalOf(ctx)
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		field := fmt.Sprintf("session_ids[%d]", i)
		if seen[id] {
			return nil, domain.InvalidField(field, fmt.Sprintf("%s: session %q is named twice", field, id))
		}
		seen[id] = true
		sess, rec, err := s.find(ctx, field, id)
		if err != nil {
			return nil, err
		}
		info := rec.GetSession()
		if sess != nil {
			info = sess.snapshotInfo()
		}
		if caller.Role != auth.RoleAdmin && info.GetPrincipal() != who {
			return nil, sessionNotFound(field, id)
		}
	}
	cred, err := s.bus.IssueCredential(who, caller.TokenID, ids, ttl)
	switch {
	case errors.Is(err, bus.ErrNotEmbedded):
		return nil, domain.New(codes.FailedPrecondition, reasonNATSNotEmbedded,
			"the events are not on an embedded NATS server that listens: an external server's operator issues its credentials (docs/ARCHITECTURE.md, \"Agent events on NATS\")")
	case errors.Is(err, bus.ErrCredentialLimit):
		return nil, domain.New(codes.ResourceExhausted, reasonEventsCredentialLimit,
			fmt.Sprintf("%s already holds %d unexpired events credentials, the most allowed", principalName(who), bus.MaxCredentialsPerPrincipal),
			grpcerr.Meta("principal", who, "limit", fmt.Sprint(bus.MaxCredentialsPerPrincipal)), grpcerr.RetryAfter(time.Minute))
	case err != nil:
		return nil, fmt.Errorf("agent: issue events credential: %w", err)
	}
	s.logger.InfoContext(ctx, "events credential issued", "principal", who, "nats_user", cred.User,
		"session_ids", ids, "expires", cred.Expires)
	return &agentv1.IssueEventsCredentialResponse{
		NatsUrl: s.bus.ClientURL(), User: cred.User, Password: cred.Password, InboxPrefix: cred.InboxPrefix,
		Subjects: cred.Subjects, ExpireTime: timestamppb.New(cred.Expires),
	}, nil
}

// Tokens says whether a fabro token is still issued, and when that may
// have changed; *auth.Store is one.
type Tokens interface {
	auth.Notifier
	Issued(tokenID string) bool
}

// watchTokens ends the events credentials of revoked tokens, at once on
// every change tokens reports and at least every auth.DefaultRecheck (a
// store file changed by another process is noticed on a read), until
// Close: NATS subscriptions end with their token as gRPC streams do.
func (s *Service) watchTokens(tokens Tokens) {
	if tokens == nil {
		return
	}
	s.reaper.Add(1)
	go func() {
		defer s.reaper.Done()
		t := time.NewTicker(auth.DefaultRecheck)
		defer t.Stop()
		for {
			changed := tokens.Changed() // taken before the sweep: a change during it closes this one
			if n := s.bus.RevokeCredentials(tokens.Issued); n > 0 {
				s.logger.Info("events credentials of revoked tokens ended", "credentials", n)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			case <-changed:
			}
		}
	}()
}
