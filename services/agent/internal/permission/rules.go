// Package permission holds the allow, ask and deny rules of a session:
// "tool" or "tool(pattern)" in the spirit of Claude Code's permission
// rules. Shell commands are parsed (ParseShell) so a rule sees every
// command the line would run; paths are matched as written and where they
// lead. See Set.Decide for the order.
package permission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"reflect"
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
	name         string         // the tool name as written
	// pathRe matches path subjects ("*" stays within a segment), anyRe
	// every other subject ("*" matches anything), shellRe a shell command
	// (a pattern ending in " *" or ":*" also matches the command alone:
	// "rm *" is rm with any arguments or none); nil: every call.
	pathRe, anyRe, shellRe *regexp.Regexp
	// lit is the pattern's literal start: a command that does not begin
	// with it is rejected without a regexp.
	lit string
	// domain is web_fetch(domain:example.com)'s host.
	domain string
	// Warning says what of the rule cannot be honoured as written; the
	// rule still applies.
	Warning string
}

// claudeTools maps Claude Code's tool names in rules onto fabro's, so a
// Claude Code settings file means in fabro what it means there.
var claudeTools = map[string]string{
	"Bash": "shell", "Read": "read_file", "Write": "write_file", "Edit": "edit_file", "MultiEdit": "edit_file",
	"NotebookEdit": "edit_file", "Grep": "grep", "Glob": "glob", "LS": "list_dir", "WebFetch": "web_fetch", "WebSearch": "web_search",
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
	if n, ok := claudeTools[name]; ok {
		name = n
		if hasPattern && (readTools[name] || writeTools[name]) {
			pattern, r.Warning = claudePath(pattern)
		}
	} else if strings.HasPrefix(name, "mcp__") && strings.Count(name, "__") == 1 {
		name += "__*" // Claude Code's mcp__server: every tool of the server
	}
	r.name = name
	r.tool = regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(name), `\*`, ".*") + "$")
	if hasPattern {
		if strings.TrimSpace(pattern) == "" {
			return nil, errors.New("empty pattern: write the tool name alone to match every call")
		}
		if d, ok := strings.CutPrefix(pattern, "domain:"); ok {
			d = strings.ToLower(strings.TrimSpace(d))
			if d == "" || strings.ContainsAny(d, "/: ") {
				return nil, fmt.Errorf("bad domain %q: a host name such as example.com", d)
			}
			r.domain = d
		}
		var err error
		if r.pathRe, err = globRegexp(pattern, true); err != nil {
			return nil, err
		}
		if r.anyRe, err = globRegexp(pattern, false); err != nil {
			return nil, err
		}
		// A command's words are separated by single spaces.
		sp := strings.Join(strings.Fields(pattern), " ")
		if p, ok := strings.CutSuffix(sp, ":*"); ok {
			sp = p + " *"
		}
		bare, prefix := strings.CutSuffix(sp, " *")
		if !prefix {
			bare = sp
		}
		re, err := globRegexp(bare, false)
		if err != nil {
			return nil, err
		}
		if prefix {
			re = regexp.MustCompile(strings.TrimSuffix(re.String(), "$") + "(?: .*)?$")
		}
		r.shellRe = re
		if i := strings.IndexAny(bare, `*?[\`); i >= 0 {
			r.lit = bare[:i]
		} else {
			r.lit = bare
		}
	}
	return r, nil
}

// claudePath reads a Claude Code path pattern: "./p" and "p" are relative
// to the working directory, "/p" to the project root (the working
// directory here), "//p" absolute; "~/p" (the home directory) has no
// meaning in a sandbox.
func claudePath(p string) (string, string) {
	switch {
	case strings.HasPrefix(p, "//"):
		return p[1:], ""
	case strings.HasPrefix(p, "~/") || p == "~":
		return p, "a path under ~ (the home directory) cannot be located in the sandbox; the rule matches only the literal path " + p
	case strings.HasPrefix(p, "./"):
		return strings.TrimPrefix(p, "./"), ""
	case strings.HasPrefix(p, "/"):
		return strings.TrimPrefix(p, "/"), ""
	}
	return p, ""
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

// The tools that read and that write files: a path rule naming one of a
// kind covers them all, so "read_file(secret/**)" also keeps grep, glob
// and list_dir out of secret/.
var (
	readTools  = map[string]bool{"read_file": true, "read_many_files": true, "grep": true, "glob": true, "list_dir": true}
	writeTools = map[string]bool{"write_file": true, "edit_file": true, "apply_patch": true}
)

// applies reports whether the rule is about the tool: by its name, or by
// the kind of tool it names.
func (r *Rule) applies(tool string) bool {
	if r.tool.MatchString(tool) {
		return true
	}
	return readTools[r.name] && readTools[tool] || writeTools[r.name] && writeTools[tool]
}

// Subject is what a rule's pattern matches in one call.
type Subject struct {
	// Values are the call's main arguments: its paths (one per file for
	// apply_patch and read_many_files), cleaned and relative to the working
	// directory when under it; the URL; the compact JSON of other tools.
	Values []string
	// Resolved are the paths where Values lead inside the sandbox (links
	// followed), in the same form; set by the caller that can resolve them.
	Resolved []string
	// Path says Values are paths.
	Path bool
	// Shell is the parsed command line of a shell call.
	Shell *Line
}

// Mode is what a call no rule decides gets.
type Mode int

// Modes.
const (
	ModeDefault           Mode = iota // the permission level decides
	ModeAsk                           // every call no allow rule lets through asks
	ModeDenyUnlessAllowed             // every call no allow rule lets through is refused (CI)
)

// ParseMode reads a default_mode.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "default":
		return ModeDefault, nil
	case "ask":
		return ModeAsk, nil
	case "deny_unless_allowed":
		return ModeDenyUnlessAllowed, nil
	}
	return 0, fmt.Errorf("default_mode %q: default, ask or deny_unless_allowed", s)
}

func (m Mode) String() string {
	switch m {
	case ModeAsk:
		return "ask"
	case ModeDenyUnlessAllowed:
		return "deny_unless_allowed"
	}
	return "default"
}

// Set is the rules of a session.
type Set struct {
	deny, ask, allow []*Rule
	// Mode decides what no rule does; ModeSource names where it was set.
	Mode       Mode
	ModeSource string
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

// Empty reports a set that decides nothing: no rules, the default mode.
func (s *Set) Empty() bool {
	return s == nil || len(s.deny)+len(s.ask)+len(s.allow) == 0 && s.Mode == ModeDefault
}

// Hidden reports a tool every call of which is denied: it is not offered.
func (s *Set) Hidden(tool string) bool {
	if s == nil {
		return false
	}
	for _, r := range s.deny {
		if !r.HasPattern() && r.applies(tool) {
			return true
		}
	}
	return false
}

// Lifts reports a tool some allow rule names: it is offered whatever the
// permission level, and each call the rule allows runs.
func (s *Set) Lifts(tool string) bool {
	if s == nil || s.Hidden(tool) {
		return false
	}
	for _, r := range s.allow {
		if r.applies(tool) {
			return true
		}
	}
	return false
}

// NeedsPaths reports whether any rule would judge the tool's paths, so a
// caller resolves them only then.
func (s *Set) NeedsPaths(tool string) bool {
	if s == nil || !readTools[tool] && !writeTools[tool] {
		return false
	}
	for _, l := range [][]*Rule{s.deny, s.ask, s.allow} {
		for _, r := range l {
			if r.HasPattern() && r.applies(tool) {
				return true
			}
		}
	}
	return false
}

// Decision is what the rules decide about one call.
type Decision struct {
	Effect Effect
	// Rule decided it; nil when the default mode or a dynamic command did.
	Rule *Rule
	// Reason says why, for the model, the events and the person asked:
	// the rule and its source and what it matched.
	Reason string
	// Key is what an "allow for session" answer covers: the ask rule that
	// asked, or for the default mode and dynamic commands the call's
	// subject itself.
	Key string
}

// Decide evaluates a call, in this order: a deny rule that matches; an ask
// rule with a pattern that matches; for a shell line whose commands cannot
// all be named while some deny or ask rule names shell commands, an ask;
// an allow rule that matches everything the call does; an ask rule
// without a pattern; the default mode. A deny or ask rule matches when any
// command or path (as written or resolved) matches; an allow rule only
// when every one does.
func (s *Set) Decide(tool string, sub Subject) Decision {
	if s.Empty() {
		return Decision{}
	}
	for _, r := range s.deny {
		if what, ok := r.matchAny(tool, sub); ok {
			return Decision{Effect: Deny, Rule: r, Reason: r.describe(what)}
		}
	}
	for _, r := range s.ask {
		if r.HasPattern() {
			if what, ok := r.matchAny(tool, sub); ok {
				return Decision{Effect: Ask, Rule: r, Reason: r.describe(what), Key: r.key()}
			}
		}
	}
	if sub.Shell != nil && len(sub.Shell.Dynamic) > 0 {
		if r := s.namesCommands(tool); r != nil {
			return Decision{Effect: Ask, Key: tool + "\x00" + strings.Join(sub.Values, "\x00"),
				Reason: fmt.Sprintf("the command cannot be judged by name (%s) while the rule %q (%s) names shell commands",
					strings.Join(sub.Shell.Dynamic, "; "), r.Text, r.Source)}
		}
	}
	if r, reason, ok := s.allowed(tool, sub); ok {
		return Decision{Effect: Allow, Rule: r, Reason: reason}
	}
	for _, r := range s.ask {
		if !r.HasPattern() && r.applies(tool) {
			return Decision{Effect: Ask, Rule: r, Reason: r.describe(""), Key: r.key()}
		}
	}
	key := tool + "\x00" + strings.Join(sub.Values, "\x00")
	switch s.Mode {
	case ModeAsk:
		return Decision{Effect: Ask, Key: key, Reason: "default_mode ask (" + s.ModeSource + "): no allow rule matches this call"}
	case ModeDenyUnlessAllowed:
		return Decision{Effect: Deny, Reason: "default_mode deny_unless_allowed (" + s.ModeSource + "): no allow rule matches this call"}
	}
	return Decision{}
}

// namesCommands returns a deny or ask rule with a pattern about the shell
// tool, nil when none.
func (s *Set) namesCommands(tool string) *Rule {
	for _, l := range [][]*Rule{s.deny, s.ask} {
		for _, r := range l {
			if r.HasPattern() && r.applies(tool) {
				return r
			}
		}
	}
	return nil
}

func (r *Rule) key() string { return "rule\x00" + r.Text + "\x00" + r.Source }

func (r *Rule) describe(what string) string {
	if what == "" {
		return fmt.Sprintf("the rule %q (%s)", r.Text, r.Source)
	}
	return fmt.Sprintf("the rule %q (%s), which matches %s", r.Text, r.Source, what)
}

// matchAny: a deny or ask rule matches when any value matches.
func (r *Rule) matchAny(tool string, sub Subject) (string, bool) {
	if !r.applies(tool) {
		return "", false
	}
	if !r.HasPattern() {
		return "", true
	}
	if sub.Shell != nil {
		for _, c := range sub.Shell.Commands {
			if r.matchCommand(c.Text) {
				return fmt.Sprintf("%q", c.Text), true
			}
		}
		return "", false
	}
	for _, v := range sub.Values {
		if r.matchValue(v, sub.Path) {
			return fmt.Sprintf("%q", v), true
		}
	}
	for i, v := range sub.Resolved {
		if r.matchValue(v, sub.Path) {
			return fmt.Sprintf("%q, where %q leads", v, nth(sub.Values, i)), true
		}
	}
	return "", false
}

// allowed reports whether allow rules cover everything the call does:
// every command of a shell line (wrappers aside; nothing dynamic, no
// redirection into a file), every path as written and resolved, each by
// some allow rule. r is the first rule used, reason names them all.
func (s *Set) allowed(tool string, sub Subject) (*Rule, string, bool) {
	var used []*Rule
	use := func(r *Rule) {
		for _, u := range used {
			if u == r {
				return
			}
		}
		used = append(used, r)
	}
	cover := func(match func(*Rule) bool) bool {
		for _, r := range s.allow {
			if r.applies(tool) && (!r.HasPattern() || match(r)) {
				use(r)
				return true
			}
		}
		return false
	}
	switch {
	case sub.Shell != nil:
		if len(sub.Shell.Dynamic) > 0 {
			return nil, "", false
		}
		if sub.Shell.Writes != "" {
			// Only a rule for every call of the tool vouches for a write.
			return nil, "", cover(func(*Rule) bool { return false })
		}
		n := 0
		for _, c := range sub.Shell.Commands {
			if c.Wrapper {
				continue
			}
			if !cover(func(r *Rule) bool { return r.matchCommand(c.Text) }) {
				return nil, "", false
			}
			n++
		}
		if n == 0 && !cover(func(*Rule) bool { return false }) {
			return nil, "", false
		}
	case len(sub.Values) == 0:
		if !cover(func(*Rule) bool { return false }) {
			return nil, "", false
		}
	default:
		for _, vs := range [][]string{sub.Values, sub.Resolved} {
			for _, v := range vs {
				if !cover(func(r *Rule) bool { return r.matchValue(v, sub.Path) }) {
					return nil, "", false
				}
			}
		}
	}
	texts := make([]string, len(used))
	for i, r := range used {
		texts[i] = fmt.Sprintf("%q (%s)", r.Text, r.Source)
	}
	what := "the rule "
	if len(used) > 1 {
		what = "the rules "
	}
	return used[0], what + strings.Join(texts, ", "), true
}

func nth(vs []string, i int) string {
	if i < len(vs) {
		return vs[i]
	}
	return ""
}

func (r *Rule) matchCommand(text string) bool {
	if !strings.HasPrefix(text, r.lit) {
		return false
	}
	return r.shellRe.MatchString(text)
}

func (r *Rule) matchValue(v string, isPath bool) bool {
	if r.domain != "" {
		return domainMatches(v, r.domain)
	}
	if isPath {
		return r.pathRe.MatchString(v)
	}
	return r.anyRe.MatchString(v)
}

// domainMatches reports a URL on the domain or a subdomain of it.
func domainMatches(raw, domain string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return false
	}
	h := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if d, ok := strings.CutPrefix(domain, "*."); ok {
		return strings.HasSuffix(h, "."+d)
	}
	return h == domain || strings.HasSuffix(h, "."+domain)
}

// SubjectOf extracts the subject of a call from its JSON arguments. workDir
// turns absolute paths under it into relative ones, so "docs/**" matches
// "/work/docs/a.md" in a sandbox working at /work.
func SubjectOf(tool, arguments, workDir string) Subject {
	var args map[string]any
	_ = json.Unmarshal([]byte(arguments), &args)
	str := func(keys ...string) string {
		for _, k := range keys {
			var v string
			if field(arguments, k, &v) {
				return v
			}
		}
		return ""
	}
	switch tool {
	case "shell":
		cmd := str("command")
		line := ParseShell(cmd)
		return Subject{Values: []string{cmd}, Shell: &line}
	case "read_file", "write_file", "edit_file":
		return pathSubject(workDir, str("file_path", "path"))
	case "grep", "glob", "list_dir":
		p := str("path", "dir_path")
		if p == "" {
			p = "."
		}
		return pathSubject(workDir, p)
	case "read_many_files":
		var ps []string
		field(arguments, "paths", &ps)
		return pathSubject(workDir, ps...)
	case "apply_patch":
		patch := str("input", "patch")
		if args == nil {
			patch = arguments // a freeform call
		}
		return pathSubject(workDir, PatchPaths(patch)...)
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

// field decodes the argument key into v as the tools decode their
// arguments (encoding/json into a struct): a key matches in any case and
// the last of several wins, so {"COMMAND": "rm x"} is judged as the
// command the tool runs. It reports whether the key was present.
func field(arguments, key string, v any) bool {
	t := reflect.StructOf([]reflect.StructField{{
		Name: "V", Type: reflect.PointerTo(reflect.TypeOf(v).Elem()), Tag: reflect.StructTag(`json:"` + key + `"`),
	}})
	p := reflect.New(t)
	_ = json.Unmarshal([]byte(arguments), p.Interface())
	f := p.Elem().Field(0)
	if f.IsNil() {
		return false
	}
	reflect.ValueOf(v).Elem().Set(f.Elem())
	return true
}

// PatchPaths lists every file a v4a patch adds, updates, deletes or moves
// to.
func PatchPaths(patch string) []string {
	var ps []string
	for line := range strings.Lines(patch) {
		line = strings.TrimSpace(line)
		for _, p := range []string{"*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "} {
			if f, ok := strings.CutPrefix(line, p); ok {
				ps = append(ps, f)
			}
		}
	}
	return ps
}

func pathSubject(workDir string, ps ...string) Subject {
	sub := Subject{Path: true}
	for _, p := range ps {
		if p == "" {
			continue
		}
		sub.Values = append(sub.Values, Rel(workDir, p))
	}
	return sub
}

// Rel is a path as rules match it: cleaned, relative to workDir when it is
// under it (workDir itself is "."), else absolute.
func Rel(workDir, p string) string {
	c := path.Clean(p)
	if workDir == "" || !path.IsAbs(c) {
		return c
	}
	wd := path.Clean(workDir)
	if c == wd {
		return "."
	}
	if rel, ok := strings.CutPrefix(c, wd+"/"); ok {
		return rel
	}
	return c
}

// Concealed says why a path a search or listing found is kept from the
// model: a deny or ask rule about reading matches it (as written or
// resolved); "" when none does. A listing cannot ask per entry, so an ask
// rule hides the entry too; reading it then asks.
func (s *Set) Concealed(sub Subject) string {
	if s == nil {
		return ""
	}
	for _, l := range [][]*Rule{s.deny, s.ask} {
		for _, r := range l {
			if !r.HasPattern() {
				continue
			}
			// The reason names the rule, not the path: a hidden entry's
			// name is not shown either.
			if _, ok := r.matchAny("read_file", sub); ok {
				return r.describe("")
			}
		}
	}
	return ""
}
