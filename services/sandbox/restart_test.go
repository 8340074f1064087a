package sandbox_test

import (
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/server"

	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/fake"
)

// reasonOf returns the ErrorInfo reason of err, "" when it has none.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// proc is the sandbox service binary running on a data directory.
type proc struct {
	cmd    *exec.Cmd
	client sandboxv1.SandboxServiceClient
}

// The service binary, built once for every test that runs it (removed by
// TestMain).
var (
	serviceOnce sync.Once
	serviceBin  string
	serviceErr  error
)

func buildService(t *testing.T) string {
	t.Helper()
	serviceOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandbox-bin-")
		if err != nil {
			serviceErr = err
			return
		}
		serviceBin = filepath.Join(dir, "sandbox")
		if out, err := exec.Command("go", "build", "-o", serviceBin, "./cmd/sandbox").CombinedOutput(); err != nil {
			serviceErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if serviceErr != nil {
		t.Fatal(serviceErr)
	}
	return serviceBin
}

func startProc(t *testing.T, bin, dataDir, addr string) *proc {
	t.Helper()
	cmd := exec.Command(bin, "-data-dir", dataDir, "-grpc-addr", addr, "-http-addr", "")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// A person's token in the store the service verifies against.
	token, _, err := auth.OpenStore(server.DefaultTokensFile(dataDir)).Issue("restart-test", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), authtest.Bearer(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p := &proc{cmd: cmd, client: sandboxv1.NewSandboxServiceClient(conn)}
	// Ready once it answers: WaitForReady holds the call until it listens.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := p.client.ListDrivers(ctx, &sandboxv1.ListDriversRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("the service did not come up: %v", err)
	}
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func execOut(t *testing.T, c sandboxv1.SandboxServiceClient, id, command string) (string, error) {
	t.Helper()
	resp, err := c.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: command}})
	if err != nil {
		return "", err
	}
	return string(resp.GetResult().GetStdout()), nil
}

// removeContainers removes the containers of the service owning them.
func removeContainers(owner string) {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+docker.LabelOwner+"="+owner).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

