package daytona_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/daytona"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/daytona/daytonafake"
)

// vault stands for the vault: it resolves the two names, counting calls.
type vault struct {
	mu       sync.Mutex
	url, key string
	calls    atomic.Int64
}

func (v *vault) Resolve(_ context.Context, names []string) (map[string]string, []string, error) {
	v.calls.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	vals := map[string]string{}
	var missing []string
	for _, n := range names {
		switch {
		case n == daytona.URLName && v.url != "":
			vals[n] = v.url
		case n == daytona.KeyName && v.key != "":
			vals[n] = v.key
		default:
			missing = append(missing, n)
		}
	}
	return vals, missing, nil
}

func (v *vault) setKey(k string) { v.mu.Lock(); v.key = k; v.mu.Unlock() }

const apiKey = "dtn_test_secret_key_0123456789"

type env struct {
	fake  *daytonafake.Server
	vault *vault
	d     *daytona.Driver
}

func newEnv(t *testing.T) *env {
	fake := daytonafake.New(apiKey, t.TempDir())
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	v := &vault{url: srv.URL, key: apiKey}
	d := daytona.New(daytona.Config{Credentials: v, PollInterval: time.Millisecond, StartTimeout: 2 * time.Second,
		Retry: daytona.Retry{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}})
	return &env{fake: fake, vault: v, d: d}
}

func TestContract(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) driver.Driver { return newEnv(t).d })
}

func reasonOf(err error) (codes.Code, string, map[string]string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason(), info.GetMetadata()
		}
	}
	return st.Code(), "", nil
}

