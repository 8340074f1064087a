package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/testkit"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// testPlugin is internal/testplugin, built once for the package's tests.
var (
	testPluginOnce sync.Once
	testPluginPath string
	testPluginErr  error
)

// TestMain removes the test plugin's and the service's builds once every
// test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if testPluginPath != "" {
		os.RemoveAll(filepath.Dir(testPluginPath))
	}
	if serviceBin != "" {
		os.RemoveAll(filepath.Dir(serviceBin))
	}
	os.Exit(code)
}

func testPlugin(t testing.TB) string {
	t.Helper()
	testPluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testplugin-")
		if err != nil {
			testPluginErr = err
			return
		}
		testPluginPath = filepath.Join(dir, "fabro-sandbox-test")
		testPluginErr = plugintest.BuildTo(context.Background(), "internal/testplugin", testPluginPath)
	})
	if testPluginErr != nil {
		t.Fatal(testPluginErr)
	}
	return testPluginPath
}

func sha(t *testing.T, path string) string {
	t.Helper()
	s, err := plugin.FileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// syncBuffer is a log sink tests can read while plugins write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// startPlugins runs the service with the local driver and the given
// plugins, over real gRPC.
func startPlugins(t *testing.T, plugins ...sandbox.PluginConfig) (sandboxv1.SandboxServiceClient, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := sandbox.New(sandbox.Config{Drivers: []driver.Driver{local.New(local.Config{WorkspaceRoot: t.TempDir()})}, Plugins: plugins}, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, logger, svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		svc.Close(context.Background())
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sandboxv1.NewSandboxServiceClient(conn), logs
}

func listedDriver(t *testing.T, c sandboxv1.SandboxServiceClient, name string) *sandboxv1.Driver {
	t.Helper()
	resp, err := c.ListDrivers(t.Context(), &sandboxv1.ListDriversRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.GetDrivers() {
		if d.GetDriverId() == name {
			return d
		}
	}
	t.Fatalf("ListDrivers does not list %q: %v", name, resp.GetDrivers())
	return nil
}

func TestPluginLoading(t *testing.T) {
	t.Parallel()
	bin := testPlugin(t)
	good := sha(t, bin)
	bad := strings.Repeat("ab", 32)
	notPlugin := filepath.Join(t.TempDir(), "not-a-plugin")
	if err := os.WriteFile(notPlugin, []byte("#!/bin/sh\necho hello, I am not a plugin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cfg       sandbox.PluginConfig
		available bool
		reason    []string // in the unavailable reason
		logged    []string // in the service's log
	}{
		{"good checksum", sandbox.PluginConfig{Path: bin, SHA256: good}, true, nil, []string{`"plugin":"test"`, "testplugin-log-line", "sandbox plugin started"}},
		{"bad checksum", sandbox.PluginConfig{Path: bin, SHA256: bad}, false, []string{"checksum mismatch", bad, good}, []string{bad, good}},
		{"no checksum", sandbox.PluginConfig{Path: bin}, false, []string{"no sha256 configured", good}, []string{good}},
		{"missing binary", sandbox.PluginConfig{Path: filepath.Join(t.TempDir(), "nope"), SHA256: good}, false, []string{"no such file"}, nil},
		{"protocol version mismatch", sandbox.PluginConfig{Path: bin, SHA256: good, Env: []string{"TESTPLUGIN_PROTOCOL=2"}}, false,
			[]string{"no common protocol version", "this service speaks [1]", "Plugin version: 2"}, []string{`"plugin_versions":"[2]"`, `"host_versions":"[1]"`}},
		{"not a plugin", sandbox.PluginConfig{Path: notPlugin, SHA256: sha(t, notPlugin)}, false, []string{"plugin \"test\"", "is it a fabro sandbox plugin, speaking protocol version [1]?"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Name = "test"
			c, logs := startPlugins(t, tt.cfg)
			d := listedDriver(t, c, "test")
			if d.GetAvailable() != tt.available {
				t.Fatalf("available = %v (%s); want %v", d.GetAvailable(), d.GetUnavailableReason(), tt.available)
			}
			for _, w := range tt.reason {
				if !strings.Contains(d.GetUnavailableReason(), w) {
					t.Errorf("reason %q does not say %q", d.GetUnavailableReason(), w)
				}
			}
			if tt.available {
				if d.GetVersion() == "" || d.GetCapabilities().GetIsolation() != sandboxv1.Isolation_ISOLATION_NONE {
					t.Errorf("listed %v; want the plugin's version and capabilities", d)
				}
				sb := createOn(t, c, "test")
				if out := mustExecOut(t, c, sb, "echo hi"); out != "hi\n" {
					t.Errorf("exec through the plugin = %q", out)
				}
			} else {
				_, err := c.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "test"}})
				if status.Code(err) != codes.Unavailable {
					t.Errorf("CreateSandbox on a refused plugin = %v; want UNAVAILABLE", err)
				}
			}
			// Logs arrive from the plugin's stderr asynchronously.
			testkit.Eventually(t, 5*time.Second, func() error {
				for _, w := range tt.logged {
					if !strings.Contains(logs.String(), w) {
						return fmt.Errorf("the log lacks %q:\n%s", w, logs.String())
					}
				}
				return nil
			})
			// The service keeps serving its other drivers.
			if d := listedDriver(t, c, "local"); !d.GetAvailable() {
				t.Errorf("local became unavailable: %s", d.GetUnavailableReason())
			}
		})
	}
}

func createOn(t *testing.T, c sandboxv1.SandboxServiceClient, drv string) string {
	t.Helper()
	resp, err := c.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: drv}})
	if err != nil {
		t.Fatalf("CreateSandbox(%s): %v", drv, err)
	}
	return resp.GetSandbox().GetSandboxId()
}

