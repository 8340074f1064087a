package agent

import (
	"bytes"
	"context"
	"fmt"
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
	run := func(cmd string) ([]byte, bool) {
		resp, err := s.sandbox.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sandboxID, Spec: &sandboxv1.ExecSpec{Command: cmd, Timeout: durationpb.New(5 * time.Second)}})
		if err != nil || resp.GetResult().GetExitCode() != 0 {
			return nil, false
		}
		return resp.GetResult().GetStdout(), true
	}
	// The root is the nearest directory up holding .git, found by the
	// shell rather than git: git refuses a repository another user owns
	// (the sandbox's user often is another), and an image may lack it.
	out, ok := run(`w=$(pwd -P); d=$w; while :; do if [ -e "$d/.git" ]; then printf '%s\n%s\n' "$d" "$w"; exit 0; fi; [ "$d" = / ] && exit 1; d=$(dirname "$d"); done`)
	if !ok {
		return nil
	}
	root, wd, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	rel := strings.Trim(strings.TrimPrefix(wd, root), "/")
	if rel == "" || !strings.HasPrefix(wd, root) {
		return nil // the working directory is the root
	}
	depth := min(len(strings.Split(rel, "/")), maxMemoryDepth)
	var paths []string
	for up := depth; up >= 1; up-- {
		for _, n := range names {
			paths = append(paths, strings.Repeat("../", up)+n)
		}
	}
	// One command for every file: each is framed by its size on a line
	// ("-" when there is none), then at most memoryBudget+1 of its bytes.
	var script strings.Builder
	for _, p := range paths {
		q := "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
		fmt.Fprintf(&script, `if [ -f %s ] && [ -r %s ]; then wc -c < %s | tr -d ' '; head -c %d %s; else echo -; fi; `, q, q, q, memoryBudget+1, q)
	}
	out, ok = run(script.String())
	if !ok {
		return nil
	}
	var entries []memoryEntry
	for _, p := range paths {
		line, rest, found := bytes.Cut(out, []byte("\n"))
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
		entries = append(entries, memoryEntry{path: p, data: out[:n:n], size: size})
		out = out[n:]
	}
	return entries
}
