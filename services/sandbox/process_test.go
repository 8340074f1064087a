package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/fake"
)

type attachStream = grpc.BidiStreamingClient[sandboxv1.AttachProcessRequest, sandboxv1.AttachProcessResponse]

// startProc starts spec in sandbox id and returns its id.
func (h *harness) startProc(t testing.TB, id string, spec *sandboxv1.ProcessSpec) string {
	t.Helper()
	resp, err := h.client.StartProcess(t.Context(), &sandboxv1.StartProcessRequest{SandboxId: id, Spec: spec})
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	return resp.GetProcess().GetProcessId()
}

// attach opens an AttachProcess stream and returns it after the attached event.
func (h *harness) attach(t testing.TB, ctx context.Context, open *sandboxv1.AttachOpen) (attachStream, *sandboxv1.Process) {
	t.Helper()
	st, err := h.client.AttachProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if m.GetAttached() == nil {
		t.Fatalf("first message %v, want attached", m)
	}
	return st, m.GetAttached()
}

// collect reads an attach stream to its exited event: the output by
// stream, the gaps, the exited process.
type collected struct {
	out, err string
	gaps     []*sandboxv1.OutputGap
	seqs     []int64
	exited   *sandboxv1.Process
}

func collect(t testing.TB, st attachStream) collected {
	t.Helper()
	var c collected
	var out, errb strings.Builder
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("attach recv: %v", err)
		}
		switch ev := m.GetEvent().(type) {
		case *sandboxv1.AttachProcessResponse_Output:
			c.seqs = append(c.seqs, ev.Output.GetSeq())
			if ev.Output.GetStream() == sandboxv1.OutputStream_OUTPUT_STREAM_STDERR {
				errb.Write(ev.Output.GetData())
			} else {
				out.Write(ev.Output.GetData())
			}
		case *sandboxv1.AttachProcessResponse_Gap:
			c.gaps = append(c.gaps, ev.Gap)
		case *sandboxv1.AttachProcessResponse_Exited:
			c.exited = ev.Exited
		}
	}
	c.out, c.err = out.String(), errb.String()
	return c
}

func sendStdin(t testing.TB, st attachStream, data string) {
	t.Helper()
	if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: []byte(data)}}); err != nil {
		t.Fatal(err)
	}
}

// recvOutput reads output events until their bytes hold want.
func recvOutput(t testing.TB, st attachStream, want string) string {
	t.Helper()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("waiting for %q (got %q): %v", want, got.String(), err)
		}
		got.Write(m.GetOutput().GetData())
	}
	return got.String()
}

// TestProcessInteractive: a shell loop reads lines from the attach stream
// and answers each; stderr comes apart with sequence numbers in order;
// closing stdin ends it with exit code 0; a reattach from 0 replays it all
// and from an offset only what follows; List and Wait agree.
func TestProcessInteractive(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	pid := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: `echo ready >&2; while read -r l; do echo "got $l"; done; echo bye`})
	st, att := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid})
	if att.GetState() != sandboxv1.ProcessState_PROCESS_STATE_RUNNING || att.GetOwner() != "" || att.GetSandboxId() != sb {
		t.Errorf("attached = %v", att)
	}
	for i := range 3 {
		sendStdin(t, st, fmt.Sprintf("line%d\n", i))
		recvOutput(t, st, fmt.Sprintf("got line%d\n", i))
	}
	if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_CloseStdin{CloseStdin: true}}); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	rest := collect(t, st)
	if !strings.Contains(rest.out, "bye\n") || rest.exited.GetResult().GetExitCode() != 0 || rest.exited.GetState() != sandboxv1.ProcessState_PROCESS_STATE_EXITED {
		t.Fatalf("after close: %+v", rest)
	}
	wait, err := h.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: pid})
	if err != nil || wait.GetProcess().GetResult().GetTermination() != sandboxv1.Termination_TERMINATION_EXITED {
		t.Fatalf("WaitProcess = %v, %v", wait, err)
	}
	const wantOut = "got line0\ngot line1\ngot line2\nbye\n"
	total := wait.GetProcess().GetOutputBytes()
	if total != int64(len(wantOut)+len("ready\n")) || wait.GetProcess().GetDroppedBytes() != 0 {
		t.Errorf("output %d bytes, dropped %d", total, wait.GetProcess().GetDroppedBytes())
	}
	// Reattach: everything, in sequence order.
	re, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid})
	re.CloseSend()
	all := collect(t, re)
	if all.out != wantOut || all.err != "ready\n" || len(all.gaps) != 0 {
		t.Errorf("replay: out %q err %q gaps %v", all.out, all.err, all.gaps)
	}
	for i, s := range all.seqs {
		if s != int64(i+1) {
			t.Errorf("seqs %v, want 1, 2, ...", all.seqs)
			break
		}
	}
	// From an offset inside the output: only what follows, the first
	// chunk trimmed.
	tail, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid, FromOffset: total - 4})
	tail.CloseSend()
	if got := collect(t, tail); got.out+got.err != "bye\n"[len("bye\n")-4:] {
		t.Errorf("from offset %d: %q %q", total-4, got.out, got.err)
	}
	list, err := h.client.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SandboxId: sb})
	if err != nil || len(list.GetProcesses()) != 1 || list.GetProcesses()[0].GetProcessId() != pid {
		t.Errorf("ListProcesses = %v, %v", list, err)
	}
}

