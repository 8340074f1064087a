package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// resolveTimeout bounds the one command Resolve runs.
const resolveTimeout = 10 * time.Second

// Resolve returns where each absolute path leads inside the sandbox:
// links followed (missing last parts kept, as a write would create them),
// by realpath run in the sandbox itself, so a link means there what it
// means to the sandbox's own file calls whatever the driver (a container's
// links resolve in the container). One command resolves every path. It
// fails when the sandbox cannot say; the caller refuses the call then.
func (s *Set) Resolve(ctx context.Context, paths []string) ([]string, error) {
	var b strings.Builder
	// Nothing but the paths on the output, whether or not the sandbox
	// keeps stderr apart.
	b.WriteString("exec 2>/dev/null; set --")
	for _, p := range paths {
		b.WriteString(" '" + strings.ReplaceAll(p, "'", `'\''`) + "'")
	}
	// GNU realpath -m resolves paths that do not exist yet; busybox has
	// readlink -f. NUL-separated: a path may hold a newline.
	b.WriteString(`; for p do r=$(realpath -m -- "$p") || r=$(readlink -f -- "$p") || exit 3; printf '%s\0' "$r"; done`)
	stream, err := s.env.Sandbox.ExecStream(ctx, &sandboxv1.ExecStreamRequest{SandboxId: s.env.SandboxID, Spec: &sandboxv1.ExecSpec{
		Command: b.String(), Timeout: durationpb.New(resolveTimeout),
	}})
	if err != nil {
		return nil, err
	}
	var res *sandboxv1.ExecResult
	for res == nil {
		msg, err := stream.Recv()
		if err == io.EOF {
			return nil, errors.New("the sandbox ended realpath's stream without a result")
		}
		if err != nil {
			return nil, err
		}
		res = msg.GetFinished()
	}
	if res.GetTermination() != sandboxv1.Termination_TERMINATION_EXITED || res.GetExitCode() != 0 {
		return nil, fmt.Errorf("realpath in the sandbox ended %s (exit %d)", res.GetTermination(), res.GetExitCode())
	}
	if res.GetStdoutStats().GetOmittedBytes() > 0 {
		return nil, errors.New("realpath's output was cut")
	}
	out := strings.Split(strings.TrimSuffix(string(res.GetStdout()), "\x00"), "\x00")
	if len(out) != len(paths) {
		return nil, fmt.Errorf("realpath in the sandbox gave %d paths for %d", len(out), len(paths))
	}
	return out, nil
}
