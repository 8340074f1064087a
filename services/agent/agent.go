// Package agent is the agent service: coding-agent sessions whose model
// turns go through the LLM gateway and whose tools act through the sandbox
// service, with every event published to NATS JetStream and streamed to
// callers over gRPC and REST.
package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/vaultclient"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// Defaults for zero Config fields.
const (
	DefaultModel      = "claude-sonnet-4.5"
	DefaultNATSListen = "127.0.0.1:7723"
	// DefaultLLMAddr and DefaultSandboxAddr are the standalone binaries'
	// gRPC addresses.
	DefaultLLMAddr     = "127.0.0.1:7701"
	DefaultSandboxAddr = "127.0.0.1:7702"
)

// Config configures the agent service. The flag-bound fields come first;
// the rest are for embedding and tests.
type Config struct {
	// LLMAddr is the LLM gateway's gRPC address.
	LLMAddr string
	// SandboxAddr is the sandbox service's gRPC address.
	SandboxAddr string
	// NATSURL is an external NATS server with JetStream; empty runs
	// nats-server embedded, storing under DataDir/agent/nats.
	NATSURL string
	// NATSListen is the embedded server's client address, so other
	// processes can subscribe ("host:port", port -1 picks one; "none"
	// accepts in-process connections only).
	NATSListen string
	// NATS holds the credentials and TLS settings of NATS.
	NATS NATSSecurity
	// DataDir holds the embedded NATS store and the session records; the
	// caller registers its flag, shared by every service.
	DataDir string
	// DefaultModel is used when CreateSession names no model.
	DefaultModel string
	// Events bounds how session event writers ride out NATS outages and
	// what the events stream retains (flags in eventflags.go).
	Events bus.WriterConfig

	// VaultAddr is the vault's gRPC address, from which tools resolve their
	// credentials (web_search's BRAVE_SEARCH_API_KEY). Empty: the agent's
	// own environment.
	VaultAddr string
	// TokenFile holds the agent's own token, presented on every call to the
	// gateway, the sandbox service and the vault (else $FABRO_TOKEN).
	TokenFile string
	// Client configures those connections: TLS with a CA file.
	Client grpcclient.Options
	// BraveBaseURL is the Brave Search API web_search calls (default
	// https://api.search.brave.com), for a proxy or a test double.
	BraveBaseURL string
	// WebFetchPrivateNetwork turns web_fetch's guard against private,
	// loopback and link-local addresses off. For tests, whose pages are on
	// 127.0.0.1 (e2e/agent); no flag sets it.
	WebFetchPrivateNetwork bool
	// Vault overrides VaultAddr with a ready client (an in-process vault).
	Vault *vaultclient.Client
	// LookupEnv reads the environment when no vault is configured (default
	// os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// LLM and Sandbox override LLMAddr and SandboxAddr with ready clients
	// (an in-process connection).
	LLM     llmv1.LLMGatewayServiceClient
	Sandbox sandboxv1.SandboxServiceClient
	// ReplayBackoff is the wait before replaying a failed turn (tests pass
	// a short one); nil means 1 s doubling.
	ReplayBackoff func(attempt int) time.Duration
	// SettingsFile is the operator's tool settings file (rules, hooks,
	// trusted project settings), read on this host at every CreateSession;
	// empty or missing: none.
	SettingsFile string
	// Sessions bounds the sessions: idle expiry and the per-principal cap
	// (flags in sessionflags.go).
	Sessions SessionLimits
	// Records overrides where session records are kept (default: files
	// under DataDir/agent/sessions), for a JetStream key-value store.
	Records records.Store
	// MemoryEvents keeps the embedded server's events stream in memory, in
	// a fresh store directory: nothing to recover at start, nothing kept
	// after Close. For `fabro exec`'s own stack, whose caller reads the
	// events from its Prompt stream.
	MemoryEvents bool
	// Tokens tells which fabro tokens are still issued (the server's
	// *auth.Store): an events credential ends with the token it was issued
	// to. Nil: credentials last their ttl.
	Tokens Tokens
	// Cluster makes replicas share sessions through NATS (cluster.go).
	Cluster ClusterConfig
	// ResumeOnStart continues, once the service is up, every prompt a
	// previous process left unfinished (restart.go); off, such sessions
	// are SUSPENDED until resumed. The flag -agent-resume-on-start
	// defaults to on; a Config built in code starts with it off.
	ResumeOnStart bool
	// NoTurnCheckpoint skips the record's checkpoint before each turn, so
	// that a benchmark (e2e/agent BenchmarkTurnCheckpoint) measures its
	// cost; a crash then continues a prompt from its start at best. No
	// flag sets it.
	NoTurnCheckpoint bool
	// NoWorkspaceCheckpoints turns off the workspace checkpoints after
	// each turn (checkpoints.go), for the benchmark that measures them.
	NoWorkspaceCheckpoints bool
}