func mustExecOut(t *testing.T, c sandboxv1.SandboxServiceClient, id, command string) string {
	t.Helper()
	resp, err := c.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: command}})
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return string(resp.GetResult().GetStdout())
}

// TestPluginCrash: a crash mid-exec fails that exec UNAVAILABLE naming the
// exit status, marks the plugin's sandboxes FAILED and the plugin
// unavailable; the next create restarts it.
func TestPluginCrash(t *testing.T) {
	t.Parallel()
	bin := testPlugin(t)
	c, logs := startPlugins(t, sandbox.PluginConfig{Name: "test", Path: bin, SHA256: sha(t, bin), Env: []string{"TMPDIR=" + t.TempDir()}})
	victim := createOn(t, c, "test")
	other := createOn(t, c, "test")

	stream, err := c.ExecStream(t.Context(), &sandboxv1.ExecStreamRequest{SandboxId: victim, Spec: &sandboxv1.ExecSpec{Command: "__crash__"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "exited (exit status 3)") {
		t.Fatalf("the exec in flight = %v; want UNAVAILABLE saying the plugin exited with status 3", err)
	}
	for _, id := range []string{victim, other} {
		resp, err := c.GetSandbox(t.Context(), &sandboxv1.GetSandboxRequest{SandboxId: id})
		if err != nil {
			t.Fatal(err)
		}
		if sb := resp.GetSandbox(); sb.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_FAILED || !strings.Contains(sb.GetStateMessage(), "exit status 3") {
			t.Errorf("sandbox %s is %v (%q); want FAILED naming the exit status", id, sb.GetState(), sb.GetStateMessage())
		}
	}
	// Like any FAILED sandbox's, its calls are refused with the reason.
	if _, err := c.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: other, Spec: &sandboxv1.ExecSpec{Command: "true"}}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("exec in a sandbox of the crashed plugin = %v; want FAILED_PRECONDITION naming the exit status", err)
	}
	if d := listedDriver(t, c, "test"); d.GetAvailable() || !strings.Contains(d.GetUnavailableReason(), "exit status 3") {
		t.Errorf("after the crash the plugin is listed %v (%q); want unavailable with the exit status", d.GetAvailable(), d.GetUnavailableReason())
	}
	if !strings.Contains(logs.String(), "exit status 3") {
		t.Errorf("the crash is not logged:\n%s", logs.String())
	}

	// The next create restarts the plugin (after a short backoff).
	fresh := createOn(t, c, "test")
	if out := mustExecOut(t, c, fresh, "echo back"); out != "back\n" {
		t.Errorf("exec after the restart = %q", out)
	}
	if d := listedDriver(t, c, "test"); !d.GetAvailable() {
		t.Errorf("after the restart the plugin is unavailable: %s", d.GetUnavailableReason())
	}
	if _, err := c.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: victim}); err != nil {
		t.Errorf("deleting a FAILED sandbox: %v", err)
	}
}

