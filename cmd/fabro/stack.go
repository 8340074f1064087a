package main

import (
	"context"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
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
	natsURL      string
	natsListen   string
	braveBaseURL string
	settingsFile string // the agent's operator settings file
}

// stack is every service running in this process behind one server.
type stack struct {
	srv     *server.Server
	closers []func()
}

// startStack starts the vault, sandbox, LLM gateway and agent services
// behind one gRPC port and one REST port. The services call each other
// through that same gRPC port, so every call crosses the interceptors a
// remote call would.
func startStack(ctx context.Context, cfg stackConfig, logger *slog.Logger) (_ *stack, err error) {
	st := &stack{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	// The port is known only once the server listens (it may be :0), so the
	// services' connection dials lazily, through self.
	self := &selfDialer{ready: make(chan struct{})}
	conn, err := grpc.NewClient("passthrough:///fabro-self",
		grpc.WithContextDialer(self.dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { conn.Close() })

	v, err := vault.New(ctx, cfg.vault, logger)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { v.Close() })
	sb, err := sandbox.New(sandbox.Config{DataDir: cfg.vault.DataDir}, logger)
	if err != nil {
		return nil, err
	}
	// Sandboxes outlive the requests that made them: delete them, and kill
	// their commands, once the server has drained.
	st.closers = append(st.closers, func() { sb.Close(context.WithoutCancel(ctx)) })
	tokens := vault.DefaultServiceTokensFile(cfg.vault.DataDir)
	gw, err := llmgateway.New(ctx, llmgateway.Config{
		CatalogOverlay: cfg.llmOverlay,
		Credentials: llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(conn),
			vaultclient.TokenFromFile(tokens, llmgateway.ServiceName)),
		LookupEnv: cfg.vault.LookupEnv,
	}, logger)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { gw.Close() })
	ag, err := agent.New(ctx, agent.Config{
		DataDir:      cfg.agentDataDir,
		NATSURL:      cfg.natsURL,
		NATSListen:   cfg.natsListen,
		BraveBaseURL: cfg.braveBaseURL,
		SettingsFile: cfg.settingsFile,
		LLM:          llmv1.NewLLMGatewayServiceClient(conn),
		Sandbox:      sandboxv1.NewSandboxServiceClient(conn),
		Vault:        vaultclient.New(vaultv1.NewVaultServiceClient(conn), vaultclient.TokenFromFile(tokens, agent.ServiceName)),
	}, logger)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { ag.Close() })

	if st.srv, err = server.Start(ctx, cfg.server, logger, v, sb, gw, ag); err != nil {
		return nil, err
	}
	self.set(st.srv.GRPCAddr())
	logger.InfoContext(ctx, "agent events on NATS", "url", ag.NATSURL())
	return st, nil
}

// close stops the services in the reverse order of their start. The
// server must have been shut down first (Wait or Shutdown).
func (st *stack) close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
}

// selfDialer dials this process's own gRPC listener once its address is
// known.
type selfDialer struct {
	ready chan struct{}
	addr  string
}

func (d *selfDialer) set(addr string) {
	d.addr = addr
	close(d.ready)
}

func (d *selfDialer) dial(ctx context.Context, _ string) (net.Conn, error) {
	select {
	case <-d.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}
