// Package permission holds the allow, ask and deny rules of a session:
// "tool" or "tool(pattern)" in the spirit of Claude Code's permission
// rules, evaluated deny first, then ask, then allow.
package permission

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Effect is what a rule decides.
type Effect int

// Effects, in evaluation order after None.
const (
	None  Effect = iota // no rule matched: the permission level decides
	Deny                // the call gets an error result
	Ask                 // the call waits for an approval
	Allow               // the call runs without asking
)

func (e Effect) String() string {
	switch e {
	case Deny:
		return "deny"
	case Ask:
		return "ask"
	case Allow:
		return "allow"
	}
	return "none"
}

// Rule is one parsed rule.
type Rule struct {
	Effect Effect
	// Text is the rule as written, Source where (file:line, or a field).
	Text, Source string
	tool         *regexp.Regexp // tool-name glob
	// pathRe matches path subjects ("*" stays within a segment), anyRe
	// every other subject ("*" matches anything); nil: every call.
	pathRe, anyRe *regexp.Regexp
}

// HasPattern reports whether the rule names a pattern, not a whole tool.
func (r *Rule) HasPattern() bool { return r.anyRe != nil }

var toolName = regexp.MustCompile(`^[A-Za-z0-9_*-]+$`)

// Parse parses one rule.
func Parse(effect Effect, text string) (*Rule, error) {
	t := strings.TrimSpace(text)
	r := &Rule{Effect: effect, Text: text}
	name, pattern, hasPattern := t, "", false
	if i := strings.IndexByte(t, '('); i >= 0 {
		if !strings.HasSuffix(t, ")") {
			return nil, errors.New(`a pattern must end with ")"`)
		}
		name, pattern, hasPattern = t[:i], t[i+1:len(t)-1], true
	} else if strings.ContainsRune(t, ')') {
		return nil, errors.New(`unbalanced ")"`)
	}
	if !toolName.MatchString(name) {
		return nil, fmt.Errorf("bad tool name %q (letters, digits, _, - and * only)", name)
	}
	r.tool = regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(name), `\*`, ".*") + "$")
	if hasPattern {
		if strings.TrimSpace(pattern) == "" {
			return nil, errors.New("empty pattern: write the tool name alone to match every call")
		}
		var err error
		if r.pathRe, err = globRegexp(pattern, true); err != nil {
			return nil, err
		}
		if r.anyRe, err = globRegexp(pattern, false); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// globRegexp compiles a glob: "**" any run, "*" any run (without "/" when
// inPath), "?" one character, "[...]" a class, "\x" a literal x.
func globRegexp(p string, inPath bool) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteByte('^')
	star, one := ".*", "."
	if inPath {
		star, one = "[^/]*", "[^/]"
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			if i+1 < len(p) && p[i+1] == '*' {
				i++
				if inPath && i+1 < len(p) && p[i+1] == '/' { // "**/" also matches no directory
					i++
					b.WriteString("(?:.*/)?")
					continue
				}
				b.WriteString(".*")
				continue
			}
			b.WriteString(star)
		case '?':
			b.WriteString(one)
		case '\\':
			if i+1 == len(p) {
				return nil, errors.New(`the pattern ends with "\"`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		case '[':
			j := strings.IndexByte(p[i+1:], ']')
			if j < 0 {
				return nil, errors.New(`unclosed "[" in the pattern`)
			}
			class := p[i+1 : i+1+j]
			if class == "" || class == "!" || class == "^" {
				return nil, errors.New(`empty "[]" class in the pattern`)
			}
			if class[0] == '!' {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	b.WriteByte('$')
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("bad pattern: %v", err)
	}
	return re, nil
}

// Subject is what a rule's pattern matches in one call.
type Subject struct {
	// Values are the call's main arguments (one per path for apply_patch
	// and read_many_files; the segments of a compound shell command).
	Values []string
	// Path says Values are paths; Opaque says the command holds shell
	// syntax (substitution, redirection) no allow rule may vouch for.
	Path, Opaque bool
}

// Set is the rules of a session.
type Set struct {
	deny, ask, allow []*Rule
}

// Add appends parsed rules.
func (s *Set) Add(rules ...*Rule) {
	for _, r := range rules {
		switch r.Effect {
		case Deny:
			s.deny = append(s.deny, r)
		case Ask:
			s.ask = append(s.ask, r)
		case Allow:
			s.allow = append(s.allow, r)
		}
	}
}

// Empty reports a set without rules.
func (s *Set) Empty() bool { return s == nil || len(s.deny)+len(s.ask)+len(s.allow) == 0 }

// Hidden reports a tool every call of which is denied: it is not offered.
func (s *Set) Hidden(tool string) bool {
	if s == nil {
		return false
	}
	for _, r := range s.deny {
		if !r.HasPattern() && r.tool.MatchString(tool) {
			return true
		}
	}
	return false
}

// Decide evaluates a call: the first matching deny rule, else the first
// ask rule, else the first allow rule. A deny or ask rule matches when any
// value matches; an allow rule only when every value does and the command
// is not opaque.
func (s *Set) Decide(tool string, sub Subject) (Effect, *Rule) {
	if s.Empty() {
		return None, nil
	}
	for _, r := range s.deny {
		if r.matches(tool, sub, false) {
			return Deny, r
		}
	}
	for _, r := range s.ask {
		if r.matches(tool, sub, false) {
			return Ask, r
		}
	}
	for _, r := range s.allow {
		if r.matches(tool, sub, true) {
			return Allow, r
		}
	}
	return None, nil
}

func (r *Rule) matches(tool string, sub Subject, all bool) bool {
	if !r.tool.MatchString(tool) {
		return false
	}
	if !r.HasPattern() {
		return true
	}
	if all && sub.Opaque || len(sub.Values) == 0 {
		return false
	}
	re := r.anyRe
	if sub.Path {
		re = r.pathRe
	}
	for _, v := range sub.Values {
		if re.MatchString(v) != all {
			return !all
		}
	}
	return all
}

// SubjectOf extracts the subject of a call from its JSON arguments. workDir
// turns absolute paths under it into relative ones, so "docs/**" matches
// "/work/docs/a.md" in a sandbox working at /work.
func SubjectOf(tool, arguments, workDir string) Subject {
	var args map[string]any
	_ = json.Unmarshal([]byte(arguments), &args)
	str := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := args[k].(string); ok {
				return v
			}
		}
		return ""
	}
	switch tool {
	case "shell", "Bash":
		return shellSubject(str("command"))
	case "read_file", "write_file", "edit_file", "Read", "Write", "Edit":
		return pathSubject(workDir, str("file_path", "path"))
	case "grep", "glob", "list_dir", "Grep", "Glob":
		p := str("path", "dir_path")
		if p == "" {
			p = "."
		}
		return pathSubject(workDir, p)
	case "read_many_files":
		var ps []string
		if l, ok := args["paths"].([]any); ok {
			for _, v := range l {
				if s, ok := v.(string); ok {
					ps = append(ps, s)
				}
			}
		}
		return pathSubject(workDir, ps...)
	case "apply_patch":
		patch := str("input", "patch")
		if args == nil {
			patch = arguments // a freeform call
		}
		var ps []string
		for line := range strings.Lines(patch) {
			line = strings.TrimSpace(line)
			for _, p := range []string{"*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "} {
				if f, ok := strings.CutPrefix(line, p); ok {
					ps = append(ps, f)
				}
			}
		}
		return pathSubject(workDir, ps...)
	case "web_fetch":
		return Subject{Values: []string{str("url")}}
	case "web_search":
		return Subject{Values: []string{str("query")}}
	}
	var b []byte
	if args != nil {
		b, _ = json.Marshal(args) // compact, keys sorted
	} else {
		b = []byte(arguments)
	}
	return Subject{Values: []string{string(b)}}
}

func pathSubject(workDir string, ps ...string) Subject {
	sub := Subject{Path: true}
	for _, p := range ps {
		if p == "" {
			continue
		}
		c := path.Clean(p)
		if workDir != "" && path.IsAbs(c) {
			if rel, ok := strings.CutPrefix(c, path.Clean(workDir)+"/"); ok {
				c = rel
			} else if c == path.Clean(workDir) {
				c = "."
			}
		}
		sub.Values = append(sub.Values, c)
	}
	return sub
}

// shellSubject splits a command on ; && || | & and newlines, so a deny rule
// sees every command of a compound one; substitutions, redirections and
// subshells make it opaque to allow rules.
func shellSubject(cmd string) Subject {
	sub := Subject{}
	if strings.ContainsAny(cmd, "`<>(){}") || strings.Contains(cmd, "$(") {
		sub.Opaque = true
	}
	var cur strings.Builder
	flush := func() {
		// Collapsed whitespace: "rm  -rf" is still "rm -rf".
		if s := strings.Join(strings.Fields(cur.String()), " "); s != "" {
			sub.Values = append(sub.Values, s)
		}
		cur.Reset()
	}
	for i := 0; i < len(cmd); i++ {
		switch cmd[i] {
		case ';', '|', '&', '\n':
			flush()
		default:
			cur.WriteByte(cmd[i])
		}
	}
	flush()
	if len(sub.Values) == 0 {
		sub.Values = []string{""}
	}
	return sub
}
