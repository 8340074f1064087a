package tools

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

func shellTool() *tool {
	return &tool{
		name: "shell",
		description: "Run a command as Bash source (`bash -c`, not a login shell, no extra shell options) in the sandbox's working directory. " +
			"The result gives the exit code, stdout and stderr. A command past its timeout is stopped and reported with the output it wrote so far.",
		category: catShell,
		serial:   true,
		schema: object([]string{"command"}, map[string]*schema{
			"command":     str("Bash source to evaluate"),
			"timeout_ms":  integer("Timeout in milliseconds (capped at 600000)", 1),
			"description": str("Description of what the command does"),
		}),
		run: runShell,
	}
}

func runShell(ctx context.Context, s *Set, c Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Command     string `json:"command"`
		TimeoutMS   int64  `json:"timeout_ms"`
		Description string `json:"description"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return output{}, invalidArgs("command must not be empty")
	}
	timeout := s.defaultTimeout
	if a.TimeoutMS > 0 {
		timeout = time.Duration(a.TimeoutMS) * time.Millisecond
	}
	timeout = min(timeout, s.maxTimeout)
	stream, err := s.env.Sandbox.ExecStream(ctx, &sandboxv1.ExecStreamRequest{
		SandboxId: s.env.SandboxID,
		Spec:      &sandboxv1.ExecSpec{Command: a.Command, Timeout: durationpb.New(timeout)},
	})
	if err != nil {
		return output{}, err
	}
	var res *sandboxv1.ExecResult
	live := 0 // bytes handed to ShellOutput
	for res == nil {
		msg, err := stream.Recv()
		if err == io.EOF {
			return output{}, failed("the sandbox ended the command's stream without a result")
		}
		if brokenConnection(err) && ctx.Err() == nil {
			// The stream was open: the sandbox service went away under the
			// command (it stops its commands when it dies). The session
			// goes on; the model decides whether to run it again.
			return output{}, failed("the connection to the sandbox service broke while the command ran (the service restarted or stopped); "+
				"the command's result is lost and it may not have finished: check its effects before running it again (%s)", status.Convert(err).Message())
		}
		if err != nil {
			return output{}, err
		}
		switch ev := msg.GetEvent().(type) {
		case *sandboxv1.ExecStreamResponse_Output:
			if data := ev.Output.GetData(); s.env.ShellOutput != nil && live < MaxLiveOutput {
				if len(data) > MaxLiveOutput-live {
					data = data[:MaxLiveOutput-live]
				}
				live += len(data)
				s.env.ShellOutput(c.ID, ev.Output.GetStream(), data)
				if live == MaxLiveOutput {
					s.env.ShellOutput(c.ID, ev.Output.GetStream(), []byte(LiveOutputCapped))
				}
			}
		case *sandboxv1.ExecStreamResponse_Finished:
			res = ev.Finished
		}
	}
	return renderExec(res, timeout), nil
}

// MaxLiveOutput bounds the live output one shell call hands to
// Env.ShellOutput; the result still keeps the head and tail of the rest.
const MaxLiveOutput = 1 << 20

// LiveOutputCapped is the marker the live output ends with once capped.
const LiveOutputCapped = "\n[live output capped at 1 MiB; the result keeps its head and tail]\n"

// renderExec is the shell tool's text: how the command ended, then its
// streams.
func renderExec(res *sandboxv1.ExecResult, timeout time.Duration) output {
	out := output{process: &agentv1.ProcessOutcome{
		Termination:      res.GetTermination(),
		Duration:         res.GetDuration(),
		StreamsSeparated: res.GetStreamsSeparated(),
	}}
	if res.ExitCode != nil {
		out.process.ExitCode = new(res.GetExitCode())
	}
	var b strings.Builder
	switch res.GetTermination() {
	case sandboxv1.Termination_TERMINATION_TIMED_OUT:
		fmt.Fprintf(&b, "Command timed out after %d ms and was stopped. Output so far:\n", timeout.Milliseconds())
		out.failed, out.kind = true, KindTimeout
	case sandboxv1.Termination_TERMINATION_CANCELLED:
		b.WriteString("Command was cancelled. Output so far:\n")
		out.failed, out.kind = true, KindCancelled
	case sandboxv1.Termination_TERMINATION_KILLED:
		b.WriteString("Command was killed (the sandbox stopped it). Output so far:\n")
		out.failed, out.kind = true, KindFailed
	}
	switch {
	case res.ExitCode != nil:
		fmt.Fprintf(&b, "Exit code: %d\n", res.GetExitCode())
		if res.GetExitCode() != 0 && !out.failed {
			out.failed, out.kind = true, KindFailed
		}
	case res.GetSignal() != "":
		fmt.Fprintf(&b, "Terminated by signal: %s\n", res.GetSignal())
		if !out.failed {
			out.failed, out.kind = true, KindFailed
		}
	}
	fmt.Fprintf(&b, "Duration: %d ms\n", res.GetDuration().AsDuration().Milliseconds())
	if res.GetStreamsSeparated() {
		out.addCut(writeStream(&b, "stdout", res.GetStdout(), res.GetStdoutStats()))
		out.addCut(writeStream(&b, "stderr", res.GetStderr(), res.GetStderrStats()))
	} else {
		out.addCut(writeStream(&b, "output (combined)", res.GetStdout(), res.GetStdoutStats()))
	}
	out.text = b.String()
	return out
}

func (o *output) addCut(cut, markers int64) {
	o.cut += cut
	o.markers += markers
}

// writeStream renders one captured stream. It returns the bytes the
// sandbox left out of it and the bytes of the marker written in their
// place.
func writeStream(b *strings.Builder, name string, data []byte, st *sandboxv1.CaptureStats) (cut, markers int64) {
	cut = max(st.GetOmittedBytes(), 0)
	if len(data) == 0 {
		fmt.Fprintf(b, "%s: (empty)\n", name)
		return cut, 0
	}
	fmt.Fprintf(b, "%s:\n", name)
	if st.GetOmittedBytes() > 0 && st.GetHeadBytes() < int64(len(data)) {
		head := int(st.GetHeadBytes())
		b.WriteString(validUTF8(data[:head]))
		n, _ := fmt.Fprintf(b, "\n[... %d bytes omitted ...]\n", st.GetOmittedBytes())
		markers = int64(n)
		data = data[head:]
	}
	text := validUTF8(data)
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
	return cut, markers
}

func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
