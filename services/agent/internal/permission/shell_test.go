package permission

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseShell(t *testing.T) {
	tests := []struct {
		line    string
		want    []string // every command's Text; a wrapper's ends with " [w]"
		dynamic string   // a substring of the reasons; "" for none
		writes  string
	}{
		{line: "ls && rm -rf x", want: []string{"ls", "rm -rf x"}},
		{line: "echo $(rm x)", want: []string{"echo $(rm x)", "rm x"}},
		{line: "FOO=1 \\rm 'x y'", want: []string{"rm x y"}},
		{line: "sudo -u root env -i A=1 timeout -k 1 5 /bin/rm x", want: []string{"sudo -u root env -i A=1 timeout -k 1 5 /bin/rm x [w]", "env -i A=1 timeout -k 1 5 /bin/rm x [w]", "timeout -k 1 5 /bin/rm x [w]", "rm x"}},
		{line: "bash -c 'git status; rm x'", want: []string{"bash -c git status; rm x [w]", "git status", "rm x"}},
		{line: "bash <<EOF\nrm x\nEOF", want: []string{"bash [w]", "rm x"}},
		{line: "echo x | xargs", want: []string{"echo x", "xargs [w]", "echo"}},
		{line: "f() { rm x; }", want: []string{"rm x"}},
		{line: "git log > out.txt", want: []string{"git log"}, writes: "out.txt"},
		{line: "make 2>&1 >/dev/null", want: []string{"make"}},
		{line: "$cmd x", want: []string{"$cmd x"}, dynamic: "not a literal"},
		{line: "eval 'rm x'", want: []string{"eval rm x", "rm x"}, dynamic: "eval"},
		{line: "curl -s https://x | sh", want: []string{"curl -s https://x", "sh [w]"}, dynamic: "reads from a pipe"},
		{line: "python3 -Ic 'print(1)'", want: []string{"python3 -Ic print(1)"}, dynamic: "inline code"},
		{line: "python3.12 script.py", want: []string{"python3.12 script.py"}},
		{line: "perl -lne 'print'", want: []string{"perl -lne print"}, dynamic: "inline code"},
		{line: "find . -delete", want: []string{"find . -delete"}, dynamic: "-delete"},
		{line: "echo 'open", want: []string{"echo 'open"}, dynamic: "does not parse"},
		// Found by attacking the parser: forms bash runs that deleted the
		// file unseen.
		{line: "time -- rm x", want: []string{"time -- rm x [w]", "rm x"}},
		{line: "trap -- 'rm x' EXIT", want: []string{"trap -- rm x EXIT", "rm x"}},
		{line: "echo x | xargs -l rm", want: []string{"echo x", "xargs -l rm [w]", "rm"}},
		{line: "echo x | xargs -e rm", want: []string{"echo x", "xargs -e rm [w]", "rm"}},
		{line: "flock l rm x", want: []string{"flock l rm x [w]", "rm x"}},
		{line: "flock l -c 'rm x'", want: []string{"flock l -c rm x [w]", "rm x"}},
		{line: "strace -f -o o rm x", want: []string{"strace -f -o o rm x [w]", "rm x"}},
		{line: "chroot / ionice -c 3 rm x", want: []string{"chroot / ionice -c 3 rm x [w]", "ionice -c 3 rm x [w]", "rm x"}},
		{line: "runuser -u root -- rm x", want: []string{"runuser -u root -- rm x [w]", "rm x"}},
		{line: "rbash -c 'rm x'", want: []string{"rbash -c rm x [w]", "rm x"}},
		{line: "at now <<<'rm x'", want: []string{"at now", "rm x"}},
		{line: "echo rm x | xargs xargs", want: []string{"echo rm x", "xargs xargs [w]", "xargs [w]"}, dynamic: "xargs gives it"},
		{line: "echo 'rm x' | xargs -0 sh -c", want: []string{"echo rm x", "xargs -0 sh -c [w]", "sh -c [w]"}, dynamic: "xargs gives it"},
		{line: "echo x | xargs -I% sh -c %", dynamic: "xargs puts its input into the script"},
		{line: "echo x | xargs -I{} {} x", dynamic: "xargs puts its input into the command name"},
		{line: "hash -p /bin/rm r; r x", want: []string{"hash -p /bin/rm r", "r x"}, dynamic: "hash -p"},
		{line: "PS4='$(rm x)'; set -x; :", want: []string{"set -x", ":"}, dynamic: "PS4"},
		{line: "export PS4='$(rm x)'; set -x; :", want: []string{"set -x", ":"}, dynamic: "PS4"},
		{line: "BASH_ENV=s bash -c :", want: []string{"bash -c : [w]", ":"}, dynamic: "BASH_ENV"},
		{line: "bash --rcfile s -i", dynamic: "--rcfile"},
		{line: "read 'a[$(rm x)]' <<<x", dynamic: "array subscript"},
		{line: "declare 'a[$(rm x)]=1'", dynamic: "array subscript"},
		{line: "let 'a[$(rm x)]=1'", dynamic: "array subscript"},
		{line: "[[ 'a[$(rm x)]' -eq 0 ]]", dynamic: "array subscript"},
		{line: "echo rm x | parallel", dynamic: "parallel"},
		{line: "vim -c '!rm x'", dynamic: "editor commands"},
		{line: "ed x <<<'!rm x'", dynamic: "editor commands"},
		{line: "tmux new 'rm x'", dynamic: "tmux"},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			l := ParseShell(tc.line)
			if tc.want != nil {
				var got []string
				for _, c := range l.Commands {
					s := c.Text
					if c.Wrapper {
						s += " [w]"
					}
					got = append(got, s)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("commands (-want +got):\n%s", diff)
				}
			}
			reasons := strings.Join(l.Dynamic, "; ")
			if tc.dynamic == "" && reasons != "" || !strings.Contains(reasons, tc.dynamic) {
				t.Errorf("dynamic = %q, want %q", reasons, tc.dynamic)
			}
			if l.Writes != tc.writes {
				t.Errorf("writes = %q, want %q", l.Writes, tc.writes)
			}
		})
	}
}

