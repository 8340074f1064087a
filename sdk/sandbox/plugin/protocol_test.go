package plugin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goplugin "github.com/hashicorp/go-plugin"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// scripted is a driver whose sandboxes answer from memory, to check what
// the protocol carries in-process: Reopen, Check, Open, errors, and the
// stops of an exec.
type scripted struct{}

func (scripted) Name() string { return "scripted" }
func (scripted) Capabilities() driver.Capabilities {
	return driver.Capabilities{Isolation: driver.IsolationVM, LiveStreaming: true, Cancel: true, Limits: driver.LimitSupport{Memory: true}}
}
func (scripted) Available(context.Context) error { return nil }
func (scripted) Create(_ context.Context, spec driver.Spec) (driver.Sandbox, error) {
	if spec.Limits.CPU > 0 {
		return nil, driver.ErrLimitUnsupported
	}
	return &memSandbox{info: driver.Info{Capabilities: scripted{}.Capabilities(), Platform: "linux", OSVersion: "test", WorkingDirectory: "/w/" + spec.ID, RootDirectory: "/w/" + spec.ID}}, nil
}
func (scripted) Reopen(_ context.Context, spec driver.Spec, info driver.Info) (driver.Sandbox, error) {
	if info.RootDirectory != "/w/"+spec.ID {
		return nil, driver.ErrGone
	}
	return &memSandbox{info: info}, nil
}

type memSandbox struct {
	info driver.Info
	gone atomic.Bool
}

func (m *memSandbox) Info() driver.Info { return m.info }
func (m *memSandbox) Check(context.Context) error {
	if m.gone.Load() {
		return errors.Join(driver.ErrGone, errors.New("its machine was removed"))
	}
	return nil
}
func (m *memSandbox) Delete(context.Context) error { return nil }
func (m *memSandbox) Open(_ context.Context, p string, off int64) (io.ReadCloser, int64, error) {
	data := bytes.Repeat([]byte("0123456789"), 20000) // 200 kB: several chunks
	return io.NopCloser(bytes.NewReader(data[off:])), int64(len(data)), nil
}
func (m *memSandbox) WriteFile(context.Context, string, []byte) (bool, error) { return true, nil }
func (m *memSandbox) Remove(context.Context, string, bool) error              { return nil }
func (m *memSandbox) Stat(_ context.Context, p string) (driver.FileInfo, error) {
	if p == "gone" {
		return driver.FileInfo{}, errors.Join(driver.ErrNotFound, errors.New(p))
	}
	return driver.FileInfo{Path: p, Type: driver.TypeFile, Size: 3, Mode: 0o640, ModTime: time.Unix(1700000000, 5)}, nil
}
func (m *memSandbox) ListDir(context.Context, string, int) ([]driver.FileInfo, error) {
	return nil, nil
}
func (m *memSandbox) Rename(context.Context, string, string) error { return nil }
func (m *memSandbox) Mkdir(context.Context, string) (bool, error)  { return true, nil }
func (m *memSandbox) Grep(context.Context, driver.GrepOptions) (driver.GrepResult, error) {
	return driver.GrepResult{Matches: []driver.GrepMatch{{Path: "a", Line: 2, Text: "x"}}, Backend: driver.BackendPOSIX}, nil
}
func (m *memSandbox) Glob(context.Context, string, string) ([]string, error) {
	return []string{"a"}, nil
}
func (m *memSandbox) Walk(context.Context, string, int, []string) ([]driver.WalkedFile, error) {
	return []driver.WalkedFile{{Path: "a", Size: 1}}, nil
}

// Exec prints its command, then waits to be stopped and says how.
func (m *memSandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	out.Started()
	out.Chunk(driver.Stdout, []byte(spec.Command+"\n"))
	select {
	case <-spec.Kill:
		return driver.ExecResult{Termination: driver.Killed, Signal: "SIGKILL"}, nil
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), driver.ErrKill) {
			return driver.ExecResult{Termination: driver.Killed, Signal: "SIGKILL"}, nil
		}
		return driver.ExecResult{Termination: driver.Cancelled, Signal: "SIGTERM", LimitHit: driver.LimitMemory}, nil
	case <-time.After(spec.Timeout):
		code := 0
		return driver.ExecResult{Termination: driver.TimedOut, ExitCode: &code, Stdout: []byte("out")}, nil
	}
}

// inProcess connects a host Driver to the scripted driver over a real
// gRPC connection, with no process in between.
func inProcess(t *testing.T) *Driver {
	client, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{pluginName: &grpcPlugin{impl: scripted{}, version: "v9", logger: slog.New(slog.DiscardHandler)}})
	raw, err := client.Dispense(pluginName)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.(*conn)
	desc, err := c.client.Describe(t.Context(), &pluginv1.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{Name: "scripted", HealthInterval: -1})
	d.proc = &process{conn: c, cmd: &exec.Cmd{}, started: time.Now(), stop: make(chan struct{})}
	d.desc = desc
	t.Cleanup(d.Close)
	return d
}

