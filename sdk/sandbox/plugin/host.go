package plugin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Config says how to run one plugin.
type Config struct {
	// Name is the driver's name in sandbox specs. The plugin's own name
	// (from Describe) may differ; the configured one wins.
	Name string
	// Path is the plugin binary.
	Path string
	// Args are given to the binary.
	Args []string
	// Env is the plugin's whole environment: it does not inherit the
	// host's, whose secrets it must not see.
	Env []string
	// SHA256 is the binary's expected checksum in hex; a binary that
	// differs is refused. Empty skips the check (tests and the conformance
	// kit only: the service requires it).
	SHA256 string
	// Logger receives the plugin's log lines and go-plugin's events, with
	// the attribute plugin=Name; default slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds a start (launch, handshake, Describe); default 10s.
	StartTimeout time.Duration
	// CallTimeout bounds a call whose context has no earlier deadline
	// (exec aside, which its own timeout bounds); default 1m.
	CallTimeout time.Duration
	// HealthInterval is how often a running plugin is health-checked
	// (Available must answer in HealthTimeout, else the plugin is killed,
	// to be restarted on the next request); default 10s, negative: never.
	HealthInterval time.Duration
	// HealthTimeout defaults to 2s.
	HealthTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart after a
	// failure; the wait doubles with each failure in a row. Defaults 100ms
	// and 30s.
	MinBackoff, MaxBackoff time.Duration
}

// stopSlack is how long after its own deadline a plugin has to end an exec
// before the host gives up on it.
const stopSlack = 5 * time.Second

// maxWait is the longest a request waits for a restart's backoff to end;
// a longer backoff fails the request at once.
const maxWait = 2 * time.Second

// Driver is a plugin as a [driver.Driver]. It is safe for concurrent use.
type Driver struct {
	cfg    Config
	logger *slog.Logger

	startMu sync.Mutex // one start at a time
	mu      sync.Mutex
	proc    *process // nil until started, or after a failure
	desc    *pluginv1.DescribeResponse
	lastErr error // why the plugin is down
	fails   int   // failures in a row
	retryAt time.Time
	closed  bool
}

var (
	_ driver.Driver   = (*Driver)(nil)
	_ driver.Reopener = (*Driver)(nil)
)

// New returns a plugin driver. It starts nothing: the plugin starts when
// first needed.
func New(cfg Config) *Driver {
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 10*time.Second)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, time.Minute)
	cfg.HealthInterval = cmp.Or(cfg.HealthInterval, 10*time.Second)
	cfg.HealthTimeout = cmp.Or(cfg.HealthTimeout, 2*time.Second)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, 100*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 30*time.Second)
	l := cmp.Or(cfg.Logger, slog.Default()).With("plugin", cfg.Name)
	return &Driver{cfg: cfg, logger: l}
}

// process is one running plugin process.
type process struct {
	client  *goplugin.Client
	cmd     *exec.Cmd
	conn    *conn
	started time.Time
	stop    chan struct{} // closed to end the monitor

	mu     sync.Mutex
	reason error // why it is gone, once it is
}

// gone returns why the process is gone, or nil while it runs.
func (p *process) gone() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reason != nil {
		return p.reason // killed: gone even before its exit is seen
	}
	select {
	case <-p.conn.exited:
	default:
		return nil
	}
	if p.reason == nil {
		p.reason = fmt.Errorf("exited (%s)", exitStatus(p.cmd))
	}
	return p.reason
}

func exitStatus(cmd *exec.Cmd) string {
	if cmd.ProcessState == nil {
		return "status unknown"
	}
	return cmd.ProcessState.String()
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return d.cfg.Name }

// Path is the plugin binary.
func (d *Driver) Path() string { return d.cfg.Path }