// TestProcessArgs: args run without a shell reading them.
func TestProcessArgs(t *testing.T) {
	h := start(t)
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	pid := h.startProc(t, sb, &sandboxv1.ProcessSpec{Args: []string{"printf", "%s|", "a b", "$HOME", "it's", "`id`"}})
	st, _ := h.attach(t, t.Context(), &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid})
	st.CloseSend()
	if got := collect(t, st).out; got != "a b|$HOME|it's|`id`|" {
		t.Errorf("args output %q", got)
	}
}

// pidAlive reports whether pid is a live (not zombie) process.
func pidAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// waitGone waits for pid to be gone.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProcessSignalTreeAndDelete: INT reaches the process's group; a
// descendant that ignores TERM and left the group dies with its sandbox,
// and the process ends KILLED.
func TestProcessSignalTreeAndDelete(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	pid := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: `trap 'echo INT; exit 3' INT; echo up; while :; do sleep 0.05; done`})
	st, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid})
	recvOutput(t, st, "up\n")
	sig, err := h.client.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: sb, ProcessId: pid, Signal: "SIGINT"})
	if err != nil || !sig.GetDelivered() {
		t.Fatalf("SignalProcess = %v, %v", sig, err)
	}
	st.CloseSend()
	got := collect(t, st)
	if !strings.Contains(got.out, "INT\n") || got.exited.GetResult().GetExitCode() != 3 {
		t.Errorf("after INT: %q, %v", got.out, got.exited)
	}
	if sig, err := h.client.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: sb, ProcessId: pid, Signal: "TERM"}); err != nil || sig.GetDelivered() {
		t.Errorf("signal after the end = %v, %v, want delivered false", sig, err)
	}

	// A grandchild in a session of its own, deaf to TERM and HUP.
	pid2 := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: `setsid bash -c 'trap "" TERM HUP; echo $$; exec sleep 1000' & wait`})
	st2, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid2})
	line := strings.TrimSpace(recvOutput(t, st2, "\n"))
	gc, err := strconv.Atoi(line)
	if err != nil || !pidAlive(gc) {
		t.Fatalf("grandchild pid %q: %v", line, err)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	st2.CloseSend()
	if got := collect(t, st2); got.exited.GetResult().GetTermination() != sandboxv1.Termination_TERMINATION_KILLED {
		t.Errorf("after DeleteSandbox: %v", got.exited)
	}
	waitGone(t, gc)
}

// TestProcessTimeout: past its timeout a process is stopped, TIMED_OUT.
func TestProcessTimeout(t *testing.T) {
	h := start(t)
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	pid := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: "exec sleep 1000", Timeout: durationpb.New(100 * time.Millisecond)})
	w, err := h.client.WaitProcess(t.Context(), &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: pid})
	if err != nil || w.GetProcess().GetResult().GetTermination() != sandboxv1.Termination_TERMINATION_TIMED_OUT || w.GetProcess().GetResult().GetSignal() != "SIGTERM" {
		t.Fatalf("WaitProcess = %v, %v", w, err)
	}
}