func TestProtocol(t *testing.T) {
	d := inProcess(t)
	ctx := t.Context()
	if d.Version() != "v9" || d.Capabilities() != (scripted{}).Capabilities() {
		t.Fatalf("described %q %+v", d.Version(), d.Capabilities())
	}
	if _, err := d.Create(ctx, driver.Spec{Limits: driver.Limits{CPU: 1}}); !errors.Is(err, driver.ErrLimitUnsupported) {
		t.Errorf("Create with an unenforced limit = %v", err)
	}
	sb, err := d.Create(ctx, driver.Spec{ID: "s1", Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Info().RootDirectory != "/w/s1" || sb.Info().Capabilities != d.Capabilities() {
		t.Errorf("info %+v", sb.Info())
	}

	t.Run("check", func(t *testing.T) {
		c := sb.(driver.Checker)
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
		d.proc.conn.client.Check(ctx, &pluginv1.CheckRequest{}) // an unknown handle is gone, not a crash
		sb2, _ := d.Create(ctx, driver.Spec{ID: "s2"})
		d.proc.conn.client.Delete(ctx, &pluginv1.DeleteRequest{Sandbox: sb2.(*sandbox).handle})
		if err := sb2.(driver.Checker).Check(ctx); !errors.Is(err, driver.ErrGone) {
			t.Errorf("Check of a sandbox the plugin no longer has = %v; want ErrGone", err)
		}
	})

	t.Run("reopen", func(t *testing.T) {
		re, err := d.Reopen(ctx, driver.Spec{ID: "s1"}, sb.Info())
		if err != nil || re.Info() != sb.Info() {
			t.Fatalf("Reopen = %+v, %v", re, err)
		}
		if _, err := d.Reopen(ctx, driver.Spec{ID: "other"}, sb.Info()); !errors.Is(err, driver.ErrGone) {
			t.Errorf("Reopen of a vanished sandbox = %v; want ErrGone", err)
		}
	})

	t.Run("files and search", func(t *testing.T) {
		rc, size, err := sb.Open(ctx, "f", 199990)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if size != 200000 || string(b) != "0123456789" {
			t.Errorf("Open at an offset = %q, size %d", b, size)
		}
		rc, _, _ = sb.Open(ctx, "f", 0)
		b, _ = io.ReadAll(rc)
		if len(b) != 200000 {
			t.Errorf("Open read %d bytes; want all 200000", len(b))
		}
		fi, err := sb.Stat(ctx, "f")
		if diff := cmp.Diff(driver.FileInfo{Path: "f", Type: driver.TypeFile, Size: 3, Mode: 0o640, ModTime: time.Unix(1700000000, 5)}, fi); err != nil || diff != "" {
			t.Errorf("Stat: %v %s", err, diff)
		}
		if _, err := sb.Stat(ctx, "gone"); !errors.Is(err, driver.ErrNotFound) || !strings.Contains(err.Error(), "gone") {
			t.Errorf("Stat(gone) = %v", err)
		}
		g, err := sb.Grep(ctx, driver.GrepOptions{Pattern: "x", MaxResults: 1})
		if err != nil || g.Backend != driver.BackendPOSIX || len(g.Matches) != 1 || g.Matches[0].Line != 2 {
			t.Errorf("Grep = %+v, %v", g, err)
		}
	})

	t.Run("exec stops", func(t *testing.T) {
		tests := []struct {
			name string
			stop func(cancel context.CancelCauseFunc, kill chan struct{})
			want driver.Termination
			hit  driver.LimitHit
		}{
			{"cancel", func(c context.CancelCauseFunc, _ chan struct{}) { c(errors.New("stop")) }, driver.Cancelled, driver.LimitMemory},
			{"kill by cause", func(c context.CancelCauseFunc, _ chan struct{}) { c(driver.ErrKill) }, driver.Killed, driver.LimitNone},
			{"kill channel", func(_ context.CancelCauseFunc, k chan struct{}) { close(k) }, driver.Killed, driver.LimitNone},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				kill := make(chan struct{})
				rec := &rec{onChunk: func() { tt.stop(cancel, kill) }}
				res, err := sb.Exec(ctx, driver.ExecSpec{Command: "hello", Timeout: time.Minute, RetainLimit: 10, Kill: kill}, rec)
				if err != nil || res.Termination != tt.want || res.LimitHit != tt.hit || !rec.started || rec.out.String() != "hello\n" {
					t.Errorf("got %+v, %v, started %v, out %q; want %v", res, err, rec.started, rec.out.String(), tt.want)
				}
			})
		}
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: "x", Timeout: 50 * time.Millisecond, RetainLimit: 10}, &rec{})
		if err != nil || res.Termination != driver.TimedOut || res.ExitCode == nil || *res.ExitCode != 0 || string(res.Stdout) != "out" {
			t.Errorf("timeout: %+v, %v", res, err)
		}
	})
}

type rec struct {
	started bool
	out     bytes.Buffer
	onChunk func()
}

func (r *rec) Started() error { r.started = true; return nil }
func (r *rec) Chunk(_ driver.Stream, p []byte) error {
	r.out.Write(p)
	if r.onChunk != nil {
		r.onChunk()
	}
	return nil
}