// describe returns the plugin's description, starting it the first time.
func (d *Driver) describe() *pluginv1.DescribeResponse {
	d.mu.Lock()
	desc, down := d.desc, d.lastErr
	d.mu.Unlock()
	if desc != nil {
		return desc
	}
	if down != nil {
		return &pluginv1.DescribeResponse{} // never described; a create retries the start
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StartTimeout)
	defer cancel()
	if _, err := d.running(ctx); err != nil {
		return &pluginv1.DescribeResponse{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.desc
}

// Capabilities implements driver.Driver; those the plugin last described
// (the plugin is started to learn them the first time).
func (d *Driver) Capabilities() driver.Capabilities {
	return capsFromProto(d.describe().GetCapabilities())
}

// Version is the version the plugin reports.
func (d *Driver) Version() string { return d.describe().GetVersion() }

// Available implements driver.Driver: the plugin runs (or starts) and says
// it can make sandboxes.
func (d *Driver) Available(ctx context.Context) error {
	ctx, cancel := d.callContext(ctx)
	defer cancel()
	// A plugin that is down stays reported down, with the reason, until a
	// sandbox is asked of it: Create restarts it.
	d.mu.Lock()
	down := d.lastErr
	if d.proc != nil && d.proc.gone() != nil {
		down = d.proc.gone()
	}
	d.mu.Unlock()
	if down != nil {
		return fmt.Errorf("%w: plugin %q: %v", driver.ErrUnavailable, d.cfg.Name, down)
	}
	p, err := d.running(ctx)
	if err != nil {
		return err
	}
	resp, err := p.conn.client.Available(ctx, &pluginv1.AvailableRequest{})
	if err != nil {
		return d.callErr(ctx, p, err)
	}
	if !resp.GetAvailable() {
		return fmt.Errorf("%w: plugin %q: %s", driver.ErrUnavailable, d.cfg.Name, resp.GetReason())
	}
	return nil
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	ctx, cancel := d.callContext(ctx)
	defer cancel()
	p, err := d.running(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := p.conn.client.Create(ctx, &pluginv1.CreateRequest{Spec: specToProto(spec)})
	if err != nil {
		return nil, d.callErr(ctx, p, err)
	}
	return d.newSandbox(p, resp.GetSandbox(), resp.GetInfo(), resp.GetCheckable()), nil
}

// Reopen implements driver.Reopener, for plugins whose driver does.
func (d *Driver) Reopen(ctx context.Context, spec driver.Spec, info driver.Info) (driver.Sandbox, error) {
	ctx, cancel := d.callContext(ctx)
	defer cancel()
	p, err := d.running(ctx)
	if err != nil {
		return nil, err
	}
	if !d.describe().GetReopen() {
		return nil, fmt.Errorf("%w: plugin %q cannot reopen sandboxes", driver.ErrGone, d.cfg.Name)
	}
	resp, err := p.conn.client.Reopen(ctx, &pluginv1.ReopenRequest{Spec: specToProto(spec), Info: infoToProto(info)})
	if err != nil {
		return nil, d.callErr(ctx, p, err)
	}
	return d.newSandbox(p, resp.GetSandbox(), resp.GetInfo(), resp.GetCheckable()), nil
}

// Close kills the plugin. The driver must not be used afterwards.
func (d *Driver) Close() {
	d.mu.Lock()
	d.closed = true
	p := d.proc
	d.proc = nil
	d.mu.Unlock()
	if p != nil {
		close(p.stop)
		if p.client != nil {
			p.client.Kill()
			sweep(p.cmd.Process.Pid)
		}
	}
}

func (d *Driver) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.cfg.CallTimeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d.cfg.CallTimeout)
}

// running returns the running process, starting (or restarting, after
// the backoff) the plugin when there is none.
func (d *Driver) running(ctx context.Context) (*process, error) {
	d.mu.Lock()
	p := d.proc
	d.mu.Unlock()
	if p != nil && p.gone() == nil {
		return p, nil
	}
	d.startMu.Lock()
	defer d.startMu.Unlock()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("%w: plugin %q is closed", driver.ErrUnavailable, d.cfg.Name)
	}
	if d.proc != nil {
		if d.proc.gone() == nil {
			p := d.proc
			d.mu.Unlock()
			return p, nil
		}
		d.recordExitLocked(d.proc)
	}
	wait := time.Until(d.retryAt)
	lastErr := d.lastErr
	d.mu.Unlock()
	if wait > maxWait {
		return nil, fmt.Errorf("%w: plugin %q is down (%v); it may restart in %v", driver.ErrUnavailable, d.cfg.Name, lastErr, wait.Round(time.Millisecond))
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: plugin %q is down (%v); it restarts in %v, after the caller's deadline",
				driver.ErrUnavailable, d.cfg.Name, lastErr, wait.Round(time.Millisecond))
		}
	}
	p, desc, err := d.start()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.failLocked(err)
		return nil, fmt.Errorf("%w: plugin %q: %v", driver.ErrUnavailable, d.cfg.Name, err)
	}
	d.proc, d.desc, d.lastErr = p, desc, nil
	go d.monitor(p)
	return p, nil
}

// recordExitLocked notes a process that is gone; d.mu is held.
func (d *Driver) recordExitLocked(p *process) {
	if d.proc != p {
		return
	}
	d.proc = nil
	reason := p.gone()
	if time.Since(p.started) > time.Minute {
		d.fails = 0 // it ran well for a while: restart at once
	}
	d.failLocked(reason)
	d.logger.Error("sandbox plugin is down", "reason", reason.Error())
}

func (d *Driver) failLocked(err error) {
	d.lastErr = err
	d.fails++
	back := d.cfg.MinBackoff << min(d.fails-1, 20)
	d.retryAt = time.Now().Add(min(back, d.cfg.MaxBackoff))
}