// TestRestart kills the service with SIGKILL and starts it again on the same
// data directory: local and docker sandboxes are still there and usable, a
// container removed while it was down and one removed while it runs are
// FAILED with the reason, and every one of them can be deleted.
func TestRestart(t *testing.T) {
	needsDocker(t)
	bin := buildService(t)
	dataDir, addr := t.TempDir(), freeAddr(t)
	owner := "fabro-sandbox:" + dataDir
	t.Cleanup(func() { removeContainers(owner) })
	first := startProc(t, bin, dataDir, addr)
	ctx := t.Context()
	create := func(c sandboxv1.SandboxServiceClient, spec *sandboxv1.SandboxSpec) *sandboxv1.Sandbox {
		t.Helper()
		resp, err := c.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: spec})
		if err != nil {
			t.Fatalf("CreateSandbox(%v): %v", spec, err)
		}
		return resp.GetSandbox()
	}
	loc := create(first.client, &sandboxv1.SandboxSpec{Driver: "local", Labels: map[string]string{"t": "restart"}})
	dk := create(first.client, &sandboxv1.SandboxSpec{Driver: "docker"})
	downGone := create(first.client, &sandboxv1.SandboxSpec{Driver: "docker"})
	upGone := create(first.client, &sandboxv1.SandboxSpec{Driver: "docker"})
	for _, sb := range []*sandboxv1.Sandbox{loc, dk} {
		if _, err := execOut(t, first.client, sb.GetSandboxId(), "echo before > state.txt"); err != nil {
			t.Fatal(err)
		}
	}
	// A command running when the service dies must not outlive the
	// container's sandbox being usable again.
	go first.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: dk.GetSandboxId(), Spec: &sandboxv1.ExecSpec{Command: "sleep 600", Timeout: durationpb.New(2 * time.Second)}})

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.cmd.Wait()
	if out, err := exec.Command("docker", "rm", "-f", "fabro-"+downGone.GetSandboxId()).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v %s", err, out)
	}

	second := startProc(t, bin, dataDir, addr)
	list, err := second.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, sb := range list.GetSandboxes() {
		states[sb.GetSandboxId()] = sb.GetState().String() + " " + sb.GetStateMessage()
	}
	for _, sb := range []*sandboxv1.Sandbox{loc, dk, upGone} {
		if got := states[sb.GetSandboxId()]; got != "SANDBOX_STATE_READY " {
			t.Errorf("%s (%s) after the restart: %q; want READY", sb.GetSandboxId(), sb.GetDriver(), got)
		}
	}
	if got := states[downGone.GetSandboxId()]; !strings.HasPrefix(got, "SANDBOX_STATE_FAILED ") || !strings.Contains(got, "removed") {
		t.Errorf("a container removed while the service was down: %q; want FAILED saying it was removed", got)
	}
	for _, sb := range []*sandboxv1.Sandbox{loc, dk} {
		if out, err := execOut(t, second.client, sb.GetSandboxId(), "cat state.txt; echo after >> state.txt"); err != nil || out != "before\n" {
			t.Errorf("%s after the restart: %q, %v", sb.GetDriver(), out, err)
		}
		rf, err := second.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: sb.GetSandboxId(), Path: "state.txt"})
		if err != nil || !strings.Contains(rf.GetContent(), "after") {
			t.Errorf("%s ReadFile after the restart: %v, %v", sb.GetDriver(), rf, err)
		}
	}

	if out, err := exec.Command("docker", "rm", "-f", "fabro-"+upGone.GetSandboxId()).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v %s", err, out)
	}
	got, err := second.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: upGone.GetSandboxId()})
	if err != nil || got.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_FAILED || !strings.Contains(got.GetSandbox().GetStateMessage(), "removed") {
		t.Errorf("GetSandbox of a container removed behind its back = %v, %v; want FAILED with the reason", got, err)
	}
	for _, id := range []string{upGone.GetSandboxId(), downGone.GetSandboxId()} {
		_, err := execOut(t, second.client, id, "true")
		if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "SANDBOX_FAILED" || !strings.Contains(status.Convert(err).Message(), "removed") {
			t.Errorf("Exec on a FAILED sandbox = %v (reason %q); want FAILED_PRECONDITION SANDBOX_FAILED with the reason", err, reasonOf(err))
		}
	}

	for _, sb := range []*sandboxv1.Sandbox{loc, dk, downGone, upGone} {
		resp, err := second.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()})
		if err != nil || !resp.GetExisted() {
			t.Errorf("DeleteSandbox(%s) = %v, %v", sb.GetSandboxId(), resp, err)
		}
	}
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+docker.LabelOwner+"="+owner).Output(); len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("containers left after every sandbox was deleted: %s", out)
	}
	for _, sub := range []string{"workspaces", "docker"} {
		ents, _ := os.ReadDir(filepath.Join(dataDir, "sandbox", sub))
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("workspace %s/%s left after every sandbox was deleted", sub, e.Name())
			}
		}
	}
}

// TestDockerLimitExceeded checks the limit a command hit reaches the RPC's
// result, and the sandbox stays usable.
func TestDockerLimitExceeded(t *testing.T) {
	needsDocker(t)
	d := docker.New(docker.Config{WorkspaceRoot: t.TempDir(), Owner: "fabro-test-" + t.Name()})
	defer d.Close()
	h := start(t, d)
	sb := h.create(t, &sandboxv1.SandboxSpec{Driver: "docker", Limits: &sandboxv1.ResourceLimits{MemoryBytes: 64 << 20, MaxProcesses: 64}})
	resp, err := h.client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: sb.GetSandboxId(), Spec: &sandboxv1.ExecSpec{Command: `perl -e '$x = "a" x (400 * 1024 * 1024)'`}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetResult().GetLimitExceeded(); got != sandboxv1.LimitExceeded_LIMIT_EXCEEDED_MEMORY {
		t.Errorf("limit_exceeded = %v; want MEMORY (result %v)", got, resp.GetResult())
	}
	if out, err := execOut(t, h.client, sb.GetSandboxId(), "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("after the hog: %q, %v", out, err)
	}
	_, err = h.client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "docker", DriverOptions: map[string]string{"image": "fabro/absent:dev"}}})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "IMAGE_MISSING" || !strings.Contains(status.Convert(err).Message(), "fabro/absent:dev") {
		t.Errorf("a missing image = %v; want FAILED_PRECONDITION IMAGE_MISSING naming it", err)
	}
	if caps := sb.GetCapabilities().GetLimits(); !caps.GetMemory() || !caps.GetProcesses() || !caps.GetCpu() || !caps.GetNetworkNone() {
		t.Errorf("docker states limits %v; want all", caps)
	}
}