// TestPluginHang: calls into a wedged plugin obey their deadlines, and the
// plugin, missing its health check, is killed; the next create starts a
// new one.
func TestPluginHang(t *testing.T) {
	t.Parallel()
	bin := testPlugin(t)
	c, logs := startPlugins(t, sandbox.PluginConfig{Name: "test", Path: bin, SHA256: sha(t, bin), Env: []string{"TMPDIR=" + t.TempDir()}, HealthInterval: 300 * time.Millisecond})
	sb := createOn(t, c, "test")

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := c.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sb, Spec: &sandboxv1.ExecSpec{Command: "__hang__"}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("exec in a hung plugin = %v; want DEADLINE_EXCEEDED", err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "missed its health check") {
			return errors.New("the hung plugin was not killed:\n" + logs.String())
		}
		return nil
	})
	fresh := createOn(t, c, "test")
	if out := mustExecOut(t, c, fresh, "echo alive"); out != "alive\n" {
		t.Errorf("exec after the restart = %q", out)
	}
}

// TestPluginCallDeadline: a unary call into a wedged plugin returns by its
// deadline even when the health check has not noticed yet.
func TestPluginCallDeadline(t *testing.T) {
	t.Parallel()
	bin := testPlugin(t)
	c, _ := startPlugins(t, sandbox.PluginConfig{Name: "test", Path: bin, SHA256: sha(t, bin), Env: []string{"TMPDIR=" + t.TempDir()}, HealthInterval: time.Hour})
	sb := createOn(t, c, "test")
	go func() {
		// Wedges the plugin; this exec never ends by itself.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sb, Spec: &sandboxv1.ExecSpec{Command: "__hang__"}})
	}()
	testkit.Eventually(t, 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		if _, err := c.ListDrivers(ctx, &sandboxv1.ListDriversRequest{}); status.Code(err) != codes.DeadlineExceeded {
			return fmt.Errorf("ListDrivers answered %v: the plugin has not hung", err)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "test"}})
	if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CreateSandbox on a hung plugin = %v after %v; want DEADLINE_EXCEEDED", err, time.Since(start))
	}
}

// TestPluginDir loads the bwrap plugin from a plugin directory, as `fabro
// serve -sandbox-plugin-dir` does: fabro-sandbox-NAME binaries and their
// SHA256SUMS. A binary the sums do not name is listed unavailable.
func TestPluginDir(t *testing.T) {
	t.Parallel()
	if _, err := osexec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed: `make deps` installs Debian's bubblewrap")
	}
	dir := t.TempDir()
	bwrapBin := filepath.Join(dir, "fabro-sandbox-bwrap")
	if err := plugintest.BuildTo(t.Context(), "cmd/fabro-sandbox-bwrap", bwrapBin); err != nil {
		t.Fatal(err)
	}
	stray, err := os.ReadFile(testPlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fabro-sandbox-stray"), stray, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("not a plugin"), 0o644)
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sha(t, bwrapBin)+"  fabro-sandbox-bwrap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgs, err := sandbox.ReadPluginDir(dir)
	if err != nil || len(cfgs) != 2 {
		t.Fatalf("ReadPluginDir = %+v, %v; want bwrap and stray", cfgs, err)
	}
	// Whoever may write the directory, SHA256SUMS or a binary could
	// replace a binary and its checksum: such a directory is refused.
	for _, p := range []string{filepath.Join(dir, "SHA256SUMS"), bwrapBin, dir} {
		fi, _ := os.Stat(p)
		os.Chmod(p, fi.Mode().Perm()|0o020)
		if _, err := sandbox.ReadPluginDir(dir); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
			t.Errorf("%s group-writable: ReadPluginDir = %v", p, err)
		}
		os.Chmod(p, fi.Mode().Perm())
	}
	c, _ := startPlugins(t, cfgs...)
	d := listedDriver(t, c, "bwrap")
	if !d.GetAvailable() || d.GetVersion() == "" || d.GetCapabilities().GetIsolation() != sandboxv1.Isolation_ISOLATION_NAMESPACE ||
		!d.GetCapabilities().GetLimits().GetNetworkNone() {
		t.Errorf("bwrap is listed %v; want available, with a version, namespace isolation and network_none", d)
	}
	if d := listedDriver(t, c, "stray"); d.GetAvailable() || !strings.Contains(d.GetUnavailableReason(), "no sha256") {
		t.Errorf("a binary without a checksum is listed %v", d)
	}
	sb := createOn(t, c, "bwrap")
	if out := mustExecOut(t, c, sb, "hostname; ls /root 2>&1 >/dev/null | grep -c 'No such'"); out != "fabro-sandbox\n1\n" {
		t.Errorf("a command in the bwrap sandbox printed %q; want the sandbox's hostname and no /root", out)
	}
}