// start launches the plugin, verified, and asks it to describe itself.
func (d *Driver) start() (*process, *pluginv1.DescribeResponse, error) {
	fi, err := os.Stat(d.cfg.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("binary %s: %w", d.cfg.Path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return nil, nil, fmt.Errorf("binary %s is not an executable file", d.cfg.Path)
	}
	var secure *goplugin.SecureConfig
	if d.cfg.SHA256 != "" {
		want, err := hex.DecodeString(d.cfg.SHA256)
		if err != nil || len(want) != sha256.Size {
			return nil, nil, fmt.Errorf("configured sha256 %q is not 64 hex digits", d.cfg.SHA256)
		}
		got, err := FileSHA256(d.cfg.Path)
		if err != nil {
			return nil, nil, err
		}
		if !strings.EqualFold(got, d.cfg.SHA256) {
			d.logger.Error("sandbox plugin refused: checksum mismatch", "path", d.cfg.Path, "configured_sha256", strings.ToLower(d.cfg.SHA256), "binary_sha256", got)
			return nil, nil, fmt.Errorf("checksum mismatch: configured sha256 %s, binary %s has %s; refused", strings.ToLower(d.cfg.SHA256), d.cfg.Path, got)
		}
		// go-plugin checks again just before it starts the binary.
		secure = &goplugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	}
	cmd := exec.Command(d.cfg.Path, d.cfg.Args...)
	cmd.Env = append([]string(nil), d.cfg.Env...)
	detach(cmd) // see sweep_linux.go
	versioned := map[int]goplugin.PluginSet{}
	for _, v := range ProtocolVersions {
		versioned[v] = goplugin.PluginSet{pluginName: &grpcPlugin{}}
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: versioned,
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     d.cfg.StartTimeout,
		Logger:           newHCLog(d.logger),
		Stderr:           io.Discard,
		SyncStdout:       io.Discard,
		SyncStderr:       io.Discard,
	})
	started := time.Now()
	proto, err := client.Client()
	if err != nil {
		client.Kill()
		if strings.Contains(err.Error(), "incompatible API version") {
			return nil, nil, fmt.Errorf("no common protocol version: this service speaks %v; %v", ProtocolVersions, err)
		}
		return nil, nil, fmt.Errorf("start (is it a fabro sandbox plugin, speaking protocol version %v?): %w", ProtocolVersions, err)
	}
	raw, err := proto.Dispense(pluginName)
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("dispense: %w", err)
	}
	c := raw.(*conn)
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StartTimeout)
	defer cancel()
	desc, err := c.client.Describe(ctx, &pluginv1.DescribeRequest{})
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("describe: %v", fromStatus(err))
	}
	if desc.GetCapabilities().GetIsolation() == pluginv1.Isolation_ISOLATION_UNSPECIFIED {
		client.Kill()
		return nil, nil, errors.New("the plugin states no isolation")
	}
	d.logger.Info("sandbox plugin started", "path", d.cfg.Path, "pid", cmd.Process.Pid, "plugin_driver", desc.GetName(),
		"version", desc.GetVersion(), "protocol_version", client.NegotiatedVersion(), "took", time.Since(started).Round(time.Microsecond))
	return &process{client: client, cmd: cmd, conn: c, started: started, stop: make(chan struct{})}, desc, nil
}

// monitor notes the process's exit and health-checks it while it runs. A
// plugin that misses its health check is killed; the next request starts
// a new one.
func (d *Driver) monitor(p *process) {
	var tick <-chan time.Time
	if d.cfg.HealthInterval > 0 {
		t := time.NewTicker(d.cfg.HealthInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-p.stop:
			return
		case <-p.conn.exited:
			d.mu.Lock()
			d.recordExitLocked(p)
			d.mu.Unlock()
			sweep(p.cmd.Process.Pid)
			return
		case <-tick:
			ctx, cancel := context.WithTimeout(context.Background(), d.cfg.HealthTimeout)
			_, err := p.conn.client.Available(ctx, &pluginv1.AvailableRequest{})
			cancel()
			if err == nil {
				continue
			}
			p.mu.Lock()
			if p.reason == nil {
				p.reason = fmt.Errorf("killed after missing its health check (%v)", fromStatus(err))
			}
			p.mu.Unlock()
			d.logger.Error("sandbox plugin missed its health check; killing it", "error", fromStatus(err).Error())
			p.cmd.Process.Kill()
			go p.client.Kill() // reaps and cleans up; the exit is seen above
			tick = nil
		}
	}
}

// callErr turns a failed call's error into a driver error. A transport
// failure is most likely the plugin's exit, which is waited for briefly
// and then named with its exit status.
func (d *Driver) callErr(ctx context.Context, p *process, err error) error {
	if st, ok := status.FromError(err); ok && (st.Code() == codes.Unavailable || st.Code() == codes.Canceled) && !hasErrorInfo(st) {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-p.conn.exited:
		case <-t.C:
		case <-ctx.Done():
		}
		if reason := p.gone(); reason != nil {
			return fmt.Errorf("%w: %w: plugin %q %v", driver.ErrUnavailable, driver.ErrGone, d.cfg.Name, reason)
		}
	}
	if ctx.Err() != nil && status.Code(err) == codes.DeadlineExceeded {
		return fmt.Errorf("plugin %q did not answer in time: %w", d.cfg.Name, context.DeadlineExceeded)
	}
	return fromStatus(err)
}

func hasErrorInfo(st *status.Status) bool { return len(st.Details()) > 0 }

// FileSHA256 returns a file's SHA-256 in hex, as plugin configuration
// states it.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
