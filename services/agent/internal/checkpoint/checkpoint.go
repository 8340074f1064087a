// Package checkpoint records the workspace after each agent turn that
// changed it, and shows or restores any recorded turn, in a shadow git
// repository kept outside the workspace.
//
// The git binary runs where the files are (inside the sandbox, through a
// Runner) rather than go-git on the agent's host: the agent's host does
// not see a container's or a remote sandbox's files, and git's index keeps
// each file's stat data, so recording an unchanged 10,000-file tree costs
// a walk of lstat calls, not a read of every file. The workspace's own
// .git, if any, is never touched: the shadow repository has its own
// GIT_DIR and index, and honours the workspace's .gitignore files (build
// output and dependencies are not checkpointed).
//
// It needs git where the runner runs: the docker driver's base image
// (fabro/sandbox-base) gains it from `make sandbox-base`; one built before
// has none, and there a Record fails with ErrNoGit. safe.directory is set
// on the command line (protected configuration): a container's user may
// not own the mounted workspace. The agent records a
// checkpoint after each turn (services/agent/checkpoints.go).
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Runner runs a POSIX shell script in the workspace (its working
// directory) and returns its stdout and exit code; err is for a script
// that could not be run at all.
type Runner interface {
	Run(ctx context.Context, script string) (stdout []byte, stderr []byte, exit int, err error)
}

// Store is the checkpoints of one session's workspace.
type Store struct {
	run    Runner
	gitDir string // absolute, where the runner runs, outside the workspace
}

// New returns the store whose shadow repository is gitDir (created on the
// first Record).
func New(run Runner, gitDir string) *Store { return &Store{run: run, gitDir: gitDir} }

// Checkpoint is one recorded turn.
type Checkpoint struct {
	Turn   int
	Commit string
	Files  []string // changed since the checkpoint before it
	// Note is what RecordNote stored with it (List returns it).
	Note string
}

// ErrNoGit is a sandbox without git: no checkpoints there.
var ErrNoGit = errors.New("checkpoint: git is not installed in the sandbox")

// ErrNotFound is a turn with no checkpoint.
var ErrNotFound = errors.New("no checkpoint for that turn")

// UserChangesError is a restore refused because files changed since the
// agent's last checkpoint (by someone else) would be overwritten.
type UserChangesError struct{ Files []string }

func (e *UserChangesError) Error() string {
	return fmt.Sprintf("files changed outside the agent since its last turn would be overwritten (restore with force to discard them): %s", strings.Join(e.Files, ", "))
}

// quote is s as one shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// prelude points git at the shadow repository, with the settings that
// keep it independent of the user's and the workspace's git
// configuration.
func (s *Store) prelude() string {
	return `set -e
export GIT_DIR=` + quote(s.gitDir) + ` GIT_WORK_TREE=. GIT_INDEX_FILE=` + quote(s.gitDir+"/index") + `
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0
export GIT_AUTHOR_NAME=fabro GIT_AUTHOR_EMAIL=checkpoint@fabro GIT_COMMITTER_NAME=fabro GIT_COMMITTER_EMAIL=checkpoint@fabro
g() { git -c safe.directory='*' -c core.autocrlf=false -c core.safecrlf=false -c core.fsmonitor=false -c core.untrackedCache=true -c gc.auto=0 -c core.quotepath=false "$@"; }
`
}

func (s *Store) script(ctx context.Context, body string) (string, error) {
	out, errOut, code, err := s.run.Run(ctx, s.prelude()+body)
	if err != nil {
		return "", err
	}
	if code == 127 {
		return "", fmt.Errorf("%w: %s", ErrNoGit, strings.TrimSpace(string(errOut)))
	}
	if code != 0 {
		return "", fmt.Errorf("checkpoint: git exited %d: %s", code, strings.TrimSpace(string(errOut)))
	}
	return string(out), nil
}

func ref(turn int) string { return "refs/fabro/turn/" + strconv.Itoa(turn) }

// Record checkpoints the workspace as it is after turn (0: before the
// first). A tree identical to the last checkpoint's records nothing
// (ok false): a turn that only read files costs one git command, which
// finds every file's stat data unchanged.
func (s *Store) Record(ctx context.Context, turn int) (cp Checkpoint, ok bool, err error) {
	return s.RecordNote(ctx, turn, "")
}

// RecordNote is Record keeping a one-line note (such as the history's
// length) with the checkpoint, in its commit message.
func (s *Store) RecordNote(ctx context.Context, turn int, note string) (cp Checkpoint, ok bool, err error) {
	note = strings.ReplaceAll(note, "\n", " ")
	// The index always holds the last checkpoint's tree (Restore keeps it
	// so), so what add -A reports is exactly what changed since.
	out, err := s.script(ctx, `
[ -f "$GIT_DIR/HEAD" ] || (d=$GIT_DIR; unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE; git init -q --bare "$d")
changes=$(g add -A -v .)
p=$(cat "$GIT_DIR/fabro-last" 2>/dev/null || true)
if [ -z "$changes" ] && [ -n "$p" ]; then echo same; exit 0; fi
t=$(g write-tree)
c=$(g commit-tree "$t" ${p:+-p "$p"} -m `+quote("turn "+strconv.Itoa(turn))+` -m `+quote("note "+note)+`)
printf 'update %s %s\nupdate refs/fabro/last %s\n' `+ref(turn)+` "$c" "$c" | g update-ref --stdin
echo "$c" > "$GIT_DIR/fabro-last"
echo "$c"
printf '%s\n' "$changes"
`)
	if err != nil {
		return Checkpoint{}, false, err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if lines[0] == "same" {
		return Checkpoint{}, false, nil
	}
	cp = Checkpoint{Turn: turn, Commit: lines[0], Note: note}
	for _, l := range lines[1:] {
		for _, verb := range []string{"add '", "remove '"} {
			if f, ok := strings.CutPrefix(l, verb); ok {
				cp.Files = append(cp.Files, strings.TrimSuffix(f, "'"))
			}
		}
	}
	return cp, true, nil
}

// List is every checkpoint, oldest first.
func (s *Store) List(ctx context.Context) ([]Checkpoint, error) {
	out, err := s.script(ctx, `
[ -f "$GIT_DIR/HEAD" ] || exit 0
g for-each-ref --format='%(refname:lstrip=3) %(objectname) %(contents:body)' refs/fabro/turn/
`)
	if err != nil {
		return nil, err
	}
	var cps []Checkpoint
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		turn, rest, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(turn)
		if !ok || err != nil {
			continue
		}
		commit, body, _ := strings.Cut(rest, " ")
		note, _ := strings.CutPrefix(strings.TrimSpace(body), "note ")
		if strings.TrimSpace(body) == "note" {
			note = ""
		}
		cps = append(cps, Checkpoint{Turn: n, Commit: commit, Note: note})
	}
	// for-each-ref sorts by name: 10 before 2.
	for i := 1; i < len(cps); i++ {
		for j := i; j > 0 && cps[j].Turn < cps[j-1].Turn; j-- {
			cps[j], cps[j-1] = cps[j-1], cps[j]
		}
	}
	return cps, nil
}

// exists says whether turn has a checkpoint.
func (s *Store) commitOf(ctx context.Context, turn int) (string, error) {
	cps, err := s.List(ctx)
	if err != nil {
		return "", err
	}
	for _, c := range cps {
		if c.Turn == turn {
			return c.Commit, nil
		}
	}
	return "", fmt.Errorf("%w: turn %d", ErrNotFound, turn)
}

// Diff is the unified diff of what turn changed (against the checkpoint
// before it), or with turn < 0 of everything since the first checkpoint.
func (s *Store) Diff(ctx context.Context, turn int) (string, error) {
	cps, err := s.List(ctx)
	if err != nil {
		return "", err
	}
	if len(cps) == 0 {
		return "", fmt.Errorf("%w: the session recorded none", ErrNotFound)
	}
	from, to := cps[0].Commit, cps[len(cps)-1].Commit
	if turn >= 0 {
		c, err := s.commitOf(ctx, turn)
		if err != nil {
			return "", err
		}
		to = c
		from = ""
		for i, cp := range cps {
			if cp.Turn == turn && i > 0 {
				from = cps[i-1].Commit
			}
		}
		if from == "" { // the first: against the empty tree
			from = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
		}
	}
	return s.script(ctx, `g diff --no-color --no-ext-diff --binary `+quote(from)+` `+quote(to)+"\n")
}

// Restore puts the workspace back as it was at turn's checkpoint, and
// returns the files it changed. A file that differs from the last
// checkpoint (someone changed it after the agent's last turn) and that
// the restore would change is not overwritten unless force: the error
// lists them. Such changes to files the restore does not touch are kept.
func (s *Store) Restore(ctx context.Context, turn int, force bool) ([]string, error) {
	target, err := s.commitOf(ctx, turn)
	if err != nil {
		return nil, err
	}
	// The index is the last checkpoint's tree, with its files' stat data:
	// what differs from it now is not the agent's.
	out, err := s.script(ctx, `
g update-index -q --refresh >/dev/null 2>&1 || true
g diff-files --name-only -z
printf '\001'
g ls-files -o --exclude-standard -z
printf '\001'
g diff-tree -r -z --name-only --no-renames `+quote(target)+` refs/fabro/last
`)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(out, "\x01")
	if len(parts) != 3 {
		return nil, fmt.Errorf("checkpoint: unexpected output of git")
	}
	changed := map[string]bool{}
	for _, f := range append(splitZ(parts[0]), splitZ(parts[1])...) {
		changed[f] = true
	}
	touched := splitZ(parts[2])
	var conflict []string
	for _, f := range touched {
		if changed[f] {
			conflict = append(conflict, f)
		}
	}
	if len(conflict) > 0 && !force {
		return nil, &UserChangesError{Files: conflict}
	}
	// Forced: the conflicting files go back to the last checkpoint first,
	// so that the merge below sees no local change to them.
	var reset strings.Builder
	for _, f := range conflict {
		fmt.Fprintf(&reset, "if g cat-file -e %s 2>/dev/null; then g checkout-index -f -u -- %s; else rm -f -- %s; fi\n", quote("refs/fabro/last:"+f), quote(f), quote(f))
	}
	if _, err := s.script(ctx, reset.String()+`
g read-tree -m -u refs/fabro/last `+quote(target)+`
g update-ref refs/fabro/last `+quote(target)+`
echo `+quote(target)+` > "$GIT_DIR/fabro-last"
`); err != nil {
		return nil, err
	}
	return touched, nil
}

func splitZ(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, "\x00") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}