// RegisterFlags binds -llm-addr, -sandbox-addr, -nats-url and -nats-listen
// to c; with platform/envflag they read FABRO_LLM_ADDR, FABRO_SANDBOX_ADDR,
// FABRO_NATS_URL and FABRO_NATS_LISTEN.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	if c.LLMAddr == "" {
		c.LLMAddr = DefaultLLMAddr
	}
	if c.SandboxAddr == "" {
		c.SandboxAddr = DefaultSandboxAddr
	}
	if c.NATSListen == "" {
		c.NATSListen = DefaultNATSListen
	}
	fs.StringVar(&c.LLMAddr, "llm-addr", c.LLMAddr, "LLM gateway gRPC address (host:port)")
	fs.StringVar(&c.SandboxAddr, "sandbox-addr", c.SandboxAddr, "sandbox service gRPC address (host:port)")
	fs.StringVar(&c.NATSURL, "nats-url", c.NATSURL, "external NATS server URL with JetStream; empty runs nats-server embedded")
	fs.StringVar(&c.NATSListen, "nats-listen", c.NATSListen, "embedded nats-server client address (host:port; port -1 picks one; \"none\": in-process only)")
	c.NATS.RegisterFlags(fs)
	fs.StringVar(&c.VaultAddr, "vault-addr", c.VaultAddr, "vault gRPC address (host:port) for tool credentials such as BRAVE_SEARCH_API_KEY; empty: environment only")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file holding the agent's own token, presented to the gateway, the sandbox service and the vault; default $FABRO_TOKEN")
	c.Client.RegisterFlags(fs, "")
	fs.StringVar(&c.BraveBaseURL, "brave-base-url", c.BraveBaseURL, "Brave Search API base URL for web_search (default https://api.search.brave.com)")
	fs.StringVar(&c.SettingsFile, "agent-settings", c.SettingsFile, "the operator's tool settings file (JSON: permissions, hooks, approval_timeout, trusted_project_settings); empty: none")
	fs.StringVar(&c.DefaultModel, "agent-default-model", c.DefaultModel, "model of sessions that name none (default "+DefaultModel+")")
	registerEventFlags(fs, &c.Events)
	RegisterSessionFlags(fs, &c.Sessions)
	c.Cluster.registerFlags(fs)
	RegisterResumeFlag(fs, &c.ResumeOnStart)
}

// RegisterResumeFlag binds -agent-resume-on-start (default on) to on
// (Config.ResumeOnStart).
func RegisterResumeFlag(fs *flag.FlagSet, on *bool) {
	fs.BoolVar(on, "agent-resume-on-start", true, "at start, continue every prompt the previous process left unfinished (killed mid-prompt); false: such sessions stay SUSPENDED until resumed")
}