// Daytona's 401, 404, 429 and 5xx, and its failed and vanished sandboxes,
// become clear statuses; transient ones are retried within the bound.
func TestErrors(t *testing.T) {
	ctx := t.Context()
	t.Run("401 names the credential, never its value", func(t *testing.T) {
		e := newEnv(t)
		e.vault.setKey("dtn_wrong_key_value")
		_, err := e.d.Create(ctx, driver.Spec{ID: "sbx-1"})
		code, reason, md := reasonOf(err)
		if code != codes.PermissionDenied || reason != "DAYTONA_CREDENTIAL_REJECTED" || md["credential"] != daytona.KeyName {
			t.Fatalf("%v: code %v reason %q md %v", err, code, reason, md)
		}
		msg := status.Convert(err).Message()
		if !strings.Contains(msg, daytona.KeyName) || strings.Contains(msg, "dtn_wrong") || strings.Contains(err.Error(), "dtn_wrong") {
			t.Errorf("message %q must name %s and never the key", msg, daytona.KeyName)
		}
		if e.fake.Calls("POST /sandbox") != 1 {
			t.Errorf("a 401 was retried: %d calls", e.fake.Calls("POST /sandbox"))
		}
		if err := e.d.Available(ctx); !errors.Is(err, driver.ErrUnavailable) || strings.Contains(err.Error(), "dtn_wrong") {
			t.Errorf("Available = %v; want unavailable without the key", err)
		}
	})
	t.Run("no credential in the vault", func(t *testing.T) {
		e := newEnv(t)
		e.vault.setKey("")
		_, err := e.d.Create(ctx, driver.Spec{})
		if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), daytona.KeyName) {
			t.Errorf("Create = %v; want unavailable naming %s", err, daytona.KeyName)
		}
	})
	for _, tt := range []struct {
		name   string
		status int
		code   codes.Code
		reason string
	}{
		{"429 retried, then RESOURCE_EXHAUSTED", 429, codes.ResourceExhausted, "DAYTONA_RATE_LIMITED"},
		{"500 retried, then UNAVAILABLE", 500, codes.Unavailable, "DAYTONA_UNAVAILABLE"},
		{"503 retried, then UNAVAILABLE", 503, codes.Unavailable, "DAYTONA_UNAVAILABLE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.Fail("POST", "/sandbox", tt.status, 100, "0")
			_, err := e.d.Create(ctx, driver.Spec{})
			if code, reason, _ := reasonOf(err); code != tt.code || reason != tt.reason {
				t.Errorf("%v: code %v reason %q; want %v %s", err, code, reason, tt.code, tt.reason)
			}
			if n := e.fake.Calls("POST /sandbox"); n != 3 {
				t.Errorf("%d calls; want 3 (the bound)", n)
			}
			// Transient: two failures, then it works.
			e2 := newEnv(t)
			e2.fake.Fail("POST", "/sandbox", tt.status, 2, "")
			sb, err := e2.d.Create(ctx, driver.Spec{})
			if err != nil {
				t.Fatalf("after 2 transient failures: %v", err)
			}
			sb.Delete(ctx)
		})
	}
	t.Run("a lost answer to a create makes no second sandbox", func(t *testing.T) {
		e := newEnv(t)
		e.fake.FailAfter("POST", "/sandbox", 502, 1)
		sb, err := e.d.Create(ctx, driver.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Delete(ctx)
		if n, posts := len(e.fake.Sandboxes()), e.fake.Calls("POST /sandbox"); n != 1 || posts != 1 {
			t.Errorf("%d sandboxes after %d creates; want the one the lost answer made, adopted", n, posts)
		}
	})
	t.Run("a lost answer whose lookup fails too is not created again", func(t *testing.T) {
		e := newEnv(t)
		e.fake.FailAfter("POST", "/sandbox", 502, 1)
		e.fake.Fail("GET", "/sandbox", 503, 100, "")
		if _, err := e.d.Create(ctx, driver.Spec{}); err == nil {
			t.Fatal("created, though whether the first attempt made a sandbox was never learned")
		}
		if posts := e.fake.Calls("POST /sandbox"); posts != 1 {
			t.Errorf("%d creates; want 1 (a second could make a second sandbox)", posts)
		}
	})
	t.Run("a lost answer to an exec does not run the command again", func(t *testing.T) {
		e := newEnv(t)
		sb := drivertest.NewSandbox(t, e.d, driver.Spec{})
		e.fake.FailAfter("POST", "/process/execute", 502, 1)
		_, err := sb.Exec(ctx, driver.ExecSpec{Command: "echo once >> runs", Timeout: 10 * time.Second, RetainLimit: 10}, nil)
		if code, _, _ := reasonOf(err); code != codes.Unavailable {
			t.Errorf("Exec with its answer lost = %v; want UNAVAILABLE", err)
		}
		if got := drivertest.Sh(t, sb, "cat runs"); got != "once\n" {
			t.Errorf("the command ran %q; want once", got)
		}
	})
	t.Run("404 on a toolbox call is NOT_FOUND", func(t *testing.T) {
		e := newEnv(t)
		sb := drivertest.NewSandbox(t, e.d, driver.Spec{})
		e.fake.Fail("POST", "/process/execute", 404, 1, "")
		_, err := sb.Exec(ctx, driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 10}, nil)
		if code, reason, _ := reasonOf(err); code != codes.NotFound || reason != "DAYTONA_NOT_FOUND" {
			t.Errorf("%v: code %v reason %q", err, code, reason)
		}
	})
	t.Run("a failed sandbox is gone, with Daytona's reason", func(t *testing.T) {
		e := newEnv(t)
		sb := drivertest.NewSandbox(t, e.d, driver.Spec{ID: "sbx-f"})
		id := e.fake.Sandboxes()[0]
		e.fake.SetState(id, "error", "the runner lost its disk")
		checker := sb.(driver.Checker)
		err := checker.Check(ctx)
		if !errors.Is(err, driver.ErrGone) || !strings.Contains(err.Error(), "the runner lost its disk") {
			t.Errorf("Check = %v; want gone with the reason", err)
		}
		_, err = sb.Exec(ctx, driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 10}, nil)
		if code, reason, _ := reasonOf(err); code != codes.FailedPrecondition || reason != "SANDBOX_GONE" || !errors.Is(err, driver.ErrGone) {
			t.Errorf("Exec on a failed sandbox = %v (%v %s); want FAILED_PRECONDITION SANDBOX_GONE", err, code, reason)
		}
	})
	t.Run("a vanished sandbox is gone; Delete is idempotent", func(t *testing.T) {
		e := newEnv(t)
		sb := drivertest.NewSandbox(t, e.d, driver.Spec{})
		e.fake.Vanish(e.fake.Sandboxes()[0])
		if err := sb.(driver.Checker).Check(ctx); !errors.Is(err, driver.ErrGone) {
			t.Errorf("Check = %v; want gone", err)
		}
		if err := sb.Delete(ctx); err != nil {
			t.Errorf("Delete of a vanished sandbox = %v", err)
		}
	})
	t.Run("a sandbox stuck starting is waited for within the bound", func(t *testing.T) {
		e := newEnv(t)
		sb := drivertest.NewSandbox(t, e.d, driver.Spec{})
		e.fake.Hold(e.fake.Sandboxes()[0], "starting")
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := sb.Exec(ctx, driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 10}, nil)
		if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "did not start within") {
			t.Errorf("Exec on a sandbox stuck starting = %v; want unavailable after the start timeout", err)
		}
		if polls := e.fake.Calls("GET /sandbox/{id}"); polls < 3 {
			t.Errorf("%d polls of the sandbox's state; want it waited for", polls)
		}
	})
	for _, state := range []string{"stopped", "archived"} {
		t.Run("a "+state+" sandbox is started again", func(t *testing.T) {
			e := newEnv(t)
			sb := drivertest.NewSandbox(t, e.d, driver.Spec{})
			e.fake.SetState(e.fake.Sandboxes()[0], state, "")
			if got := drivertest.Sh(t, sb, "echo back"); got != "back\n" {
				t.Errorf("after it was %s: %q", state, got)
			}
			if n := e.fake.Calls("POST /sandbox/{id}/start"); n != 1 {
				t.Errorf("%d start calls; want 1", n)
			}
		})
	}
}

