package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConfigPrecedence: a flag beats its environment variable, which beats
// the config file, which beats the built-in default; for each of the
// file's keys, on exec's flags.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	write := func(path, content string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	full := `# my defaults
server = "file:7700"
token_file = "~/file.token"
model = "file/model"
sandbox = "docker"
permissions = "read-only"
`
	xdg := filepath.Join(dir, "xdg")
	write(filepath.Join(xdg, "fabro", "config.toml"), full)
	write(filepath.Join(home, ".config", "fabro", "config.toml"), `model = "home/model"`+"\n")
	other := write(filepath.Join(dir, "other.toml"), `server = "other:1"`+"\n")
	unknown := write(filepath.Join(dir, "unknown.toml"), "server = \"a:1\"\n\ncolour = \"blue\"\n")
	badType := write(filepath.Join(dir, "badtype.toml"), "model = \"m\"\nserver = 5\n")
	badSyntax := write(filepath.Join(dir, "badsyntax.toml"), "server = \"a:1\"\nmodel = \n")
	defaults := map[string]string{"server": "", "token-file": "", "model": "", "sandbox": "local", "permissions": "read-write"}
	with := func(over map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range defaults {
			m[k] = v
		}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	fromFile := map[string]string{"server": "file:7700", "token-file": filepath.Join(home, "file.token"), "model": "file/model", "sandbox": "docker", "permissions": "read-only"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    map[string]string
		wantErr string
	}{
		{name: "built-in defaults", want: defaults},
		{name: "the home file", env: map[string]string{}, want: with(map[string]string{"model": "home/model"})},
		{name: "the XDG file", env: map[string]string{"XDG_CONFIG_HOME": xdg}, want: fromFile},
		{name: "environment over file", env: map[string]string{"XDG_CONFIG_HOME": xdg, "FABRO_SERVER": "env:1", "FABRO_MODEL": "env/model"},
			want: with(map[string]string{"server": "env:1", "token-file": filepath.Join(home, "file.token"), "model": "env/model", "sandbox": "docker", "permissions": "read-only"})},
		{name: "an empty variable is set", env: map[string]string{"XDG_CONFIG_HOME": xdg, "FABRO_SERVER": ""},
			want: with(map[string]string{"server": "", "token-file": filepath.Join(home, "file.token"), "model": "file/model", "sandbox": "docker", "permissions": "read-only"})},
		{name: "flag over environment and file", args: []string{"--server", "flag:1", "--permissions=full", "--sandbox", "local"},
			env:  map[string]string{"XDG_CONFIG_HOME": xdg, "FABRO_SERVER": "env:1", "FABRO_PERMISSIONS": "read-write"},
			want: with(map[string]string{"server": "flag:1", "token-file": filepath.Join(home, "file.token"), "model": "file/model", "sandbox": "local", "permissions": "full"})},
		{name: "an empty flag runs in process", args: []string{"--server="}, env: map[string]string{"XDG_CONFIG_HOME": xdg, "FABRO_SERVER": "env:1"},
			want: with(map[string]string{"server": "", "token-file": filepath.Join(home, "file.token"), "model": "file/model", "sandbox": "docker", "permissions": "read-only"})},
		{name: "--config", args: []string{"--config", other}, env: map[string]string{"XDG_CONFIG_HOME": xdg}, want: with(map[string]string{"server": "other:1"})},
		{name: "$FABRO_CONFIG", env: map[string]string{"XDG_CONFIG_HOME": xdg, "FABRO_CONFIG": other}, want: with(map[string]string{"server": "other:1"})},
		{name: "a missing --config file", args: []string{"--config", filepath.Join(dir, "nope.toml")}, wantErr: "config file: open " + filepath.Join(dir, "nope.toml") + ": no such file or directory"},
		{name: "an unknown key", args: []string{"--config", unknown}, wantErr: unknown + `:3: unknown key "colour" (known: server, token_file, model, sandbox, permissions)`},
		{name: "a value of the wrong type", args: []string{"--config", badType}, wantErr: badType + ":2: "},
		{name: "bad syntax", args: []string{"--config", badSyntax}, wantErr: badSyntax + ":2: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"HOME": home}
			if tt.env == nil {
				vars["HOME"] = filepath.Join(dir, "nohome")
			}
			for k, v := range tt.env {
				vars[k] = v
			}
			e, _, _ := goldenEnv(vars)
			fs, _ := commands().find("exec").flagSet(e)
			if _, err := parseArgs(fs, append(tt.args, "PROMPT")); err != nil {
				t.Fatal(err)
			}
			err := applyDefaults(fs, e)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one starting %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for name := range defaults {
				got[name] = fs.Lookup(name).Value.String()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("flag values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigFileErrors: a bad config file is exit 2 with one line naming
// file:line, for every command that reads it; a key that is not a flag of
// the command (model for secret list) is no error.
func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "config.toml")
	os.WriteFile(bad, []byte("server = \"127.0.0.1:1\"\nmodle = \"x\"\n"), 0o644)
	for _, args := range [][]string{{"secret", "list"}, {"exec", "hi"}, {"sessions", "list"}} {
		out, errOut, code := runGolden(t, map[string]string{"FABRO_CONFIG": bad, "FABRO_TOKEN": "t"}, args...)
		want := "fabro " + args[0] + " " + args[1] + ": " + bad + `:2: unknown key "modle" (known: server, token_file, model, sandbox, permissions)` + "\n"
		if args[0] == "exec" {
			want = "fabro exec: " + bad + `:2: unknown key "modle" (known: server, token_file, model, sandbox, permissions)` + "\n"
		}
		if code != exitUsage || out != "" || errOut != want {
			t.Errorf("fabro %v: exit %d, stderr %q; want 2 and %q", args, code, errOut, want)
		}
	}
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestConnectionErrors: every client command says in plain words that no
// server is there and what to do, whether the address came from the
// flag, the environment or the config file.
func TestConnectionErrors(t *testing.T) {
	addr := closedPort(t)
	want := "fabro: no server at " + addr + ": start one with `fabro serve`, or pass --server with the address of a running one\n"
	cfgDir := t.TempDir()
	os.MkdirAll(filepath.Join(cfgDir, "fabro"), 0o755)
	os.WriteFile(filepath.Join(cfgDir, "fabro", "config.toml"), []byte("server = \""+addr+"\"\n"), 0o644)
	commands := [][]string{
		{"secret", "list"}, {"secret", "rm", "X_API_KEY"}, {"token", "list"}, {"models"}, {"providers"},
		{"sessions", "list"}, {"sessions", "show", "s_1"}, {"sessions", "rm", "s_1"}, {"sessions", "resume", "s_1", "go on"}, {"exec", "hi"},
	}
	for _, how := range []string{"flag", "environment", "config file", "no token either"} {
		for _, args := range commands {
			vars := map[string]string{"FABRO_TOKEN": "fabro_test"}
			switch how {
			case "flag":
				args = append(args, "--server", addr)
			case "environment":
				vars["FABRO_SERVER"] = addr
			case "config file":
				vars["XDG_CONFIG_HOME"] = cfgDir
			case "no token either":
				vars = map[string]string{"FABRO_SERVER": addr, "FABRO_DATA_DIR": t.TempDir()}
			}
			out, errOut, code := runGolden(t, vars, args...)
			if code != exitFailure || out != "" || errOut != want && !strings.HasSuffix(errOut, "\n"+want) {
				t.Errorf("%s: fabro %v: exit %d, stdout %q, stderr %q; want 1 and %q", how, args, code, out, errOut, want)
			}
		}
	}
}

// TestSilentServer: a server that accepts connections and never answers
// gets a plain timeout message.
func TestSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, errOut, code := runGolden(t, map[string]string{"FABRO_TOKEN": "t"}, "secret", "list", "--server", l.Addr().String(), "--timeout", "500ms")
	want := "fabro: " + l.Addr().String() + " did not answer within 500ms: check that --server names a running fabro server, or allow longer with --timeout\n"
	if code != exitFailure || errOut != want {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, errOut, want)
	}
}

// TestTokenFileErrors: a token file that cannot be read says so, and
// what to put there.
func TestTokenFileErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.token")
	os.WriteFile(empty, nil, 0o600)
	missing := filepath.Join(t.TempDir(), "missing.token")
	for file, want := range map[string]string{
		missing: "fabro: --token-file: read token file: open " + missing + ": no such file or directory; give a file holding your token (an admin issues one with `fabro token create --name NAME > FILE`)\n",
		empty:   "fabro: --token-file: token file " + empty + " is empty; give a file holding your token (an admin issues one with `fabro token create --name NAME > FILE`)\n",
	} {
		_, errOut, code := runGolden(t, nil, "secret", "list", "--token-file", file)
		if code != exitFailure || errOut != want {
			t.Errorf("exit %d, stderr %q; want 1 and %q", code, errOut, want)
		}
	}
}
