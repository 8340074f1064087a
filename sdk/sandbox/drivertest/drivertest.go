// Package drivertest is the contract suite every sandbox driver must pass:
// files and confinement (with a corpus of hostile paths, RunTraversal), exec (timeouts, cancel, kill, no survivors, binary
// and huge output, env, working directory), search on every back end the
// driver has, and that the capabilities it states are true. A driver's own
// test calls [Run]:
//
//	func TestContract(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) driver.Driver { return mydriver.New(...) })
//	}
//
// The suite runs commands with bash and reads /proc inside the sandbox, so
// sandboxes must be Linux with bash, as the service requires. A driver
// that states no Commands capability (scripted results, such as the fake)
// skips every part that needs a real command: the exec suite, and the
// symbolic links and permission bits the files suite sets up with one.
package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Run runs the whole suite; newDriver makes the driver under test.
func Run(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	t.Run("Capabilities", func(t *testing.T) { t.Parallel(); RunCapabilities(t, newDriver) })
	t.Run("Files", func(t *testing.T) { t.Parallel(); RunFiles(t, newDriver) })
	t.Run("Exec", func(t *testing.T) { t.Parallel(); RunExec(t, newDriver) })
	t.Run("Search", func(t *testing.T) { t.Parallel(); RunSearch(t, newDriver) })
	t.Run("Traversal", func(t *testing.T) { t.Parallel(); RunTraversal(t, newDriver) })
	t.Run("Processes", func(t *testing.T) { t.Parallel(); RunProcesses(t, newDriver) })
	t.Run("Pause", func(t *testing.T) { t.Parallel(); RunPause(t, newDriver) })
}

// NewSandbox creates a sandbox with spec and deletes it when t ends.
func NewSandbox(t *testing.T, d driver.Driver, spec driver.Spec) driver.Sandbox {
	t.Helper()
	sb, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Delete(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("Delete: %v", err)
		}
	})
	return sb
}

// Sh runs a command that must exit 0 and returns its stdout.
func Sh(t *testing.T, sb driver.Sandbox, command string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), spec(command), nil)
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	if res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("Exec(%q): %s exit %v signal %s; stderr: %s", command, termName(res.Termination), ptr(res.ExitCode), res.Signal, res.Stderr)
	}
	return string(res.Stdout)
}

func spec(command string) driver.ExecSpec {
	return driver.ExecSpec{Command: command, Timeout: 30 * time.Second, RetainLimit: 1 << 20}
}

