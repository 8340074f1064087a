package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// docBlock is a shell block of the documentation marked runnable.
type docBlock struct {
	file string
	line int
	body string
}

// runnableBlocks returns every ```sh runnable block of the README and
// docs/.
func runnableBlocks(t *testing.T) []docBlock {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	var out []docBlock
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		var cur *docBlock
		for n := 1; sc.Scan(); n++ {
			l := sc.Text()
			switch {
			case cur == nil && strings.TrimSpace(l) == "```sh runnable":
				cur = &docBlock{file: strings.TrimPrefix(f, "../../"), line: n}
			case cur != nil && strings.TrimSpace(l) == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.body += l + "\n"
			}
		}
		fh.Close()
	}
	return out
}

// TestDocsRun runs every shell block marked runnable in the README and
// docs/, as written, against `fabro serve` started as `make run` starts it
// (the default data directory under a HOME of the test's own; the user's
// project allowed), with the fake provider standing in for every
// provider, so the documentation cannot drift from what works. Only the
// addresses, written and default, are the test server's free ports.
func TestDocsRun(t *testing.T) {
	blocks := runnableBlocks(t)
	if len(blocks) == 0 {
		t.Fatal("no ```sh runnable block in README.md or docs/")
	}
	fp := fakeprovider.New()
	fp.Script(func(fakeprovider.Request) fakeprovider.Turn {
		return fakeprovider.Turn{Text: "Done: this reply is the fake provider's."}
	})
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	home := t.TempDir()
	project := filepath.Join(home, "src", "myproject")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "parser.go"), []byte("package parser\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(home, "overlay.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	for _, k := range []string{"FABRO_SERVER", "FABRO_TOKEN", "FABRO_CONFIG"} {
		t.Setenv(k, "") // restored at the end; unset meanwhile, as in a fresh shell
		os.Unsetenv(k)
	}
	// The server's catalog and the one `fabro secret set` probes a key with.
	t.Setenv("FABRO_LLM_CATALOG_OVERLAY", overlay)
	s := startServe(t, filepath.Join(home, ".local", "share", "fabro"), "FABRO_SANDBOX_ALLOWED_ROOTS="+project)
	t.Setenv("FABRO_DATA_DIR", "") // the blocks find the data directory as a person's shell does
	os.Unsetenv("FABRO_DATA_DIR")
	addrs := strings.NewReplacer("127.0.0.1:7700", s.grpcAddr, "localhost:7700", s.grpcAddr,
		"127.0.0.1:7780", s.httpAddr, "localhost:7780", s.httpAddr)
	bin := filepath.Dir(fabroBin)
	ports := regexp.MustCompile(`:77[0-9][0-9]\b`)
	for _, b := range blocks {
		t.Run(b.file+":"+strconv.Itoa(b.line), func(t *testing.T) {
			script := addrs.Replace(b.body)
			if m := ports.FindString(script); m != "" {
				t.Fatalf("the block names port %s, which the test does not serve:\n%s", m, b.body)
			}
			cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
			cmd.Dir = home
			// The default --server (127.0.0.1:7700) is the test server's too.
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FABRO_SERVER="+s.grpcAddr)
			// A block that asks for a value reads it from stdin.
			cmd.Stdin = strings.NewReader("sk-docs-test\n")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("%s:%d failed: %v\n--- block\n%s--- output\n%s", b.file, b.line, err, b.body, out)
			}
		})
	}
}

// TestDocsLinks: every relative link of the README and docs/ names a file
// that exists and, with a #fragment, a heading of that file (as GitHub
// spells its anchors), so moving a section cannot leave a dead link.
func TestDocsLinks(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	heading := regexp.MustCompile(`(?m)^#+ (.*)$`)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	slug := func(h string) string {
		h = strings.ToLower(strings.TrimSpace(h))
		h = regexp.MustCompile(`[^\w\- ]`).ReplaceAllString(h, "")
		return strings.ReplaceAll(h, " ", "-")
	}
	anchors := map[string]map[string]bool{}
	text := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text[f], anchors[filepath.Clean(f)] = string(b), map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
			anchors[filepath.Clean(f)][slug(m[1])] = true
		}
	}
	for _, f := range files {
		for _, m := range link.FindAllStringSubmatch(text[f], -1) {
			l := m[1]
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(l, "#")
			target := filepath.Clean(f)
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(f), path))
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(f, "../../"), l)
				continue
			}
			if frag != "" && strings.HasSuffix(target, ".md") && anchors[target] != nil && !anchors[target][frag] {
				t.Errorf("%s links to %s, which has no heading #%s", strings.TrimPrefix(f, "../../"), l, frag)
			}
		}
	}
}
