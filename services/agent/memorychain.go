package agent

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// memoryEntry is one memory file read, before the budget is applied.
type memoryEntry struct {
	path string // as the Memory event names it, relative to the working directory
	data []byte // at most memoryBudget+1 bytes
	size int64  // the whole file's
}

// maxMemoryDepth is the most directory levels above the working directory
// searched for memory files: a repository deeper than that loads the
// levels nearest the root.
const maxMemoryDepth = 16

// ancestorMemory reads names (the default memory files) in each directory
// from the repository's root (the nearest directory up holding .git) down
// to the working directory's parent,
// root first: the instructions of a repository apply in its
// subdirectories. They lie outside the sandbox's file API (rooted at the
// working directory), so they are read through the sandbox's shell: a
// driver that does not show the parents (a container with only the
// directory mounted, bubblewrap) shows none, and nothing is read that a
// command in the sandbox could not read itself.
func (s *Service) ancestorMemory(ctx context.Context, sandboxID string, names []string) []memoryEntry {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// One command, with no more processes than the shell's own: find the
	// nearest directory up holding .git (by the shell, not git: git refuses
	// a repository another user owns, and the sandbox's user often is
	// another; an image may lack git), then print each file from the root
	// down, framed by its path and size ("-" when it is missing), then at
	// most memoryBudget+1 of its bytes. No root above: no output.
	var words strings.Builder
	for _, n := range names {
		words.WriteString(" " + shellQuote(n))
	}
	script := `w=$(pwd -P); d=$w; up=
while [ ! -e "$d/.git" ]; do [ -z "$d" ] || [ "$d" = / ] && exit 0; d=${d%/*}; up="../$up"; done
[ -z "$d" ] && d=/
n=0
while [ -n "$up" ] && [ $n -lt ` + strconv.Itoa(maxMemoryDepth) + ` ]; do
  for f in` + words.String() + `; do
    p=$up$f; printf '%s\n' "$p"
    if [ -f "$p" ] && [ -r "$p" ]; then wc -c < "$p" | tr -d ' '; head -c ` + strconv.Itoa(memoryBudget+1) + ` "$p"; else echo -; fi
  done
  up=${up#../}; n=$((n+1))
done`
	resp, err := s.sandbox.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sandboxID, Spec: &sandboxv1.ExecSpec{Command: script, Timeout: durationpb.New(5 * time.Second)}})
	if err != nil || resp.GetResult().GetExitCode() != 0 {
		return nil
	}
	out := resp.GetResult().GetStdout()
	var entries []memoryEntry
	for len(out) > 0 {
		p, rest, found := bytes.Cut(out, []byte("\n"))
		if !found {
			break
		}
		line, rest, found := bytes.Cut(rest, []byte("\n"))
		if !found {
			break
		}
		out = rest
		if string(line) == "-" {
			continue
		}
		size, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil || size < 0 {
			break // the file changed under the command: what follows is not framed
		}
		n := min(size, memoryBudget+1)
		if int64(len(out)) < n {
			break
		}
		entries = append(entries, memoryEntry{path: string(p), data: out[:n:n], size: size})
		out = out[n:]
	}
	return entries
}

// shellQuote is s as one POSIX shell word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
