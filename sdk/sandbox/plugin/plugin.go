// Package plugin runs sandbox drivers out of process, over
// hashicorp/go-plugin's gRPC transport with automatic mutual TLS and the
// protocol fabro.sandbox.plugin.v1 (proto/fabro/sandbox/plugin/v1).
//
// A plugin's whole main is one call:
//
//	func main() { plugin.Serve(mydriver.New()) }
//
// where mydriver implements [driver.Driver], the interface the sandbox
// service uses for its built-in drivers too; a driver that also implements
// [driver.Reopener], or whose sandboxes implement [driver.Checker], has
// those carried over as well. Log with [Logger]: its lines reach the
// host's log tagged with the plugin's name. Anything written to stdout is
// not the handshake and is discarded by the host.
//
// The host side is [New]: it turns a plugin binary into a [driver.Driver]
// that starts the plugin when first needed, verifies its SHA-256, forwards
// its logs, health-checks it, and restarts it with backoff after a crash.
// The plugintest package runs the drivertest contract suite against a
// plugin binary.
package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// ProtocolVersion is the newest protocol version this SDK speaks: the
// package fabro.sandbox.plugin.v1. Hosts and plugins negotiate the highest
// version both speak.
const ProtocolVersion = 1

// ProtocolVersions are the protocol versions this SDK speaks, host and
// plugin alike.
var ProtocolVersions = []int{1}

// pluginName is the one plugin a plugin binary dispenses.
const pluginName = "driver"

// handshake is go-plugin's base handshake: the cookie tells a plugin it was
// started by a host, not run by hand. It never changes.
var handshake = goplugin.HandshakeConfig{
	MagicCookieKey:   "FABRO_SANDBOX_PLUGIN",
	MagicCookieValue: "7c1f4e0a5d2b4f8e9a3c6b1d0e5f2a47",
}

// Option configures [Serve].
type Option func(*serveConfig)

type serveConfig struct {
	logger   *slog.Logger
	version  string
	versions []int
}

// WithLogger sets the logger of the plugin's serving machinery; default
// [Logger].
func WithLogger(l *slog.Logger) Option { return func(c *serveConfig) { c.logger = l } }

// WithVersion sets the version the plugin reports (ListDrivers shows it);
// default the main module's version from the build information.
func WithVersion(v string) Option { return func(c *serveConfig) { c.version = v } }

// WithProtocolVersions makes the plugin speak only the given protocol
// versions. It exists to test version negotiation: a real plugin speaks
// what its SDK speaks.
func WithProtocolVersions(v ...int) Option { return func(c *serveConfig) { c.versions = v } }

// Serve serves d as a plugin until the host closes it, and exits. Run by
// hand rather than by a host, it says so and exits with status 1.
func Serve(d driver.Driver, opts ...Option) {
	cfg := serveConfig{logger: Logger(), versions: ProtocolVersions}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.version == "" {
		cfg.version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			cfg.version = bi.Main.Version
		}
	}
	if os.Getenv(handshake.MagicCookieKey) != handshake.MagicCookieValue {
		fmt.Fprintf(stderr, "%s is a fabro sandbox driver plugin (driver %q, protocol versions %v).\n"+
			"It is started by the sandbox service, not by hand; check it with: fabro sandbox conformance %s\n",
			os.Args[0], d.Name(), cfg.versions, os.Args[0])
		os.Exit(1)
	}
	if offered := hostVersions(); len(offered) > 0 && !slices.ContainsFunc(cfg.versions, func(v int) bool { return slices.Contains(offered, v) }) {
		// go-plugin would answer with its lowest version and let the host
		// refuse it; say first, in the host's log, what each side speaks.
		cfg.logger.Error("no common sandbox plugin protocol version", "plugin_versions", fmt.Sprint(cfg.versions), "host_versions", fmt.Sprint(offered))
	}
	go exitWithHost(cfg.logger)
	versioned := map[int]goplugin.PluginSet{}
	for _, v := range cfg.versions {
		versioned[v] = goplugin.PluginSet{pluginName: &grpcPlugin{impl: d, version: cfg.version, logger: cfg.logger}}
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: versioned,
		GRPCServer:       goplugin.DefaultGRPCServer,
		Logger:           newHCLog(cfg.logger).Named("go-plugin"),
	})
}

// exitWithHost ends the plugin once its host is gone: a host killed with
// SIGKILL cannot stop it, and go-plugin would serve no one for good,
// holding what its commands hold. The host's death reparents the plugin,
// so its parent pid changes. The process exits: the commands it started
// go with it (their parent-death signal).
func exitWithHost(logger *slog.Logger) {
	host := os.Getppid()
	for range time.Tick(200 * time.Millisecond) {
		if os.Getppid() != host {
			logger.Error("the sandbox service that started this plugin is gone; exiting", "host_pid", host)
			os.Exit(1)
		}
	}
}

// hostVersions are the protocol versions the host offered.
func hostVersions() []int {
	var out []int
	for s := range strings.SplitSeq(os.Getenv("PLUGIN_PROTOCOL_VERSIONS"), ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// grpcPlugin is go-plugin's view of the driver: the plugin side serves it,
// the host side gets a client for it.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl    driver.Driver
	version string
	logger  *slog.Logger
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginv1.RegisterDriverPluginServiceServer(s, newServer(p.impl, p.version, p.logger))
	return nil
}

// GRPCClient returns a connection handle; ctx ends when the plugin process
// exits, which is how the host learns of a crash.
func (p *grpcPlugin) GRPCClient(ctx context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &conn{client: pluginv1.NewDriverPluginServiceClient(c), exited: ctx.Done()}, nil
}

// conn is a live connection to one plugin process.
type conn struct {
	client pluginv1.DriverPluginServiceClient
	exited <-chan struct{}
}
