package sandbox_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestServiceRestartOnFailure: a failing service is started again up to
// max_restarts, its log going on across runs; a service stopped by
// SignalProcess is not restarted.
func TestServiceRestartOnFailure(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: "echo run; exit 1", Service: true, Name: "flaky",
		Restart: sandboxv1.RestartPolicy_RESTART_POLICY_ON_FAILURE, MaxRestarts: 2})
	w, err := h.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	if p := w.GetProcess(); p.GetRestarts() != 2 || p.GetResult().GetExitCode() != 1 || p.GetSpec().GetName() != "flaky" {
		t.Errorf("after its restarts: %v", p)
	}
	st, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: "flaky"})
	st.CloseSend()
	if got := collect(t, st).out; got != "run\nrun\nrun\n" {
		t.Errorf("the log across runs: %q", got)
	}

	h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: "echo up; exec sleep 1000", Service: true, Name: "steady",
		Restart: sandboxv1.RestartPolicy_RESTART_POLICY_ON_FAILURE})
	// The name is taken while it runs.
	_, err = h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: sb, Spec: &sandboxv1.ProcessSpec{Command: "true", Service: true, Name: "steady"}})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("a second service named steady: %v, want ALREADY_EXISTS", err)
	}
	st2, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: "steady"})
	recvOutput(t, st2, "up\n")
	if _, err := h.client.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: sb, ProcessId: "steady", Signal: "TERM"}); err != nil {
		t.Fatal(err)
	}
	st2.CloseSend()
	if got := collect(t, st2); got.exited.GetRestarts() != 0 || got.exited.GetResult().GetSignal() != "SIGTERM" {
		t.Errorf("stopped by TERM: %v", got.exited)
	}
}

// TestServiceReadiness: a port probe passes once the service listens, a
// command probe once it succeeds; a probe that never passes gives up with
// a message; a service outlives its call and ends with its sandbox.
func TestServiceReadiness(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	listen := fmt.Sprintf(`sleep 0.3; exec perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:%d", Listen => 5, ReuseAddr => 1) or die "listen: $!"; while ($c = $s->accept) { print $c "hello\n"; close $c }'`, port)
	for _, c := range []struct {
		name  string
		spec  *sandboxv1.ProcessSpec
		ready bool
	}{
		{"port", &sandboxv1.ProcessSpec{Command: listen, Service: true, Name: "web", Readiness: &sandboxv1.ReadinessProbe{Port: int32(port)}}, true},
		{"command", &sandboxv1.ProcessSpec{Command: "sleep 0.3; touch ready; exec sleep 1000", Service: true, Name: "cmd",
			Readiness: &sandboxv1.ReadinessProbe{Command: "[ -e ready ]", Interval: durationpb.New(50 * time.Millisecond)}}, true},
		{"never", &sandboxv1.ProcessSpec{Command: "exec sleep 1000", Service: true, Name: "never",
			Readiness: &sandboxv1.ReadinessProbe{Command: "false", Interval: durationpb.New(50 * time.Millisecond), Timeout: durationpb.New(300 * time.Millisecond)}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pid := h.startProc(t, sb, c.spec)
			w, err := h.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: pid, UntilReady: true})
			if err != nil {
				t.Fatal(err)
			}
			p := w.GetProcess()
			if p.GetReady() != c.ready || p.GetState() != sandboxv1.ProcessState_PROCESS_STATE_RUNNING || (!c.ready && !strings.Contains(p.GetReadinessMessage(), "did not pass")) {
				t.Errorf("until ready: %v", p)
			}
		})
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("the service is not listening after it was ready: %v", err)
	}
	conn.Close()
	// Not a service with a probe: FAILED_PRECONDITION.
	plain := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: "exec sleep 1000"})
	if _, err := h.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: plain, UntilReady: true}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("until ready without a probe: %v", err)
	}
	list, err := h.client.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SandboxId: sb})
	if err != nil || len(list.GetProcesses()) != 4 {
		t.Fatalf("ListProcesses = %v, %v", list, err)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the service still listens after its sandbox was deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServiceBadInput: the service fields' refusals.
func TestServiceBadInput(t *testing.T) {
	h := start(t)
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	for _, c := range []struct {
		name string
		spec *sandboxv1.ProcessSpec
	}{
		{"service without a name", &sandboxv1.ProcessSpec{Command: "true", Service: true}},
		{"bad name", &sandboxv1.ProcessSpec{Command: "true", Service: true, Name: "a b"}},
		{"name without service", &sandboxv1.ProcessSpec{Command: "true", Name: "a"}},
		{"restart without service", &sandboxv1.ProcessSpec{Command: "true", Restart: sandboxv1.RestartPolicy_RESTART_POLICY_ON_FAILURE}},
		{"probe with both", &sandboxv1.ProcessSpec{Command: "true", Readiness: &sandboxv1.ReadinessProbe{Port: 80, Command: "true"}}},
		{"probe port", &sandboxv1.ProcessSpec{Command: "true", Readiness: &sandboxv1.ReadinessProbe{Port: 70000}}},
		{"negative restarts", &sandboxv1.ProcessSpec{Command: "true", Service: true, Name: "a", MaxRestarts: -1}},
	} {
		if _, err := h.client.StartProcess(t.Context(), &sandboxv1.StartProcessRequest{SandboxId: sb, Spec: c.spec}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", c.name, err)
		}
	}
}