// Service is the agent service. It implements agentv1.AgentServiceServer
// and the server runtime's Service interface.
type Service struct {
	agentv1.UnimplementedAgentServiceServer

	logger        *slog.Logger
	tokens        Tokens // nil: no token store in this process
	llm           llmv1.LLMGatewayServiceClient
	sandbox       sandboxv1.SandboxServiceClient
	bus           *bus.Bus
	records       records.Store
	limits        SessionLimits
	defaultModel  string
	replayBackoff func(int) time.Duration
	closers       []func() error
	hub           hub // tree subscriptions: Prompt, StreamEvents(include_subagents)
	credential    func(ctx context.Context, name string) (string, error)
	braveBaseURL  string
	fetchPrivate  bool
	settingsFile  string
	taskLists     map[string]*tools.TodoStore // by root session id; under mu
	approvalsState

	natsSubscriberKeyFile string
	replica               *replica // nil outside a cluster (cluster.go)
	resumesUnfinished     bool     // Config.ResumeOnStart
	noTurnCheckpoint      bool     // Config.NoTurnCheckpoint
	noCheckpoints         bool     // Config.NoWorkspaceCheckpoints

	ckMu     sync.Mutex
	ckStates map[string]*ckState // loaded root sessions' workspace checkpoints (checkpoints.go)

	mu       sync.Mutex
	sessions map[string]*session // the loaded (open) sessions only
	tree     map[string][]string // parent id -> child ids seen by this process, oldest first
	resuming map[string]string   // session id -> the unfinished prompt being continued (restart.go)
	// opening counts the ResumeSession calls under way per session id,
	// purging names the sessions the retention is purging (retention.go):
	// one excludes the other, under mu.
	opening map[string]int
	purging map[string]bool

	replays      *replayLimiter // StreamEvents replays per principal
	spawnMu      sync.Mutex     // orders the tree cap's checks (reserveInTree)
	treeReserved map[string]int // root id -> subagents being built; under spawnMu
	order        int64          // creation counter, for child order
	closed       bool
	prompts      sync.WaitGroup // running prompts
	// checkpoints are the sessions' background record writes
	// (session.checkpoint), awaited by Close.
	checkpoints sync.WaitGroup
	stop        chan struct{} // closed by Close: ends the idle reaper
	reaper      sync.WaitGroup
}

// New connects to the gateway and the sandbox service (lazily: it never
// blocks on them) and starts or connects to NATS. It reads no session
// record: a record is read when its session is touched, and a session a
// previous run left open is then SUSPENDED.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Service, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("agent: a data directory is required")
	}
	s := &Service{
		logger:           logger,
		llm:              cfg.LLM,
		sandbox:          cfg.Sandbox,
		records:          cfg.Records,
		limits:           cfg.Sessions,
		defaultModel:     cfg.DefaultModel,
		replayBackoff:    cfg.ReplayBackoff,
		sessions:         map[string]*session{},
		tree:             map[string][]string{},
		settingsFile:     cfg.SettingsFile,
		stop:             make(chan struct{}),
		replays:          newReplayLimiter(cfg.Sessions.MaxReplaysPerPrincipal),
		noTurnCheckpoint: cfg.NoTurnCheckpoint,
		noCheckpoints:    cfg.NoWorkspaceCheckpoints,
	}
	s.approvals = map[string]*approval{}
	defer func() {
		if err != nil {
			s.closeResources()
		}
	}()
	if s.defaultModel == "" {
		s.defaultModel = DefaultModel
	}
	if s.records == nil {
		if s.records, err = records.NewFile(filepath.Join(cfg.DataDir, "agent", "sessions")); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	dial := func(addr, what string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
		if addr == "" {
			return nil, fmt.Errorf("agent: no %s address", what)
		}
		o := cfg.Client
		o.Extra = append(slices.Clip(o.Extra), extra...)
		if o.Token == nil {
			o.Token = grpcclient.TokenFileOrEnv(cfg.TokenFile, cfg.LookupEnv)
		}
		if o.Token == nil {
			logger.WarnContext(ctx, "agent has no token of its own: give -token-file or $FABRO_TOKEN, or its calls are refused", "calling", what)
		}
		conn, err := grpcclient.New(addr, o)
		if err != nil {
			return nil, fmt.Errorf("agent: %s client: %w", what, err)
		}
		s.closers = append(s.closers, conn.Close)
		return conn, nil
	}
	if s.llm == nil {
		conn, err := dial(cfg.LLMAddr, "LLM gateway")
		if err != nil {
			return nil, err
		}
		s.llm = llmv1.NewLLMGatewayServiceClient(conn)
	}
	if s.sandbox == nil {
		// A sandbox service that restarts is waited for (within each
		// call's deadline), not a failed tool call and a closed session.
		conn, err := dial(cfg.SandboxAddr, "sandbox service", grpcclient.AwaitRestart(grpcclient.DefaultRestartWait, sandboxRetryable)...)
		if err != nil {
			return nil, err
		}
		s.sandbox = sandboxv1.NewSandboxServiceClient(conn)
	}
	s.sandbox = actingSandbox{c: s.sandbox}
	lookupEnv := cfg.LookupEnv
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	vc := cfg.Vault
	if vc == nil && cfg.VaultAddr != "" {
		conn, err := dial(cfg.VaultAddr, "vault")
		if err != nil {
			return nil, err
		}
		vc = vaultclient.New(vaultv1.NewVaultServiceClient(conn))
	}
	s.credential = credentialFunc(vc, lookupEnv)
	s.braveBaseURL = cfg.BraveBaseURL
	s.fetchPrivate = cfg.WebFetchPrivateNetwork
	listen := cfg.NATSListen
	if listen == "none" {
		listen = ""
	}
	bc := cfg.busConfig(listen)
	if cfg.MemoryEvents && bc.URL == "" {
		tmp, err := os.MkdirTemp("", "fabro-agent-nats-")
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		s.closers = append(s.closers, func() error { return os.RemoveAll(tmp) })
		bc.StoreDir, bc.MemoryStorage = tmp, true
	}
	s.bus, err = bus.Open(ctx, bc, logger)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	s.natsSubscriberKeyFile = bc.SubscriberKeyFile
	if cfg.Cluster.Enabled {
		if err := s.startReplica(ctx, cfg); err != nil {
			return nil, err
		}
	}
	if err := s.observeSessions(); err != nil {
		return nil, err
	}
	s.startReaper()
	s.startRetention()
	s.tokens = cfg.Tokens
	s.watchTokens(cfg.Tokens)
	if cfg.ResumeOnStart {
		s.resumesUnfinished = true
		s.resumeOnStart()
	}
	return s, nil
}

