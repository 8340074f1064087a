package sandbox_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/fake"
)

// TestProcessTerminal: a process on a terminal has a tty of the size
// asked, sees a resize, echoes what is typed; a resize of a process
// without a terminal is FAILED_PRECONDITION, and a driver without the
// facet refuses a terminal.
func TestProcessTerminal(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	pid := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: `tty; stty size; read -r l; stty size; echo "got $l"`,
		Terminal: &sandboxv1.TerminalSize{Rows: 24, Cols: 80}})
	st, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: pid})
	first := recvOutput(t, st, "24 80")
	if !strings.Contains(first, "/dev/pts/") {
		t.Errorf("tty says %q", first)
	}
	if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Resize{Resize: &sandboxv1.TerminalSize{Rows: 40, Cols: 100}}}); err != nil {
		t.Fatal(err)
	}
	sendStdin(t, st, "typed\r")
	st.CloseSend()
	rest := collect(t, st)
	for _, want := range []string{"typed", "40 100", "got typed"} {
		if !strings.Contains(rest.out, want) {
			t.Errorf("after the resize: %q lacks %q", rest.out, want)
		}
	}
	if rest.err != "" || rest.exited.GetResult().GetExitCode() != 0 {
		t.Errorf("stderr %q (a terminal has one stream), exit %v", rest.err, rest.exited.GetResult())
	}

	plain := h.startProc(t, sb, &sandboxv1.ProcessSpec{Command: "exec cat"})
	st2, _ := h.attach(t, ctx, &sandboxv1.AttachOpen{SandboxId: sb, ProcessId: plain})
	st2.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Resize{Resize: &sandboxv1.TerminalSize{Rows: 1, Cols: 1}}})
	for {
		if _, err := st2.Recv(); err != nil {
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("resize without a terminal: %v", err)
			}
			break
		}
	}
	if _, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: sb, Spec: &sandboxv1.ProcessSpec{Command: "true", Terminal: &sandboxv1.TerminalSize{}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a 0x0 terminal: %v", err)
	}
	hf := start(t, &fake.Driver{})
	fid := hf.create(t, &sandboxv1.SandboxSpec{Driver: "fake"}).GetSandboxId()
	if _, err := hf.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: fid, Spec: &sandboxv1.ProcessSpec{Command: "true", Terminal: &sandboxv1.TerminalSize{Rows: 1, Cols: 1}}}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a terminal on the fake: %v", err)
	}
}