// TestProcessFlood: a process writing 64 MiB as fast as it can keeps only
// the newest 64 KiB, counts the rest as dropped, and the service answers
// other calls meanwhile; an attach from 0 gets a gap, then the tail.
func TestProcessFlood(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	const total, retain = 64 << 20, 64 << 10
	pid := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: fmt.Sprintf("head -c %d /dev/zero; echo END", total), RetainedOutputLimitBytes: retain})
	// Meanwhile other calls are answered.
	for range 5 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := h.client.Exec(cctx, &sandboxv1.ExecRequest{SandboxId: sb, Spec: &sandboxv1.ExecSpec{Command: "true"}}); err != nil {
			t.Fatalf("Exec during the flood: %v", err)
		}
		if _, err := h.client.ListProcesses(cctx, &sandboxv1.ListProcessesRequest{SandboxId: sb}); err != nil {
			t.Fatalf("ListProcesses during the flood: %v", err)
		}
		cancel()
	}
	w, err := h.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: pid})
	if err != nil {
		t.Fatal(err)
	}
	p := w.GetProcess()
	if p.GetOutputBytes() != total+4 || p.GetDroppedBytes() < total+4-retain || p.GetDroppedBytes() > total {
		t.Errorf("output %d, dropped %d; want %d written, all but <= %d dropped", p.GetOutputBytes(), p.GetDroppedBytes(), total+4, retain)
	}
	st, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid})
	st.CloseSend()
	got := collect(t, st)
	if len(got.gaps) != 1 || got.gaps[0].GetFromOffset() != 0 || got.gaps[0].GetToOffset() != p.GetDroppedBytes() {
		t.Errorf("gaps %v, want one from 0 to %d", got.gaps, p.GetDroppedBytes())
	}
	if int64(len(got.out)) != total+4-p.GetDroppedBytes() || !strings.HasSuffix(got.out, "END\n") {
		t.Errorf("replayed %d bytes, want %d ending END", len(got.out), total+4-p.GetDroppedBytes())
	}
}

// TestProcessBadInput: the contract's refusals.
func TestProcessBadInput(t *testing.T) {
	h := start(t, &fake.Driver{})
	ctx := t.Context()
	fakeID := h.create(t, &sandboxv1.SandboxSpec{Driver: "fake"}).GetSandboxId()
	h2 := start(t)
	sb := h2.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	_, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: fakeID, Spec: &sandboxv1.ProcessSpec{Command: "cat"}})
	if status.Code(err) != codes.FailedPrecondition || reason(err) != "sandbox.fabro.dev/CAPABILITY_UNSUPPORTED" || !strings.Contains(status.Convert(err).Message(), "processes") {
		t.Errorf("fake driver: %v (%s)", err, reason(err))
	}
	for _, c := range []struct {
		name string
		spec *sandboxv1.ProcessSpec
	}{
		{"empty", &sandboxv1.ProcessSpec{}},
		{"both", &sandboxv1.ProcessSpec{Command: "cat", Args: []string{"cat"}}},
		{"empty program", &sandboxv1.ProcessSpec{Args: []string{""}}},
		{"negative timeout", &sandboxv1.ProcessSpec{Command: "cat", Timeout: durationpb.New(-time.Second)}},
		{"bad env", &sandboxv1.ProcessSpec{Command: "cat", Env: map[string]string{"A=B": "c"}}},
	} {
		if _, err := h2.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: sb, Spec: c.spec}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", c.name, err)
		}
	}
	if _, err := h2.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: sb, Spec: &sandboxv1.ProcessSpec{Command: "cat", WorkingDir: "../.."}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("escaping working_dir: %v", err)
	}
	pid := h2.startProc(t, sb, &sandboxv1.ProcessSpec{Command: "exec cat"})
	if _, err := h2.client.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: sb, ProcessId: pid, Signal: "SIGSEGV"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown signal: %v", err)
	}
	if _, err := h2.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: "proc-nope"}); status.Code(err) != codes.NotFound || reason(err) != "sandbox.fabro.dev/PROCESS_NOT_FOUND" {
		t.Errorf("unknown process: %v", err)
	}
	st, err := h2.client.AttachProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: []byte("x")}})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("attach without open: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h2.client.WaitProcess(wctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: pid}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("wait on a running process past the deadline: %v", err)
	}
	h2.client.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: sb, ProcessId: pid, Signal: "KILL"})
	w, err := h2.client.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: sb, ProcessId: pid})
	if err != nil || w.GetProcess().GetResult().GetTermination() != sandboxv1.Termination_TERMINATION_KILLED || w.GetProcess().GetResult().GetSignal() != "SIGKILL" {
		t.Errorf("after KILL: %v, %v", w, err)
	}
}