// The credentials are resolved on every call: a rotated key is used at once.
func TestCredentialsPerCall(t *testing.T) {
	e := newEnv(t)
	sb := drivertest.NewSandbox(t, e.d, driver.Spec{})
	before := e.vault.calls.Load()
	drivertest.Sh(t, sb, "true")
	if e.vault.calls.Load() <= before {
		t.Error("an exec did not resolve the credentials")
	}
	e.vault.setKey("dtn_rotated")
	t.Cleanup(func() { e.vault.setKey(apiKey) })
	_, err := sb.Stat(t.Context(), ".")
	if code, _, _ := reasonOf(err); code != codes.PermissionDenied {
		t.Errorf("after rotating the key in the vault only: %v; want PERMISSION_DENIED", err)
	}
}

func TestLimits(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	if got := e.d.Capabilities().Limits; got != (driver.LimitSupport{Memory: true, CPU: true, NetworkNone: true, Disk: true}) {
		t.Errorf("limits stated %+v", got)
	}
	sb, err := e.d.Create(ctx, driver.Spec{Limits: driver.Limits{MemoryBytes: 2 << 30, CPU: 2, DiskBytes: 5 << 30, Network: driver.NetworkNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Delete(ctx)
	_, _, cpu, mem, block, _ := e.fake.Get(e.fake.Sandboxes()[0])
	if cpu != 2 || mem != 2 || !block {
		t.Errorf("Daytona was asked for cpu %v, memory %v GB, networkBlockAll %v; want 2, 2, true", cpu, mem, block)
	}
	if disk := e.fake.DiskGB(e.fake.Sandboxes()[0]); disk != 5 {
		t.Errorf("Daytona was asked for disk %v GB; want 5", disk)
	}
	for _, l := range []driver.Limits{{MemoryBytes: 1 << 29}, {CPU: 0.5}, {Processes: 100}, {DiskBytes: 1 << 29}} {
		if _, err := e.d.Create(ctx, driver.Spec{Limits: l}); !errors.Is(err, driver.ErrLimitUnsupported) {
			t.Errorf("limits %+v: %v; want ErrLimitUnsupported", l, err)
		}
	}
	l := driver.Limits{MemoryBytes: 1 << 29, CPU: 0.5, Processes: 100, BestEffort: true}
	sb2, err := e.d.Create(ctx, driver.Spec{Limits: l})
	if err != nil {
		t.Fatalf("best effort: %v", err)
	}
	sb2.Delete(ctx)
}

// After a restart the sandbox is found again by its label.
func TestReopen(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	sb := drivertest.NewSandbox(t, e.d, driver.Spec{ID: "sbx-keep"})
	if _, err := sb.WriteFile(ctx, "kept.txt", []byte("still here")); err != nil {
		t.Fatal(err)
	}
	again, err := e.d.Reopen(ctx, driver.Spec{ID: "sbx-keep"}, sb.Info())
	if err != nil {
		t.Fatal(err)
	}
	if got := drivertest.Sh(t, again, "cat kept.txt"); got != "still here" {
		t.Errorf("reopened sandbox reads %q", got)
	}
	if _, err := e.d.Reopen(ctx, driver.Spec{ID: "sbx-never"}, driver.Info{}); !errors.Is(err, driver.ErrGone) {
		t.Errorf("Reopen of an unknown sandbox = %v; want gone", err)
	}
}
