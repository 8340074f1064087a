package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/telemetry"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
)

// Default addresses of `fabro serve`; the per-service binaries use their own.
const (
	defaultGRPCAddr = "127.0.0.1:7700"
	defaultHTTPAddr = "127.0.0.1:7780"
)

// serveCommand is `fabro serve`.
func serveCommand() *command {
	return &command{
		name: "serve", summary: "run every service and the REST gateway in one process",
		long: `Runs the vault, the sandbox service, the LLM gateway, the agent and the
token service behind one gRPC port (--grpc-addr, the address the client
commands' --server names) and one REST port (--http-addr), with NATS
embedded, until SIGINT or SIGTERM; then drains. The first start writes an
admin token to <data-dir>/auth/admin.token, which the fabro commands on
this machine present.`,
		examples: `  fabro serve
  fabro serve --grpc-addr 0.0.0.0:7700 --tls-cert-file server.pem --tls-key-file server.key
  FABRO_DATA_DIR=/srv/fabro fabro serve --sandbox-driver docker`,
		define: serve,
	}
}

// serve runs every service in this process on one gRPC port and one REST
// port, until ctx ends (SIGINT or SIGTERM), then drains.
func serve(fs *flag.FlagSet, e env) runner {
	var (
		cfg     stackConfig
		logCfg  logging.Config
		dataDir string
	)
	cfg.server.RegisterFlags(fs, server.Config{GRPCAddr: defaultGRPCAddr, HTTPAddr: defaultHTTPAddr})
	logCfg.RegisterFlags(fs)
	cfg.vault.RegisterFlags(fs)
	fs.StringVar(&dataDir, "data-dir", defaultDataDir(e.lookupEnv), "directory for the vault, sandbox workspaces, agent session records and the embedded NATS store")
	fs.StringVar(&cfg.llmOverlay, "llm-catalog-overlay", "", "JSON catalog file merged over the built-in model catalog")
	fs.StringVar(&cfg.llmPrincipalLimits, "llm-principal-limits", "", "JSON file of LLM limits per principal across all its tokens (docs/GATEWAY.md); read at start")
	fs.StringVar(&cfg.natsURL, "nats-url", "", "external NATS server URL with JetStream; empty runs nats-server embedded")
	fs.StringVar(&cfg.braveBaseURL, "brave-base-url", "", "Brave Search API base URL for the agent's web_search (default https://api.search.brave.com)")
	fs.StringVar(&cfg.natsListen, "nats-listen", agent.DefaultNATSListen, "embedded nats-server client address, for subscribers in other processes (port -1 picks one; \"none\": in-process only)")
	fs.StringVar(&cfg.sandbox.PluginDir, "sandbox-plugin-dir", "", "directory of sandbox driver plugins: fabro-sandbox-NAME binaries and their SHA256SUMS (docs/plugins.md)")
	fs.StringVar(&cfg.sandbox.DefaultDriver, "sandbox-driver", "local", "the sandbox driver used when a spec names none: local or docker")
	fs.StringVar(&cfg.sandbox.DockerImage, "docker-image", docker.DefaultImage, "the docker sandbox driver's default image (built by `make sandbox-base`; never pulled)")
	cfg.nats.RegisterFlags(fs)
	agent.RegisterSessionFlags(fs, &cfg.sessions)
	agent.RegisterResumeFlag(fs, &cfg.resumeOnStart)
	cfg.sandbox.Security.RegisterFlags(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("serve takes no arguments, got %q", args)
		}
		return serveStack(ctx, cfg, logCfg, dataDir, e)
	}
}

func serveStack(ctx context.Context, cfg stackConfig, logCfg logging.Config, dataDir string, e env) error {
	logger, err := logCfg.New(e.stderr)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "fabro", Logger: logger, LookupEnv: e.lookupEnv})
	if err != nil {
		return err
	}
	defer server.ShutdownTelemetry(ctx, tel, logger)
	cfg.server.Metrics = tel.MetricsHandler()
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	cfg.vault.DataDir, cfg.vault.LookupEnv, cfg.agentDataDir, cfg.sandbox.DataDir = dataDir, e.lookupEnv, dataDir, dataDir
	if cfg.server.TokensFile == "" {
		cfg.server.TokensFile = server.DefaultTokensFile(dataDir)
	}
	adminFile := server.DefaultAdminTokenFile(dataDir)
	created, err := auth.OpenStore(cfg.server.TokensFile).EnsureAdminToken(adminFile)
	if err != nil {
		return err
	}
	if created {
		logger.InfoContext(ctx, "created the first admin token; the fabro commands on this machine use it, or give it to others with care", "path", adminFile)
	} else {
		logger.InfoContext(ctx, "admin token", "path", adminFile)
	}
	st, err := startStack(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer st.close()
	printReady(e.stderr, st.srv.GRPCAddr(), st.srv.HTTPAddr(), adminFile)
	return st.srv.Wait(ctx)
}

// printReady tells the person who started the server, once it listens,
// where it is, where its admin token is, and what to type next.
func printReady(w io.Writer, grpcAddr, httpAddr, adminFile string) {
	fmt.Fprintf(w, "\nfabro is serving: gRPC %s", grpcAddr)
	if httpAddr != "" {
		fmt.Fprintf(w, ", REST http://%s", httpAddr)
	}
	fmt.Fprintf(w, "\n  admin token: %s (the fabro commands on this machine read it)\n", adminFile)
	fmt.Fprintf(w, "  next, from your project: fabro exec --server %s \"explain this project\"\n  stop: Ctrl-C\n\n", grpcAddr)
}

// defaultDataDir follows the XDG base directory convention.
func defaultDataDir(lookupEnv func(string) (string, bool)) string {
	if d, ok := lookupEnv("XDG_DATA_HOME"); ok && d != "" {
		return filepath.Join(d, "fabro")
	}
	if home := homeDir(lookupEnv); home != "" {
		return filepath.Join(home, ".local", "share", "fabro")
	}
	return filepath.Join(os.TempDir(), "fabro")
}