// NATSURL is where other processes subscribe to the events: the external
// server's URL or the embedded server's listen URL.
func (s *Service) NATSURL() string { return s.bus.ClientURL() }

// DialNATS opens another connection to the service's NATS (the embedded
// server or the external one), with its credentials, for another service
// of the same process that keeps state in JetStream (fabro serve's LLM
// gateway: its governance counters). The caller closes the connection
// before the service.
func (s *Service) DialNATS(name string) (*nats.Conn, jetstream.JetStream, error) {
	return s.bus.Dial(name)
}

// Close aborts running prompts, waits for them to end, and stops NATS.
// Sessions stay on record; a restart lists the open ones as SUSPENDED.
func (s *Service) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	var running []*session
	for _, sess := range s.sessions {
		running = append(running, sess)
	}
	s.mu.Unlock()
	if s.replica != nil {
		// Hand the sessions over: their records say what was running,
		// nothing more is published here, and the leases go, so another
		// replica continues the prompts at once.
		for _, sess := range running {
			sess.writeRecord()
			s.fence(sess.info.GetSessionId(), errors.New("this agent replica is shutting down"))
		}
	}
	for _, sess := range running {
		sess.agentAbort("the agent service is shutting down")
	}
	s.prompts.Wait()
	s.reaper.Wait()
	s.checkpoints.Wait()
	for _, sess := range running {
		sess.writeRecord()
		sess.mcp.Close()
	}
	if s.replica != nil {
		s.replica.close()
	}
	return s.closeResources()
}

func (s *Service) closeResources() error {
	var errs []error
	if s.bus != nil {
		errs = append(errs, s.bus.Close())
	}
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// Name implements the server runtime's Service.
func (s *Service) Name() string { return agentv1.AgentService_ServiceDesc.ServiceName }

// RegisterGRPC implements the server runtime's Service.
// Its handlers settle forwarded principals and, on a cluster, forward a
// session's calls to the replica that owns it (forward.go).
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { r.RegisterService(s.serviceDesc(), s) }

// RegisterGateway implements the server runtime's Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return agentv1.RegisterAgentServiceHandler(ctx, mux, conn)
}
