package drivertest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// RunTraversal throws a corpus of hostile paths at every path-taking
// operation: "..", absolute paths and prefixes that only look inside,
// symbolic links out (absolute, relative, through chains, dangling, looping)
// and in, NUL, and the names tar-slip archives use. Nothing outside the root
// may be read, listed, written, created or removed, and each operation
// refuses with ErrPathEscapes (ErrInvalid for NUL). The place outside is a
// directory the sandbox's own commands make, so that it is outside in the
// sandbox's view whatever the driver (host or container).
func RunTraversal(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	sb := NewSandbox(t, d, driver.Spec{})
	ctx := t.Context()
	root := sb.Info().RootDirectory
	commands := sb.Info().Capabilities.Commands
	write(t, sb, map[string]string{"inside/f.txt": "inside SECRET-LIKE text\n", "keep/k.txt": "k"})

	escapes := []string{
		"..", "../", "../x", "a/../../x", "./../x", "x/./../../y", "inside/../../x", "inside/../..",
		"/", "/etc", "/etc/passwd", "//etc/passwd", root + "/..", root + "/../x", root + "x/y", root + "/inside/../../x",
		// Entries as tar-slip archives carry them.
		"../../../../../../tmp/evil", "./../../evil", "/tmp/evil",
	}
	outside, outsidePersists := "", false
	if commands {
		outside = "/tmp/fabro-outside-" + randomName()
		Sh(t, sb, "mkdir -p "+outside+"/sub && printf 'TOPSECRET\\n' > "+outside+"/secret && "+
			"ln -s / l-root && ln -s ../.. l-up && ln -s "+outside+" l-out && ln -s l-chain2 l-chain1 && ln -s l-chain3 l-chain2 && ln -s "+outside+" l-chain3 && "+
			"ln -s "+outside+"/nope l-dangling-out && ln -s l-loop2 l-loop1 && ln -s l-loop1 l-loop2 && mkdir -p deep/er && ln -s ../../.. deep/er/l-up3 && ln -s ../inside deep/l-in")
		t.Cleanup(func() {
			sb.Exec(context.WithoutCancel(ctx), driver.ExecSpec{Command: "rm -rf " + outside, Timeout: 10 * time.Second, RetainLimit: 10}, nil)
		})
		// Some drivers give each command a /tmp of its own (bwrap): then the
		// place outside exists only while its command runs, and what file
		// calls must not touch is the host's path of the same name.
		outsidePersists = Sh(t, sb, "test -d "+outside+" && echo yes || echo no") == "yes\n"
		escapes = append(escapes, "l-root", "l-root/etc/passwd", "l-up/x", "l-out", "l-out/secret", "l-out/sub/new", "l-chain1", "l-chain1/secret",
			"l-dangling-out", "l-dangling-out/x", "deep/er/l-up3/x", "deep/l-in/../../l-out/secret", outside, outside+"/secret")
	}
	linkItself := map[string]bool{"l-root": true, "l-out": true, "l-chain1": true, "l-dangling-out": true}
	for _, p := range escapes {
		t.Run(strings.ReplaceAll(p, "/", "|"), func(t *testing.T) {
			// Removing, renaming or replacing a link itself is allowed:
			// it is inside. What it points to is not.
			checks := ops(ctx, sb, p, !linkItself[p])
			for op, err := range checks {
				if linkItself[p] && errors.Is(err, driver.ErrNotDirectory) {
					continue // refusing to walk a link at all is as safe
				}
				if !errors.Is(err, driver.ErrPathEscapes) {
					t.Errorf("%s(%q) = %v; want ErrPathEscapes", op, p, err)
				}
			}
		})
	}
	t.Run("NUL", func(t *testing.T) {
		for _, p := range []string{"a\x00b", "inside/f.txt\x00../../etc/passwd", "\x00"} {
			for op, err := range ops(ctx, sb, p, true) {
				if !errors.Is(err, driver.ErrInvalid) && !errors.Is(err, driver.ErrPathEscapes) {
					t.Errorf("%s(%q) = %v; want ErrInvalid", op, p, err)
				}
			}
		}
	})
	if commands {
		t.Run("loops", func(t *testing.T) {
			// A loop stays inside, but must end in an error, not a hang.
			for op, err := range ops(ctx, sb, "l-loop1/x", true) {
				if err == nil {
					t.Errorf("%s(l-loop1/x) succeeded through a link loop", op)
				}
			}
		})
		t.Run("links inside are followed", func(t *testing.T) {
			if got, err := read(t, sb, "deep/l-in/f.txt"); err != nil || got != "inside SECRET-LIKE text\n" {
				t.Errorf("read through an inner link = %q, %v", got, err)
			}
		})
		t.Run("nothing outside was touched", func(t *testing.T) {
			if outsidePersists {
				got := Sh(t, sb, "cd "+outside+" && find . | sort && cat secret")
				if got != ".\n./secret\n./sub\nTOPSECRET\n" {
					t.Errorf("outside the root now holds:\n%s", got)
				}
			} else if _, err := os.Lstat(outside); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a file call made %s on the host (%v); nothing outside the root may be created", outside, err)
			}
			res, err := sb.Grep(ctx, driver.GrepOptions{Pattern: "TOPSECRET", MaxResults: 10})
			if err != nil || len(res.Matches) != 0 {
				t.Errorf("Grep of the root found %+v, %v; want no line from outside", res.Matches, err)
			}
			files, err := sb.Walk(ctx, ".", 0, nil)
			for _, f := range files {
				if strings.Contains(f.Path, "secret") {
					t.Errorf("Walk of the root went outside: %s (%v)", f.Path, err)
				}
			}
		})
	}
	if got, err := read(t, sb, "keep/k.txt"); err != nil || got != "k" {
		t.Errorf("keep/k.txt = %q, %v after the corpus", got, err)
	}
}

// ops runs every path-taking operation on p and returns their errors;
// self adds those that act on p itself rather than through it (write,
// remove, rename), which come last.
func ops(ctx context.Context, sb driver.Sandbox, p string, self bool) map[string]error {
	checks := map[string]error{}
	_, _, checks["Open"] = sb.Open(ctx, p, 0)
	_, checks["WriteFile below"] = sb.WriteFile(ctx, p+"/new.txt", []byte("x"))
	_, checks["Stat"] = sb.Stat(ctx, p)
	_, checks["Mkdir"] = sb.Mkdir(ctx, p+"/d")
	_, checks["ListDir"] = sb.ListDir(ctx, p, 2)
	_, checks["Grep"] = sb.Grep(ctx, driver.GrepOptions{Pattern: "SECRET", Path: p, MaxResults: 10})
	_, checks["Glob"] = sb.Glob(ctx, "*", p)
	_, checks["Walk"] = sb.Walk(ctx, p, 0, nil)
	if sb.Info().Capabilities.Commands {
		_, checks["Exec dir"] = sb.Exec(ctx, driver.ExecSpec{Command: "true", Dir: p, Timeout: 5 * time.Second, RetainLimit: 10}, nil)
	}
	if self {
		_, checks["WriteFile"] = sb.WriteFile(ctx, p, []byte("x"))
		checks["Remove"] = sb.Remove(ctx, p, true)
		checks["Rename from"] = sb.Rename(ctx, p, "renamed")
		checks["Rename to"] = sb.Rename(ctx, "keep", p)
	}
	return checks
}

func randomName() string {
	return strings.ToLower(strings.NewReplacer("-", "", ":", "", ".", "").Replace(time.Now().Format("150405.000000000")))
}