// TestLimitsRefused checks a limit the driver cannot enforce is refused,
// naming it, unless best effort is allowed.
func TestLimitsRefused(t *testing.T) {
	h := start(t, &fake.Driver{})
	ctx := t.Context()
	_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "fake",
		Limits: &sandboxv1.ResourceLimits{MemoryBytes: 1 << 30, Network: sandboxv1.NetworkPolicy_NETWORK_POLICY_NONE}}})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "LIMIT_UNSUPPORTED" ||
		!strings.Contains(status.Convert(err).Message(), "memory_bytes, network none") {
		t.Errorf("unenforceable limits = %v; want FAILED_PRECONDITION LIMIT_UNSUPPORTED naming them", err)
	}
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "fake",
		Limits: &sandboxv1.ResourceLimits{MemoryBytes: 1 << 30, BestEffort: true}}}); err != nil {
		t.Errorf("best-effort limits = %v; want created", err)
	}
	for _, l := range []*sandboxv1.ResourceLimits{{MemoryBytes: -1}, {MaxProcesses: -1}, {Cpus: -0.5}, {Network: 9}} {
		_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "fake", Limits: l}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("limits %v = %v; want INVALID_ARGUMENT", l, err)
		}
	}
	// An image that is not there, and a driver spec with no driver: the
	// configured default.
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{}}); err != nil {
		t.Errorf("a spec naming no driver = %v; want the default driver", err)
	}
}

// TestDockerUnavailable checks an unreachable engine: the driver is listed
// unavailable with the reason, and creating gets UNAVAILABLE.
func TestDockerUnavailable(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	d := docker.New(docker.Config{WorkspaceRoot: t.TempDir()})
	defer d.Close()
	h := start(t, d)
	resp, err := h.client.ListDrivers(t.Context(), &sandboxv1.ListDriversRequest{})
	if err != nil || len(resp.GetDrivers()) != 1 || resp.GetDrivers()[0].GetAvailable() || !strings.Contains(resp.GetDrivers()[0].GetUnavailableReason(), "/nonexistent/docker.sock") {
		t.Errorf("ListDrivers = %v, %v; want docker unavailable, naming the engine", resp, err)
	}
	_, err = h.client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "docker"}})
	if status.Code(err) != codes.Unavailable || reasonOf(err) != "DRIVER_UNAVAILABLE" {
		t.Errorf("CreateSandbox = %v; want UNAVAILABLE", err)
	}
}

// flaky is the fake driver, reopening as a Reopener that fails while down.
type flaky struct {
	*fake.Driver
	down atomic.Bool
}

func (f *flaky) Reopen(ctx context.Context, spec driver.Spec, _ driver.Info) (driver.Sandbox, error) {
	if f.down.Load() {
		return nil, fmt.Errorf("%w: the engine is down", driver.ErrUnavailable)
	}
	return f.Driver.Create(ctx, spec)
}

// TestReviveAfterUnavailable checks a sandbox whose driver was unavailable
// at start is FAILED with the reason, then reopened on use once it is back.
func TestReviveAfterUnavailable(t *testing.T) {
	sandbox.SetReviveEveryForTest(0)
	t.Cleanup(func() { sandbox.SetReviveEveryForTest(5 * time.Second) })
	dataDir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	d := &flaky{Driver: &fake.Driver{}}
	first, err := sandbox.New(sandbox.Config{DataDir: dataDir, Drivers: []driver.Driver{d}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := first.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSandbox().GetSandboxId()
	first.ReleaseForTest()
	d.down.Store(true)
	second, err := sandbox.New(sandbox.Config{DataDir: dataDir, Drivers: []driver.Driver{d}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(t.Context())
	got, err := second.GetSandbox(t.Context(), &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil || got.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_FAILED || !strings.Contains(got.GetSandbox().GetStateMessage(), "engine is down") {
		t.Fatalf("while the driver is down: %v, %v; want FAILED with the reason", got, err)
	}
	d.down.Store(false)
	got, err = second.GetSandbox(t.Context(), &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil || got.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_READY {
		t.Fatalf("once the driver is back: %v, %v; want READY", got, err)
	}
	if _, err := second.WriteFile(t.Context(), &sandboxv1.WriteFileRequest{SandboxId: id, Path: "x", Content: []byte("x")}); err != nil {
		t.Errorf("WriteFile once revived: %v", err)
	}
}