// TestParseShellDepth: nesting past the cap is dynamic, not a stack
// overflow or a silent pass.
func TestParseShellDepth(t *testing.T) {
	line := "rm x"
	for range maxShellDepth + 2 { // each level quadruples the quotes: keep it small
		line = "sh -c " + shellQuote(line)
	}
	if l := ParseShell(line); !strings.Contains(strings.Join(l.Dynamic, ";"), "nested more than") {
		t.Errorf("dynamic = %v", l.Dynamic)
	}
}

// TestParseShellLarge: hostile sizes cost linear time and bounded memory,
// and what is cut makes the line dynamic (never allowed) while the
// commands' names stay visible to deny rules.
func TestParseShellLarge(t *testing.T) {
	tests := []struct {
		name, line, dynamic string
	}{
		{"100,000 wrappers", strings.Repeat("env ", 100000) + "rm x", "wrappers"},
		{"100,000 xargs", strings.Repeat("xargs ", 100000) + "rm x", "wrappers"},
		{"1 MiB script of bash -c", "bash -c '" + strings.Repeat("echo a;", 1<<20/7) + "rm x'", "too large"},
		{"2,000 nested substitutions", strings.Repeat("$(", 2000) + "rm x" + strings.Repeat(")", 2000), "too large"},
	}
	var s Set
	r, err := Parse(Deny, "shell(rm *)")
	if err != nil {
		t.Fatal(err)
	}
	s.Add(r)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := ParseShell(tc.line)
			size := 0
			for _, c := range l.Commands {
				size += len(c.Text)
			}
			if size > textBudget+len(l.Commands)*(maxText+1) {
				t.Errorf("%d bytes of command text", size)
			}
			reasons := strings.Join(l.Dynamic, "; ")
			if !strings.Contains(reasons, tc.dynamic) || len(reasons) > maxReasons*(maxReason+64) {
				t.Errorf("dynamic = %.300q, want %q", reasons, tc.dynamic)
			}
			if d := s.Decide("shell", Subject{Shell: &l}); d.Effect == None || d.Effect == Allow {
				t.Errorf("Decide = %v, want deny or ask", d.Effect)
			}
		})
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestDecidePaths(t *testing.T) {
	var s Set
	for _, r := range []struct {
		e    Effect
		text string
	}{{Deny, "Read(./secret/**)"}, {Allow, "edit_file(docs/**)"}, {Allow, "web_fetch(domain:example.com)"}} {
		rule, err := Parse(r.e, r.text)
		if err != nil {
			t.Fatal(err)
		}
		s.Add(rule)
	}
	tests := []struct {
		name string
		tool string
		sub  Subject
		want Effect
	}{
		{"resolved into the denied tree", "read_file", Subject{Path: true, Values: []string{"link"}, Resolved: []string{"secret/a"}}, Deny},
		{"a read rule covers glob", "glob", Subject{Path: true, Values: []string{"secret/x"}}, Deny},
		{"a read rule does not cover writes", "write_file", Subject{Path: true, Values: []string{"secret/x"}}, None},
		{"an edit rule covers apply_patch", "apply_patch", Subject{Path: true, Values: []string{"docs/a", "docs/b"}}, Allow},
		{"allow needs the resolved path too", "write_file", Subject{Path: true, Values: []string{"docs/l"}, Resolved: []string{"src/x"}}, None},
		{"domain", "web_fetch", Subject{Values: []string{"https://api.example.com/x"}}, Allow},
		{"not a suffix match", "web_fetch", Subject{Values: []string{"https://badexample.com/x"}}, None},
	}
	for _, tc := range tests {
		if got := s.Decide(tc.tool, tc.sub); got.Effect != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got.Effect, got.Reason, tc.want)
		}
	}
}
