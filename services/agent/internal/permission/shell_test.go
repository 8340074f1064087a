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
