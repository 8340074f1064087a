package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"

	"google.golang.org/grpc"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/vaultclient"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// stackConfig configures every service run in one process.
type stackConfig struct {
	server       server.Config
	vault        vault.Config // DataDir and LookupEnv included
	agentDataDir string       // session records and the embedded NATS store
	llmOverlay   string
	// llmPrincipalLimits is the gateway's principal limits file.
	llmPrincipalLimits string
	natsURL            string
	natsListen         string
	nats               agent.NATSSecurity
	braveBaseURL       string
	sandbox            sandbox.Config // its DataDir empty keeps sandboxes in memory
	settingsFile       string         // the agent's operator settings file
	memoryEvents       bool           // the agent's events stream in memory: nothing to recover at start
	sessions           agent.SessionLimits
	// resumeOnStart continues the prompts a killed process left unfinished.
	resumeOnStart bool
}

// stack is every service running in this process behind one server.
type stack struct {
	srv     *server.Server
	store   *auth.Store     // the token store file
	tokens  *auth.Ephemeral // verifies the store's tokens and this process's own
	closers []func()
}

// startStack starts the vault, sandbox, LLM gateway and agent services
// behind one gRPC port and one REST port, plus the token service. The
// services call each other through the same server (its in-process
// listener), each with its own token, so every call crosses the
// interceptors, authentication included, that a remote call would.
func startStack(ctx context.Context, cfg stackConfig, logger *slog.Logger) (_ *stack, err error) {
	st := &stack{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	// Callers are verified against the token store file; the services of
	// this process present tokens that live in memory only (Ephemeral), one
	// per service, so each call is authorized as that service's.
	if cfg.server.TokensFile == "" {
		cfg.server.TokensFile = server.DefaultTokensFile(cfg.vault.DataDir)
	}
	st.store = auth.OpenStore(cfg.server.TokensFile)
	st.tokens = auth.NewEphemeral(st.store)
	cfg.server.Auth = st.tokens
	// The server exists only after the services, so the services'
	// connections dial lazily, through self, into the server's in-process
	// listener: no network and no TLS, but every interceptor.
	self := &selfDialer{ready: make(chan struct{})}
	dialAs := func(service string) (*grpc.ClientConn, error) {
		conn, err := grpcclient.New("passthrough:///fabro-self", grpcclient.Options{
			Dialer: self.dial, Token: grpcclient.Static(st.tokens.Issue(service, auth.RoleService)),
		})
		if err == nil {
			st.closers = append(st.closers, func() { conn.Close() })
		}
		return conn, err
	}
	gwConn, err := dialAs(auth.ServiceLLMGateway)
	if err != nil {
		return nil, err
	}
	agentConn, err := dialAs(auth.ServiceAgent)
	if err != nil {
		return nil, err
	}

	sandboxConn, err := dialAs(auth.ServiceSandbox)
	if err != nil {
		return nil, err
	}
	cfg.sandbox.DaytonaCredentials = vaultclient.New(vaultv1.NewVaultServiceClient(sandboxConn))

	v, err := vault.New(ctx, cfg.vault, logger)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { v.Close() })
	// Whatever the sandbox service keeps, the stack's data directory (the
	// vault's key and store, the tokens) is never a sandbox's root.
	cfg.sandbox.Security.Protect = append(cfg.sandbox.Security.Protect, cfg.vault.DataDir)
	sb, err := sandbox.New(cfg.sandbox, logger)
	if err != nil {
		return nil, err
	}
	// Sandboxes outlive the requests that made them: delete them, and kill
	// their commands, once the server has drained.
	st.closers = append(st.closers, func() { sb.Close(context.WithoutCancel(ctx)) })
	envelopeKey := "" // no data directory: a key in memory
	if cfg.vault.DataDir != "" {
		envelopeKey = filepath.Join(cfg.vault.DataDir, "llmgateway", "envelope.key")
	}
	ag, err := agent.New(ctx, agent.Config{
		DataDir:       cfg.agentDataDir,
		NATSURL:       cfg.natsURL,
		NATSListen:    cfg.natsListen,
		NATS:          natsSecurity(cfg),
		BraveBaseURL:  cfg.braveBaseURL,
		SettingsFile:  cfg.settingsFile,
		MemoryEvents:  cfg.memoryEvents,
		Sessions:      cfg.sessions,
		ResumeOnStart: cfg.resumeOnStart,
		Tokens:        st.store,
		LLM:           llmv1.NewLLMGatewayServiceClient(agentConn),
		Sandbox:       sandboxv1.NewSandboxServiceClient(agentConn),
		Vault:         vaultclient.New(vaultv1.NewVaultServiceClient(agentConn)),
	}, logger)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { ag.Close() })
	// The gateway's governance gets a connection of its own to the
	// agent's NATS: its flushes never queue behind the events. Closed after
	// the gateway (closers run in reverse), before the agent's server.
	govConn, govJS, err := ag.DialNATS("fabro-llmgateway-governance")
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, govConn.Close)
	gw, err := llmgateway.New(ctx, llmgateway.Config{
		CatalogOverlay:  cfg.llmOverlay,
		EnvelopeKeyFile: envelopeKey,
		Credentials:     llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(gwConn), nil),
		LookupEnv:       cfg.vault.LookupEnv,
		// The agent's NATS (embedded, or --nats-url) keeps the token
		// governance counters, so spend and rate windows survive a
		// restart as the split binaries' -llm-governance-nats-url does.
		GovernanceJetStream: govJS,
		PrincipalLimitsFile: cfg.llmPrincipalLimits,
	}, logger)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { gw.Close() })
	gw.SetAuthenticator(llmgateway.TokenAuthenticator(st.tokens, logger))
	gw.SetPolicies(st.store)

	if st.srv, err = server.Start(ctx, cfg.server, logger, v, sb, gw, ag, auth.NewTokenService(st.store)); err != nil {
		return nil, err
	}
	self.set(st.srv)
	logger.InfoContext(ctx, "agent events on NATS", "url", ag.NATSURL(), "subscriber_nkey_file", ag.NATSSubscriberKeyFile())
	return st, nil
}

// natsSecurity is the agent's NATS settings: its flags', and the server's
// -insecure, which lets the embedded NATS listen on a non-loopback address
// without TLS as it lets the gRPC and REST listeners.
func natsSecurity(cfg stackConfig) agent.NATSSecurity {
	n := cfg.nats
	n.Insecure = cfg.server.Insecure
	return n
}

// close stops the services in the reverse order of their start. The
// server must have been shut down first (Wait or Shutdown).
func (st *stack) close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
}

// selfDialer dials this process's own server, in process, once it exists.
type selfDialer struct {
	ready chan struct{}
	srv   *server.Server
}

func (d *selfDialer) set(srv *server.Server) {
	d.srv = srv
	close(d.ready)
}

func (d *selfDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	select {
	case <-d.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.srv.DialInProcess(ctx, addr)
}