func ptr(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

func termName(t driver.Termination) string {
	return [...]string{"unknown", "exited", "timed_out", "cancelled", "killed"}[t]
}

func write(t *testing.T, sb driver.Sandbox, files map[string]string) {
	t.Helper()
	for p, c := range files {
		if _, err := sb.WriteFile(t.Context(), p, []byte(c)); err != nil {
			t.Fatalf("WriteFile(%s): %v", p, err)
		}
	}
}

func read(t *testing.T, sb driver.Sandbox, p string) (string, error) {
	t.Helper()
	rc, _, err := sb.Open(t.Context(), p, 0)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// RunCapabilities checks what a sandbox says of itself. Each exec
// capability stated is then checked by RunExec, which uses it: stdin,
// separated streams, live streaming and cancel.
func RunCapabilities(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	sb := NewSandbox(t, d, driver.Spec{})
	info := sb.Info()
	if info.Capabilities != d.Capabilities() {
		t.Errorf("the sandbox states %+v; its driver %+v", info.Capabilities, d.Capabilities())
	}
	if info.Capabilities.Isolation < driver.IsolationNone || info.Capabilities.Isolation > driver.IsolationNamespace {
		t.Errorf("isolation %d is not stated", info.Capabilities.Isolation)
	}
	if !strings.HasPrefix(info.RootDirectory, "/") || !strings.HasPrefix(info.WorkingDirectory+"/", info.RootDirectory+"/") {
		t.Errorf("working directory %q must be absolute, inside root %q", info.WorkingDirectory, info.RootDirectory)
	}
	if info.Platform == "" || info.OSVersion == "" {
		t.Errorf("platform %q, OS version %q; want both stated", info.Platform, info.OSVersion)
	}
	if err := d.Available(t.Context()); err != nil {
		t.Errorf("Available = %v after a sandbox was created", err)
	}
	if !info.Capabilities.Commands {
		return
	}
	if got := Sh(t, sb, "uname -s | tr A-Z a-z"); got != info.Platform+"\n" {
		t.Errorf("uname says %q; the sandbox states platform %q", got, info.Platform)
	}
	if got := Sh(t, sb, "pwd"); got != info.WorkingDirectory+"\n" {
		t.Errorf("commands start in %q; the sandbox states %q", got, info.WorkingDirectory)
	}
}

// RunFiles checks file operations and confinement to the root.
func RunFiles(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	sb := NewSandbox(t, d, driver.Spec{})
	ctx := t.Context()
	root := sb.Info().RootDirectory
	commands := sb.Info().Capabilities.Commands

	t.Run("write and read", func(t *testing.T) {
		created, err := sb.WriteFile(ctx, "deep/er/f.txt", []byte("one\ntwo\n"))
		if err != nil || !created {
			t.Fatalf("WriteFile new = %v, %v; want created", created, err)
		}
		wantMode := uint32(0o644)
		if commands {
			Sh(t, sb, "chmod 600 deep/er/f.txt")
			wantMode = 0o600
		}
		created, err = sb.WriteFile(ctx, root+"/deep/er/f.txt", []byte("three"))
		if err != nil || created {
			t.Fatalf("WriteFile existing (absolute) = %v, %v; want replaced", created, err)
		}
		if got, err := read(t, sb, "deep/er/f.txt"); err != nil || got != "three" {
			t.Fatalf("read back %q, %v", got, err)
		}
		fi, err := sb.Stat(ctx, "deep/er/f.txt")
		if err != nil || fi.Mode != wantMode || fi.Type != driver.TypeFile || fi.Size != 5 {
			t.Fatalf("Stat = %+v, %v; want a 5-byte file that kept mode %#o", fi, err, wantMode)
		}
		rc, size, err := sb.Open(ctx, "deep/er/f.txt", 2)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "ree" || size != 5 {
			t.Fatalf("Open at offset 2 = %q size %d", b, size)
		}
		if got, err := sb.ListDir(ctx, "deep/er", 1); err != nil || len(got) != 1 || got[0].Path != "f.txt" {
			t.Fatalf("ListDir(deep/er) = %+v, %v; want f.txt alone, no temporary file left", got, err)
		}
		if commands {
			if got := Sh(t, sb, "ls -A deep/er"); got != "f.txt\n" {
				t.Fatalf("temporary files left behind: %q", got)
			}
		}
	})

	outside := t.TempDir() // a place a confined sandbox must never touch
	escapes := []string{"../x", "/etc/passwd", "a/../../x", root + "/../x"}
	if commands {
		Sh(t, sb, "mkdir -p links && ln -s / links/slash && ln -s ../.. links/up && ln -s "+outside+" links/out && ln -s ../deep links/in")
		escapes = append(escapes, "links/slash/etc/passwd", "links/up/x", "links/out/new")
	}

	t.Run("confinement", func(t *testing.T) {
		for _, p := range escapes {
			t.Run(p, func(t *testing.T) {
				checks := map[string]error{}
				_, _, checks["Open"] = sb.Open(ctx, p, 0)
				_, checks["WriteFile"] = sb.WriteFile(ctx, p, []byte("x"))
				_, checks["Stat"] = sb.Stat(ctx, p)
				_, checks["Mkdir"] = sb.Mkdir(ctx, p+"/d")
				checks["Remove"] = sb.Remove(ctx, p, true)
				checks["Rename from"] = sb.Rename(ctx, p, "r")
				checks["Rename to"] = sb.Rename(ctx, "deep", p)
				_, checks["ListDir"] = sb.ListDir(ctx, p, 1)
				_, checks["Exec dir"] = sb.Exec(ctx, driver.ExecSpec{Command: "true", Dir: p, Timeout: time.Second, RetainLimit: 10}, nil)
				_, checks["Grep"] = sb.Grep(ctx, driver.GrepOptions{Pattern: "x", Path: p, MaxResults: 10})
				_, checks["Glob"] = sb.Glob(ctx, "*", p)
				_, checks["Walk"] = sb.Walk(ctx, p, 0, nil)
				for op, err := range checks {
					if !errors.Is(err, driver.ErrPathEscapes) {
						t.Errorf("%s(%q) = %v; want ErrPathEscapes", op, p, err)
					}
				}
			})
		}
		if _, err := sb.Stat(ctx, "deep"); err != nil {
			t.Errorf("deep was touched: %v", err)
		}
		if commands {
			if got := Sh(t, sb, "ls -A "+outside+" | wc -l"); strings.TrimSpace(got) != "0" {
				t.Errorf("something was created outside the root: %s", got)
			}
			// A link that stays inside the root is followed.
			if got, err := read(t, sb, "links/in/er/f.txt"); err != nil || got != "three" {
				t.Errorf("read through an inner link = %q, %v", got, err)
			}
		}
		if err := sb.Remove(ctx, ".", true); !errors.Is(err, driver.ErrPathEscapes) {
			t.Errorf("Remove(root) = %v; want ErrPathEscapes", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		write(t, sb, map[string]string{"e/full/f": "x", "e/file": "x", "e/nested/sub/f": "x"})
		if _, err := sb.Mkdir(ctx, "e/dir"); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Mkdir(ctx, "e/only/empty"); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			err  error
			want error
		}{
			{"open missing", third(sb.Open(ctx, "e/nope", 0)), driver.ErrNotFound},
			{"open dir", third(sb.Open(ctx, "e/dir", 0)), driver.ErrIsDirectory},
			{"stat missing", second(sb.Stat(ctx, "e/nope")), driver.ErrNotFound},
			{"stat below a file", second(sb.Stat(ctx, "e/file/x")), driver.ErrNotFound},
			{"write over dir", second(sb.WriteFile(ctx, "e/dir", nil)), driver.ErrIsDirectory},
			{"write below a file", second(sb.WriteFile(ctx, "e/file/x", nil)), driver.ErrNotDirectory},
			{"remove missing", sb.Remove(ctx, "e/nope", false), driver.ErrNotFound},
			{"remove non-empty", sb.Remove(ctx, "e/full", false), driver.ErrNotEmpty},
			{"remove a dir holding an empty dir", sb.Remove(ctx, "e/only", false), driver.ErrNotEmpty},
			{"rename a dir over a non-empty dir", sb.Rename(ctx, "e/dir", "e/nested"), driver.ErrIsDirectory},
			{"rename a dir over an empty dir", sb.Rename(ctx, "e/nested", "e/dir"), driver.ErrIsDirectory},
			{"rename a dir over a file", sb.Rename(ctx, "e/dir", "e/file"), driver.ErrNotDirectory},
			{"rename a file over a dir", sb.Rename(ctx, "e/file", "e/dir"), driver.ErrIsDirectory},
			{"rename missing", sb.Rename(ctx, "e/nope", "e/x"), driver.ErrNotFound},
			{"rename into itself", sb.Rename(ctx, "e/full", "e/full/sub"), driver.ErrNotEmpty},
			{"mkdir over a file", second(sb.Mkdir(ctx, "e/file")), driver.ErrExists},
			{"mkdir below a file", second(sb.Mkdir(ctx, "e/file/d")), driver.ErrExists},
			{"list missing", second(sb.ListDir(ctx, "e/nope", 1)), driver.ErrNotFound},
			{"list a file", second(sb.ListDir(ctx, "e/file", 1)), driver.ErrNotDirectory},
			{"exec in missing dir", second(sb.Exec(ctx, driver.ExecSpec{Command: "true", Dir: "e/nope", Timeout: time.Second, RetainLimit: 1}, nil)), driver.ErrNotFound},
			{"grep missing", second(sb.Grep(ctx, driver.GrepOptions{Pattern: "x", Path: "e/nope", MaxResults: 1})), driver.ErrNotFound},
			{"walk a file", second(sb.Walk(ctx, "e/file", 0, nil)), driver.ErrNotDirectory},
		}
		for _, tt := range tests {
			if !errors.Is(tt.err, tt.want) {
				t.Errorf("%s: %v; want %v", tt.name, tt.err, tt.want)
			}
		}
	})

	t.Run("remove, rename, mkdir, list", func(t *testing.T) {
		write(t, sb, map[string]string{"m/a/b/c.txt": "c", "m/a/d.txt": "dd", "m/z.txt": "z"})
		if err := sb.Remove(ctx, "m/z.txt", false); err != nil {
			t.Fatal(err)
		}
		if err := sb.Rename(ctx, "m/a/d.txt", "m/new/parent/d.txt"); err != nil {
			t.Fatal(err)
		}
		if created, err := sb.Mkdir(ctx, "m/e/f"); err != nil || !created {
			t.Fatalf("Mkdir = %v, %v", created, err)
		}
		if created, err := sb.Mkdir(ctx, "m/e/f"); err != nil || created {
			t.Fatalf("Mkdir again = %v, %v; want existing", created, err)
		}
		got, err := sb.ListDir(ctx, "m", 2)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, fi := range got {
			names = append(names, fmt.Sprintf("%s:%d", fi.Path, fi.Type))
		}
		want := []string{"a:2", "a/b:2", "e:2", "e/f:2", "new:2", "new/parent:2"}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("ListDir(m, 2) (-want +got):\n%s", diff)
		}

		// A directory moves with everything below it, into missing
		// parents; a file replaces a file.
		write(t, sb, map[string]string{"m/a/b/c2.txt": "c2", "m/x.txt": "x", "m/y.txt": "yy"})
		for _, mv := range [][2]string{{"m/a", "m/moved/here"}, {"m/x.txt", "m/y.txt"}, {"m/new", "m/renamed"}} {
			if err := sb.Rename(ctx, mv[0], mv[1]); err != nil {
				t.Fatalf("Rename(%s, %s) = %v", mv[0], mv[1], err)
			}
		}
		got, err = sb.ListDir(ctx, "m", 10)
		if err != nil {
			t.Fatal(err)
		}
		names = nil
		for _, fi := range got {
			names = append(names, fmt.Sprintf("%s:%d:%d", fi.Path, fi.Type, fi.Size))
		}
		want = []string{"e:2:0", "e/f:2:0", "moved:2:0", "moved/here:2:0", "moved/here/b:2:0", "moved/here/b/c.txt:1:1",
			"moved/here/b/c2.txt:1:2", "renamed:2:0", "renamed/parent:2:0", "renamed/parent/d.txt:1:2", "y.txt:1:1"}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("ListDir(m, 10) after renames (-want +got):\n%s", diff)
		}
		if got, err := read(t, sb, "m/moved/here/b/c2.txt"); err != nil || got != "c2" {
			t.Errorf("moved file = %q, %v", got, err)
		}

		if commands {
			got, _ = sb.ListDir(ctx, "links", 1)
			for _, fi := range got {
				if fi.Type != driver.TypeSymlink {
					t.Errorf("ListDir(links): %s is %d; want a symlink, not followed", fi.Path, fi.Type)
				}
			}
			if err := sb.Remove(ctx, "links/out", false); err != nil {
				t.Errorf("Remove(link) = %v", err)
			}
		}
		if err := sb.Remove(ctx, "m", true); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Stat(ctx, "m"); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("Stat after recursive Remove = %v", err)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func third[T, U any](_ T, _ U, err error) error { return err }

// recorder is an Output that keeps every chunk and can react to them.
type recorder struct {
	mu      sync.Mutex
	started bool
	out     bytes.Buffer
	onChunk func(all string)
}

func (r *recorder) Started() error { r.mu.Lock(); r.started = true; r.mu.Unlock(); return nil }

func (r *recorder) Chunk(s driver.Stream, p []byte) error {
	r.mu.Lock()
	r.out.Write(p)
	all := r.out.String()
	r.mu.Unlock()
	if r.onChunk != nil {
		r.onChunk(all)
	}
	return nil
}

// RunExec checks commands: results, stopping, output and environment.
func RunExec(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	if !d.Capabilities().Commands {
		t.Skip("the driver states no Commands capability: its results are scripted")
	}
	sb := NewSandbox(t, d, driver.Spec{Env: map[string]string{"SANDBOX_VAR": "from spec", "OVERRIDDEN": "spec"}})
	caps := sb.Info().Capabilities
	root := sb.Info().RootDirectory
	Sh(t, sb, "mkdir -p 'sub dir'")

	tests := []struct {
		name       string
		spec       driver.ExecSpec
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"exit code", driver.ExecSpec{Command: "echo out; echo err >&2; exit 3"}, 3, "out\n", "err\n"},
		{"command not found", driver.ExecSpec{Command: "no-such-command-here 2>/dev/null"}, 127, "", ""},
		{"bash, not a login shell", driver.ExecSpec{Command: `shopt -q login_shell || echo "bash $BASH_VERSINFO"`}, 0, "bash 5\n", ""},
		{"env with spaces", driver.ExecSpec{Command: `printf '[%s][%s][%s]' "$A" "$SANDBOX_VAR" "$OVERRIDDEN"`, Env: map[string]string{"A": "x  y z ", "OVERRIDDEN": "request"}}, 0, "[x  y z ][from spec][request]", ""},
		{"working dir", driver.ExecSpec{Command: "pwd", Dir: "sub dir"}, 0, root + "/sub dir\n", ""},
		{"absolute working dir", driver.ExecSpec{Command: "pwd", Dir: root + "/sub dir"}, 0, root + "/sub dir\n", ""},
		{"binary output", driver.ExecSpec{Command: `printf '\000\377\376a\n'`}, 0, "\x00\xff\xfea\n", ""},
		{"no stdin means empty", driver.ExecSpec{Command: "cat"}, 0, "", ""},
	}
	if caps.Stdin {
		tests = append(tests, struct {
			name       string
			spec       driver.ExecSpec
			wantCode   int
			wantStdout string
			wantStderr string
		}{"stdin", driver.ExecSpec{Command: "tr a-z A-Z", Stdin: []byte("hello")}, 0, "HELLO", ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.spec.Timeout, tt.spec.RetainLimit = 30*time.Second, 1<<20
			res, err := sb.Exec(t.Context(), tt.spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantStdout, wantStderr := tt.wantStdout, tt.wantStderr
			if !caps.StreamsSeparated {
				wantStdout, wantStderr = wantStdout+wantStderr, ""
			}
			if res.Termination != driver.Exited || res.ExitCode == nil || *res.ExitCode != tt.wantCode ||
				string(res.Stdout) != wantStdout || string(res.Stderr) != wantStderr || res.StreamsSeparated != caps.StreamsSeparated {
				t.Errorf("got %s exit %s stdout %q stderr %q separated %v; want exit %d stdout %q stderr %q",
					termName(res.Termination), ptr(res.ExitCode), res.Stdout, res.Stderr, res.StreamsSeparated, tt.wantCode, wantStdout, wantStderr)
			}
		})
	}

	// alive reports, from inside the sandbox, whether pid still runs,
	// awaiting its death for up to 5 s (a KILL is not instantaneous). The
	// process must still be the test's sleep: with a pid namespace per
	// command, the pid names another process (or one of this check's own)
	// in the checking command.
	alive := func(t *testing.T, pid string) bool {
		out := Sh(t, sb, `for i in $(seq 50); do s=$(cut -d' ' -f3 /proc/`+pid+`/stat 2>/dev/null); c=$(tr '\0' ' ' </proc/`+pid+`/cmdline 2>/dev/null); `+
			`if [ -z "$s" ] || [ "$s" = Z ] || { [ "$c" != "sleep 60 " ] && [ "$c" != "sleep 300 " ]; }; then echo gone; exit; fi; sleep 0.1; done; echo alive`)
		return out != "gone\n"
	}

	t.Run("stopping", func(t *testing.T) {
		type stop int
		const (
			byTimeout stop = iota
			byCancel
			byKill
			none
		)
		tests := []struct {
			name     string
			command  string
			how      stop
			want     driver.Termination
			signal   string // "" means an exit code
			needCaps bool
		}{
			{"timeout", "sleep 60 & echo $!; wait", byTimeout, driver.TimedOut, "SIGTERM", false},
			{"timeout, TERM ignored", `trap "" TERM; sleep 60 & echo $!; wait; wait`, byTimeout, driver.TimedOut, "SIGKILL", false},
			{"cancel", "sleep 60 & echo $!; wait", byCancel, driver.Cancelled, "SIGTERM", true},
			{"kill", "sleep 60 & echo $!; wait", byKill, driver.Killed, "SIGKILL", true},
			{"exits, leaving a background child", "sleep 60 & echo $!", none, driver.Exited, "", false},
			// Children that leave the process group (setsid) must not
			// survive either, however they were started.
			{"exits, leaving a setsid child", "setsid sleep 300 & echo $!", none, driver.Exited, "", false},
			{"exits, leaving a double-forked daemon", "(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!)", none, driver.Exited, "", false},
			{"exits, leaving a double-forked daemon on the pipes", "(setsid sleep 300 & echo $!)", none, driver.Exited, "", false},
			{"timeout, a setsid child", "setsid sleep 300 & echo $!; wait", byTimeout, driver.TimedOut, "SIGTERM", false},
			{"timeout, a setsid child with no environment", "env -i setsid sleep 300 & echo $!; wait", byTimeout, driver.TimedOut, "SIGTERM", false},
			{"timeout, a double-forked daemon", "(setsid sleep 300 & echo $!); sleep 60 & wait", byTimeout, driver.TimedOut, "SIGTERM", false},
			{"cancel, a setsid child", "setsid sleep 300 & echo $!; wait", byCancel, driver.Cancelled, "SIGTERM", true},
			{"cancel, a double-forked daemon", "(setsid sleep 300 & echo $!); sleep 60 & wait", byCancel, driver.Cancelled, "SIGTERM", true},
			{"kill, a double-forked daemon", "(setsid sleep 300 & echo $!); sleep 60 & wait", byKill, driver.Killed, "SIGKILL", true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				if tt.needCaps && !caps.Cancel {
					t.Skip("the driver states no cancel capability")
				}
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				rec := &recorder{onChunk: func(all string) {
					if !strings.HasSuffix(all, "\n") {
						return
					}
					switch tt.how {
					case byCancel:
						cancel(errors.New("test cancels"))
					case byKill:
						cancel(driver.ErrKill)
					}
				}}
				var res driver.ExecResult
				for timeout := 300 * time.Millisecond; ; timeout *= 2 {
					if tt.how != byTimeout {
						timeout = 30 * time.Second
					}
					var err error
					if res, err = sb.Exec(ctx, driver.ExecSpec{Command: tt.command, Timeout: timeout, RetainLimit: 1 << 10}, rec); err != nil {
						t.Fatal(err)
					}
					// A timeout that came before the command printed its
					// child's pid says nothing of the driver, only that the
					// machine is busy: again, with twice the time.
					if tt.how != byTimeout || res.Termination != driver.TimedOut || len(bytes.TrimSpace(res.Stdout)) > 0 || timeout >= 20*time.Second {
						break
					}
				}
				if res.Termination != tt.want || res.Signal != tt.signal || (tt.signal == "") != (res.ExitCode != nil) {
					t.Errorf("got %s signal %q exit %s; want %s signal %q", termName(res.Termination), res.Signal, ptr(res.ExitCode), termName(tt.want), tt.signal)
				}
				pid := strings.TrimSpace(string(res.Stdout))
				if _, err := strconv.Atoi(pid); err != nil {
					t.Fatalf("stdout %q is not the background pid", res.Stdout)
				}
				if alive(t, pid) {
					t.Errorf("the background child %s survived", pid)
				}
			})
		}
	})

	t.Run("kill during a graceful stop", func(t *testing.T) {
		t.Parallel()
		if !caps.Cancel {
			t.Skip("the driver states no cancel capability")
		}
		// TERM is ignored, so the graceful stop would wait StopGrace; the
		// kill must end the command well before that.
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		kill := make(chan struct{})
		var killAt time.Time
		rec := &recorder{onChunk: func(all string) {
			if !strings.HasSuffix(all, "\n") {
				return
			}
			cancel(errors.New("test cancels"))
			go func() {
				time.Sleep(200 * time.Millisecond)
				killAt = time.Now()
				close(kill)
			}()
		}}
		start := time.Now()
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: `trap "" TERM; sleep 60 & echo $!; wait; wait`, Timeout: 30 * time.Second, RetainLimit: 1 << 10, Kill: kill}, rec)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if res.Termination != driver.Killed || res.Signal != "SIGKILL" {
			t.Errorf("got %s signal %q; want killed by SIGKILL", termName(res.Termination), res.Signal)
		}
		// Measured from the kill, not from the start: a loaded machine can
		// take seconds to start the command. An ignored kill would end it
		// when the grace runs out, StopGrace-200ms after the kill.
		if killAt.IsZero() || time.Since(killAt) > driver.StopGrace/2 {
			t.Errorf("the command ended %v after it started, %v after the kill; want soon after the kill, before the %v grace ran out", took, time.Since(killAt), driver.StopGrace)
		}
		if pid := strings.TrimSpace(string(res.Stdout)); alive(t, pid) {
			t.Errorf("the background child %s survived", pid)
		}
	})

	t.Run("live streaming", func(t *testing.T) {
		t.Parallel()
		if !caps.LiveStreaming {
			t.Skip("the driver states no live streaming")
		}
		// The first line must arrive while the command still runs: only
		// then can the test cancel it before its timeout.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec := &recorder{onChunk: func(all string) {
			if strings.Contains(all, "first\n") {
				cancel()
			}
		}}
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: "echo first; sleep 60", Timeout: 20 * time.Second, RetainLimit: 1 << 10}, rec)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.started || res.Termination != driver.Cancelled {
			t.Errorf("started %v, termination %s; want a live chunk to cancel the command", rec.started, termName(res.Termination))
		}
	})

	t.Run("retention", func(t *testing.T) {
		t.Parallel()
		res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: `printf 'HEAD'; head -c 10000 /dev/zero | tr '\0' m; printf 'TAIL'`, Timeout: 30 * time.Second, RetainLimit: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := driver.CaptureStats{Observed: 10008, Retained: 100, Omitted: 9908, Head: 50}
		if diff := cmp.Diff(want, res.StdoutStats); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(string(res.Stdout), "HEADm") || !strings.HasSuffix(string(res.Stdout), "mTAIL") || len(res.Stdout) != 100 {
			t.Errorf("retained %q; want head then tail", res.Stdout)
		}
	})

	t.Run("huge output is drained", func(t *testing.T) {
		t.Parallel()
		const n = 256 << 20
		var streamed int64
		var mu sync.Mutex
		out := &countOutput{n: &streamed, mu: &mu}
		// A generous timeout: a driver that stops draining fails all the
		// same, and a busy machine (or the race detector) moves 256 MiB
		// slowly.
		res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: fmt.Sprintf("head -c %d /dev/zero; echo done >&2", n), Timeout: 5 * time.Minute, RetainLimit: 4096}, out)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == nil || *res.ExitCode != 0 || res.StdoutStats.Observed != n || len(res.Stdout) != 4096 || streamed != n {
			t.Errorf("exit %s, observed %d, retained %d, streamed %d; want all %d bytes drained and 4096 kept",
				ptr(res.ExitCode), res.StdoutStats.Observed, len(res.Stdout), streamed, n)
		}
	})
}

type countOutput struct {
	mu *sync.Mutex
	n  *int64
}

func (c *countOutput) Started() error { return nil }
func (c *countOutput) Chunk(s driver.Stream, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == driver.Stdout {
		*c.n += int64(len(p))
	}
	return nil
}
