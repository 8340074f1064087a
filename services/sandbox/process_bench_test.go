package sandbox_test

import (
	"bufio"
	"os/exec"
	"testing"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// BenchmarkProcessRoundTrip compares one interactive round trip (write a
// line, read its echo) through AttachProcess to `cat` in a local sandbox
// with the same through a pipe to a `cat` run directly.
func BenchmarkProcessRoundTrip(b *testing.B) {
	h := start(b)
	id := h.create(b, &sandboxv1.SandboxSpec{}).GetSandboxId()
	pid := h.startProc(b, id, &sandboxv1.ProcessSpec{Args: []string{"cat"}})
	st, _ := h.attach(b, b.Context(), &sandboxv1.AttachOpen{SandboxId: id, ProcessId: pid, LiveOnly: true})
	line := []byte("ping\n")

	cmd := exec.Command("cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	out := bufio.NewReader(outPipe)

	sideBySide(b, func() {
		if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: line}}); err != nil {
			b.Fatal(err)
		}
		for n := 0; n < len(line); {
			m, err := st.Recv()
			if err != nil {
				b.Fatal(err)
			}
			n += len(m.GetOutput().GetData())
		}
	}, func() {
		if _, err := in.Write(line); err != nil {
			b.Fatal(err)
		}
		if _, err := out.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
	})
}
