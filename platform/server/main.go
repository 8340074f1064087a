package server

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/platform/envflag"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/platform/telemetry"
)

// TelemetryShutdownTimeout bounds the final flush of spans and metrics, so
// an unreachable collector cannot hold a stopping process.
const TelemetryShutdownTimeout = 5 * time.Second

// ShutdownTelemetry flushes tel within TelemetryShutdownTimeout and logs a
// failure.
func ShutdownTelemetry(ctx context.Context, tel *telemetry.Telemetry, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), TelemetryShutdownTimeout)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		logger.WarnContext(ctx, "telemetry flush failed", "error", err)
	}
}

// Build makes a binary's services from its parsed flags; srv is the server
// configuration (its token store path, for one).
type Build func(ctx context.Context, logger *slog.Logger, srv Config) (svcs []Service, cleanup func(), err error)

// Main is the whole main function of a single-service binary. It parses
// the shared server and logging flags, plus those register adds, each with
// its FABRO_* environment fallback; builds the services; serves them until
// SIGINT or SIGTERM; drains; and runs the cleanup build returned. On error
// it prints "name: error" and exits 1. Without -auth-tokens-file the token
// store is <data-dir>/auth/tokens.json when register added -data-dir.
// With -healthcheck it only asks the running server's health (HealthCheck).
func Main(name string, defaults Config, register func(*flag.FlagSet), build Build) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runMain(ctx, name, os.Args[1:], defaults, register, build)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func runMain(ctx context.Context, name string, args []string, defaults Config, register func(*flag.FlagSet), build Build) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var (
		srvCfg Config
		logCfg logging.Config
	)
	srvCfg.RegisterFlags(fs, defaults)
	logCfg.RegisterFlags(fs)
	register(fs)
	check := fs.Bool("healthcheck", false, "ask the running server at -grpc-addr for its health (grpc.health.v1) and exit 0 when SERVING, 1 otherwise; for container healthchecks")
	if err := envflag.Parse(fs, args, "FABRO", nil); err != nil {
		return err
	}
	if *check {
		return HealthCheck(ctx, srvCfg.GRPCAddr, srvCfg.TLS.CertFile != "")
	}
	if f := fs.Lookup("data-dir"); srvCfg.TokensFile == "" && f != nil && f.Value.String() != "" {
		srvCfg.TokensFile = DefaultTokensFile(f.Value.String())
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	if err := nonDumpable(); err != nil {
		return fmt.Errorf("make the service non-dumpable: %w", err)
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "fabro-" + name, Logger: logger})
	if err != nil {
		return err
	}
	defer ShutdownTelemetry(ctx, tel, logger)
	srvCfg.Metrics = tel.MetricsHandler()
	svcs, cleanup, err := build(ctx, logger, srvCfg)
	if err != nil {
		return err
	}
	defer cleanup()
	return Run(ctx, srvCfg, logger, svcs...)
}

// DefaultTokensFile is the token store's place in a data directory; the
// admin token fabro serve creates lives beside it (DefaultAdminTokenFile).
func DefaultTokensFile(dataDir string) string { return filepath.Join(dataDir, "auth", "tokens.json") }

// DefaultAdminTokenFile is where fabro serve writes the first admin token
// and where the fabro commands look for one.
func DefaultAdminTokenFile(dataDir string) string {
	return filepath.Join(dataDir, "auth", "admin.token")
}
