package permission

import (
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// maxShellDepth caps how deeply "bash -c", eval and here-documents are
// parsed again; a line nested deeper is dynamic.
const maxShellDepth = 8

// Command is one simple command a shell line would run, as rules see it.
type Command struct {
	// Name is the command's name without its directory, quotes, escapes,
	// assignments and wrappers ("/usr/bin/env FOO=1 \rm" is "rm").
	Name string
	// Text is Name and the arguments, each unquoted when it is a literal
	// and as written when it is not ("$f"), joined by single spaces: what
	// a shell rule's pattern matches.
	Text string
	// Wrapper is a command that only runs another one found in the line
	// (env, sudo, timeout, bash -c 'literal'): deny and ask rules see it,
	// allow rules judge the command it runs.
	Wrapper bool
}

// Line is what a shell command line would run.
type Line struct {
	// Commands are every simple command found: in lists, pipelines,
	// subshells, groups, compound commands, functions, command and process
	// substitutions, and the scripts given to shells (bash -c, a here-string
	// fed to sh), eval and trap.
	Commands []Command
	// Dynamic says why some of what the line runs has no name a rule could
	// match: a name that is not a literal, eval, source, an interpreter
	// given code, find -exec. Empty when every command is named.
	Dynamic []string
	// Writes names a redirection into a file ("> out.txt"): no allow rule
	// of a command vouches for where its output goes.
	Writes string
}

// ParseShell finds every simple command the line would run.
func ParseShell(src string) Line {
	a := &analyzer{}
	a.line(src, 0)
	return a.out
}

type analyzer struct {
	out Line
	// fed and repl describe the command being analyzed: xargs adds words
	// from its input (in place of repl when that is set).
	fed  bool
	repl string
	size int // bytes of the commands' texts
}

// Limits that keep a hostile line (20,000 nested $(, 100,000 wrappers)
// from costing quadratic time and memory: past them a command's text is
// cut (its name and start still seen by deny rules) and the line is
// dynamic, so no allow rule vouches for it.
const (
	maxReasons  = 8
	maxReason   = 200     // bytes of a reason
	maxText     = 4 << 10 // bytes of one command's text once over budget
	textBudget  = 1 << 20 // bytes of all commands' texts
	maxWrappers = 32      // wrappers in one command
)

// clip cuts s to a reason's length before it is copied into one.
func clip(s string) string {
	if len(s) > maxReason {
		return s[:maxReason] + "…"
	}
	return s
}

func (a *analyzer) dynamic(why string) {
	why = clip(why)
	for _, d := range a.out.Dynamic {
		if d == why {
			return
		}
	}
	if len(a.out.Dynamic) < maxReasons {
		a.out.Dynamic = append(a.out.Dynamic, why)
	}
}

// line parses src and analyzes every statement of it.
func (a *analyzer) line(src string, depth int) {
	if depth > maxShellDepth {
		a.dynamic("shell code nested more than " + strconv.Itoa(maxShellDepth) + " levels deep")
		return
	}
	// A Parser is not safe for concurrent use; a new one per line costs
	// less than the parse itself.
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		// What does not parse cannot be analyzed; its pieces are still
		// shown to deny rules, split as a reader would split them.
		a.dynamic("the command does not parse as shell: " + err.Error())
		for _, seg := range splitSegments(src) {
			fs := strings.Fields(seg)
			a.out.Commands = append(a.out.Commands, Command{Name: path.Base(fs[0]), Text: strings.Join(fs, " ")})
		}
		return
	}
	piped := map[*syntax.Stmt]bool{}
	timed := map[*syntax.Stmt]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.TimeClause:
			if n.Stmt != nil {
				timed[n.Stmt] = true
			}
		case *syntax.DeclClause, *syntax.LetClause:
			// declare, export, local, readonly, typeset and let: the parser
			// takes their arguments as assignments and expressions.
			t := src[n.Pos().Offset():n.End().Offset()]
			if strings.Contains(t, "[") && (strings.Contains(t, "$(") || strings.Contains(t, "`")) {
				a.dynamic("bash evaluates an array subscript in " + t + " as code")
			}
			if d, ok := n.(*syntax.DeclClause); ok {
				for _, as := range d.Args {
					if as.Name != nil {
						a.variable(as.Name.Value)
					}
				}
			}
		case *syntax.BinaryTest:
			// [[ x -eq y ]] evaluates both sides as arithmetic, where an
			// array subscript's $(…) runs even when quoted.
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				for _, x := range []syntax.TestExpr{n.X, n.Y} {
					if w, ok := x.(*syntax.Word); ok {
						t := src[w.Pos().Offset():w.End().Offset()]
						if strings.Contains(t, "[") && (strings.Contains(t, "$(") || strings.Contains(t, "`")) {
							a.dynamic("[[ evaluates the array subscript of " + t + " as code")
						}
					}
				}
			}
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				piped[n.Y] = true
			}
		case *syntax.Stmt:
			if call, ok := n.Cmd.(*syntax.CallExpr); ok {
				for _, as := range call.Assigns {
					if as.Name != nil {
						a.variable(as.Name.Value)
					}
				}
				if len(call.Args) == 0 {
					break
				}
				ws := make([]word, len(call.Args))
				for i, w := range call.Args {
					ws[i] = a.word(src, w)
				}
				if timed[n] && ws[0].lit && strings.HasPrefix(ws[0].val, "-") {
					// The parser takes "time -- rm x" as the keyword timing
					// a command "--"; bash (and /usr/bin/time under sh)
					// runs rm x.
					ws = append([]word{{val: "time", lit: true}}, ws...)
				}
				a.command(ws, stdinOf(src, n, piped[n]), depth, false)
			}
		case *syntax.Redirect:
			a.redirect(src, n)
		}
		return true
	})
}

// word is one shell word: its value when it is a literal, else its text.
type word struct {
	val string
	lit bool
}

// word evaluates w without running anything: literals, quotes and
// escapes only. Anything that expands (parameters, substitutions,
// arithmetic, globs, braces) makes it non-literal, keeping its source.
func (a *analyzer) word(src string, w *syntax.Word) word {
	var b strings.Builder
	lit := true
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[") || hasBraceExpansion(p.Value) || strings.HasPrefix(p.Value, "~") && b.Len() == 0 {
				lit = false
			}
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar && strings.Contains(p.Value, `\`) {
				lit = false // $'\x72m' is "rm": ANSI-C escapes are not decoded here
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					lit = false
					break
				}
				b.WriteString(unescape(l.Value, true))
			}
		default:
			lit = false
		}
	}
	if !lit {
		return word{val: src[w.Pos().Offset():w.End().Offset()]}
	}
	return word{val: b.String(), lit: true}
}

// unescape removes a literal's backslashes as the shell would: outside
// quotes "\x" is x; inside double quotes only before $ ` " \ and newline.
func unescape(s string, dq bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			n := s[i+1]
			if n == '\n' {
				i++
				continue
			}
			if !dq || strings.IndexByte("$`\"\\", n) >= 0 {
				b.WriteByte(n)
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hasBraceExpansion reports an unquoted {a,b} or {1..3}, which bash
// expands into several words.
func hasBraceExpansion(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(s[i:], '}')
	return j > 0 && (strings.Contains(s[i:i+j], ",") || strings.Contains(s[i:i+j], ".."))
}

// stdin is where a command reads its standard input from, as far as the
// line says.
type stdin struct {
	script string // a here-document's or here-string's text
	has    bool   // script is set
	from   string // "a pipe", "the file x": input that is not in the line
}

func stdinOf(src string, st *syntax.Stmt, piped bool) stdin {
	in := stdin{}
	if piped {
		in.from = "a pipe"
	}
	for _, r := range st.Redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			if r.Hdoc != nil {
				body := src[r.Hdoc.Pos().Offset():r.Hdoc.End().Offset()]
				// The body's text ends with the delimiter's line.
				if i := strings.LastIndexByte(strings.TrimRight(body, "\n"), '\n'); i >= 0 {
					body = body[:i+1]
				}
				in = stdin{script: body, has: true}
			} else {
				in = stdin{script: "", has: true}
			}
		case syntax.WordHdoc:
			w := (&analyzer{}).word(src, r.Word)
			in = stdin{script: w.val, has: true}
			if !w.lit {
				in = stdin{from: "the here-string " + w.val}
			}
		case syntax.RdrIn, syntax.RdrInOut:
			in = stdin{from: "the file " + src[r.Word.Pos().Offset():r.Word.End().Offset()]}
		}
	}
	return in
}

// redirect notes a redirection that writes a file.
func (a *analyzer) redirect(src string, r *syntax.Redirect) {
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrInOut, syntax.RdrClob, syntax.AppClob,
		syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob, syntax.DplOut:
	default:
		return
	}
	if r.Word == nil {
		return
	}
	target := src[r.Word.Pos().Offset():r.Word.End().Offset()]
	if r.Op == syntax.DplOut && isFD(target) {
		return // >&2: a descriptor, not a file
	}
	switch target {
	case "/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty":
		return
	}
	if a.out.Writes == "" {
		a.out.Writes = target
	}
}

func isFD(s string) bool {
	s = strings.TrimSuffix(s, "-")
	if s == "" {
		return true // >&- closes
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// wrapper describes a command that runs the rest of its arguments as a
// command: the options that take a value, and how many operands come
// before the command.
type wrapper struct {
	short    string   // short options that take a value
	long     []string // long options that take a value (without "=")
	operands int      // operands before the command (timeout's duration)
	assigns  bool     // NAME=value words may precede the command (env)
}

var wrappers = map[string]wrapper{
	"env":         {short: "uCS", long: []string{"--unset", "--chdir", "--split-string"}, assigns: true},
	"command":     {},
	"builtin":     {},
	"exec":        {short: "a"},
	"nice":        {short: "n", long: []string{"--adjustment"}},
	"nohup":       {},
	"setsid":      {},
	"timeout":     {short: "sk", long: []string{"--signal", "--kill-after"}, operands: 1},
	"time":        {short: "fo", long: []string{"--format", "--output"}},
	"stdbuf":      {short: "ioe", long: []string{"--input", "--output", "--error"}},
	"xargs":       {short: "IadELnPs", long: []string{"--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}},
	"sudo":        {short: "uCDghpRrTtU", long: []string{"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--other-user", "--command-timeout", "--chroot"}, assigns: true},
	"doas":        {short: "uC"},
	"busybox":     {},
	"ionice":      {short: "cnp"},
	"chrt":        {operands: 1},
	"taskset":     {operands: 1},
	"flock":       {short: "wE", long: []string{"--timeout", "--conflict-exit-code"}, operands: 1},
	"chroot":      {long: []string{"--userspec", "--groups"}, operands: 1},
	"unshare":     {short: "SGRw", long: []string{"--setuid", "--setgid", "--root", "--wd"}},
	"nsenter":     {short: "tSG", long: []string{"--target", "--setuid", "--setgid"}},
	"setpriv":     {long: []string{"--reuid", "--regid", "--groups", "--inh-caps", "--ambient-caps", "--bounding-set", "--securebits", "--selinux-label", "--apparmor-profile", "--pdeathsig"}},
	"strace":      {short: "oepsuEaIOPSXb", long: []string{"--output", "--attach", "--user", "--env", "--trace-path"}},
	"ltrace":      {short: "oepsuanlADFwx", long: []string{"--output", "--library"}},
	"fakeroot":    {short: "lfsi", long: []string{"--lib", "--faked"}},
	"unbuffer":    {},
	"runuser":     {short: "ugGw", long: []string{"--user", "--group", "--supp-group", "--whitelist-environment"}},
	"pkexec":      {long: []string{"--user"}},
	"firejail":    {},
	"xvfb-run":    {short: "nsfepw", long: []string{"--server-num", "--server-args", "--auth-file", "--error-file", "--xauth-protocol", "--wait"}},
	"dbus-launch": {},
	"systemd-run": {short: "pMuEHs", long: []string{"--property", "--machine", "--unit", "--setenv", "--host", "--slice", "--description", "--uid", "--gid", "--working-directory"}},
	"catchsegv":   {},
	"eatmydata":   {},
	"chpst":       {short: "ugUen/Cmdofpc"},
}

// shells run a script given with -c, as a file, or on stdin.
var shells = map[string]bool{"sh": true, "bash": true, "rbash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true, "ash": true,
	"fish": true, "yash": true, "posh": true, "csh": true, "tcsh": true}

// command analyzes one simple command's words; fed says xargs adds words
// from its input to them (repl is its -I string, "" for none).
func (a *analyzer) command(ws []word, in stdin, depth int, fed bool) {
	outerFed, outerRepl := a.fed, a.repl
	a.fed, a.repl = fed, ""
	defer func() { a.fed, a.repl = outerFed, outerRepl }()
	for n := 0; len(ws) > 0; n++ {
		if n > maxWrappers {
			a.dynamic("more than " + strconv.Itoa(maxWrappers) + " wrappers in one command")
			a.record(ws[0].val, ws)
			return
		}
		if !ws[0].lit {
			a.dynamic("the command name " + clip(ws[0].val) + " is not a literal")
			a.record(ws[0].val, ws)
			return
		}
		name := ws[0].val
		if strings.Contains(name, "/") {
			name = path.Base(name)
		}
		if a.repl != "" && strings.Contains(name, a.repl) {
			a.dynamic("xargs puts its input into the command name " + name)
		}
		if assigners[name] {
			for _, w := range ws[1:] {
				if w.lit && isAssign(w.val) {
					v, _, _ := strings.Cut(w.val, "=")
					a.variable(v)
				}
			}
		}
		if cRunners[name] {
			for i, w := range ws[1 : len(ws)-1] {
				if w.val == "-c" || w.val == "--command" {
					a.record(name, ws)
					a.out.Commands[len(a.out.Commands)-1].Wrapper = true
					a.script(name, ws[i+2], depth)
					return
				}
			}
		}
		w, ok := wrappers[name]
		if !ok {
			a.record(name, ws)
			a.special(name, ws[1:], in, depth)
			return
		}
		a.record(name, ws)
		a.out.Commands[len(a.out.Commands)-1].Wrapper = true
		rest, split := skipOptions(ws[1:], w)
		if split != "" {
			// env -S splits its string into the command's words.
			a.line(split+" "+joinVals(rest), depth+1)
			return
		}
		if len(rest) == 0 && a.fed {
			a.dynamic(name + " runs the command xargs gives it from its input")
			return
		}
		if name == "xargs" {
			if len(rest) == 0 {
				rest = []word{{val: "echo", lit: true}} // xargs runs echo by default
			}
			a.fed, a.repl = true, xargsReplace(ws[1:])
		}
		ws = rest
	}
}

// xargsReplace is the string xargs -I (-i, --replace) replaces with each
// input item, "" when there is none.
func xargsReplace(ws []word) string {
	for i, w := range ws {
		v := w.val
		switch {
		case v == "--":
			return ""
		case v == "-I" && i+1 < len(ws):
			return ws[i+1].val
		case strings.HasPrefix(v, "-I"):
			return v[2:]
		case v == "-i" || v == "--replace":
			return "{}"
		case strings.HasPrefix(v, "-i"):
			return v[2:]
		case strings.HasPrefix(v, "--replace="):
			return strings.TrimPrefix(v, "--replace=")
		}
	}
	return ""
}

// assigners are the commands whose NAME=value arguments set variables.
var assigners = map[string]bool{"env": true, "sudo": true, "export": true, "declare": true, "typeset": true, "local": true, "readonly": true}

// codeVariables are the variables whose value a shell runs as code: the
// file BASH_ENV or ENV names, the prompts (PS4 under set -x) and
// PROMPT_COMMAND.
var codeVariables = map[string]bool{"BASH_ENV": true, "ENV": true, "PROMPT_COMMAND": true, "PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true}

func (a *analyzer) variable(name string) {
	if codeVariables[name] {
		a.dynamic("the variable " + name + " makes the shell run its value as code")
	}
}

// cRunners run the string after -c (or --command) as a shell command.
var cRunners = map[string]bool{"su": true, "runuser": true, "sg": true, "script": true, "flock": true}

// skipOptions drops a wrapper's options and operands; split is env -S's
// string.
func skipOptions(ws []word, w wrapper) (rest []word, split string) {
	i := 0
	for i < len(ws) {
		v := ws[i].val
		if !ws[i].lit || v == "-" || !strings.HasPrefix(v, "-") {
			if w.assigns && ws[i].lit && isAssign(v) {
				i++
				continue
			}
			break
		}
		i++
		if v == "--" {
			break
		}
		if strings.HasPrefix(v, "--") {
			name, val, hasVal := strings.Cut(v, "=")
			takes := false
			for _, l := range w.long {
				takes = takes || l == name
			}
			if name == "--split-string" {
				if hasVal {
					return ws[i:], val
				}
				if i < len(ws) {
					return ws[i+1:], ws[i].val
				}
			}
			if takes && !hasVal {
				i++
			}
			continue
		}
		for j := 1; j < len(v); j++ {
			if strings.IndexByte(w.short, v[j]) < 0 {
				continue
			}
			val := v[j+1:]
			if val == "" && i < len(ws) {
				val = ws[i].val
				i++
			}
			if v[j] == 'S' && w.assigns && w.short == wrappers["env"].short {
				return ws[i:], val
			}
			break
		}
	}
	for n := 0; n < w.operands && i < len(ws); n++ {
		i++
	}
	return ws[i:], ""
}

func isAssign(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, c := range name {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func joinVals(ws []word) string {
	vs := make([]string, len(ws))
	for i, w := range ws {
		vs[i] = w.val
	}
	return strings.Join(vs, " ")
}

func (a *analyzer) record(name string, ws []word) {
	limit := textBudget - a.size
	if limit < maxText {
		limit = maxText
	}
	var b strings.Builder
	if len(name) > limit {
		a.dynamic("the line is too large to judge every command")
		name = name[:limit]
	}
	b.WriteString(name)
	for _, w := range ws[1:] {
		if b.Len()+1+len(w.val) > limit {
			a.dynamic("the line is too large to judge every command")
			break
		}
		b.WriteByte(' ')
		b.WriteString(w.val)
	}
	a.size += b.Len()
	a.out.Commands = append(a.out.Commands, Command{Name: name, Text: b.String()})
}

// interpreters run code given inline with one of their flags; a cluster
// such as perl's -ne counts.
var interpreters = map[string]string{
	"python": "c", "python2": "c", "python3": "c", "pypy": "c", "pypy3": "c",
	"perl": "eE", "ruby": "e", "node": "ep", "nodejs": "ep", "bun": "e",
	"php": "r", "lua": "e", "luajit": "e", "Rscript": "e", "tclsh": "", "osascript": "e", "expect": "c",
}

// special looks inside the commands that run other code.
func (a *analyzer) special(name string, args []word, in stdin, depth int) {
	if shells[name] {
		// What the shell runs is found in its script, or the line is
		// dynamic: allow rules judge the script's commands.
		a.out.Commands[len(a.out.Commands)-1].Wrapper = true
		a.shell(name, args, in, depth)
		return
	}
	switch name {
	case "eval":
		a.dynamic("eval runs text as shell code")
		a.line(joinVals(args), depth+1) // what it would run, if literal, for deny rules
		return
	case "source", ".":
		a.dynamic(name + " runs a file as shell code")
		return
	case "alias":
		a.dynamic("alias renames commands")
		return
	case "hash":
		if len(args) > 0 && strings.HasPrefix(args[0].val, "-") && strings.Contains(args[0].val, "p") {
			a.dynamic("hash -p names a file as a command")
		}
		return
	case "enable":
		for _, w := range args {
			if strings.HasPrefix(w.val, "-") && strings.Contains(w.val, "f") {
				a.dynamic("enable -f loads a builtin from a file")
			}
		}
		return
	case "declare", "typeset", "local", "export", "readonly", "printf", "read", "unset", "let", "mapfile", "readarray", "wait", "getopts":
		for _, w := range args {
			if w.lit && strings.Contains(w.val, "[") && (strings.Contains(w.val, "$(") || strings.Contains(w.val, "`")) {
				a.dynamic(name + " evaluates the array subscript of " + w.val + " as code")
				return
			}
		}
		return
	case "parallel":
		a.dynamic("parallel runs the commands it composes from its arguments and input")
		if i := indexVal(args, ":::"); i > 0 {
			a.line(joinVals(skipFlags(args[:i], "jSX")), depth+1) // for deny rules
		} else if i < 0 && len(args) > 0 {
			a.line(joinVals(skipFlags(args, "jSX")), depth+1)
		}
		return
	case "tmux", "screen":
		if len(args) > 0 {
			a.dynamic(name + " runs commands in its server")
		}
		return
	case "vi", "vim", "nvim", "ex", "view", "vimdiff", "rvim", "gvim":
		for _, w := range args {
			if w.val == "-c" || w.val == "--cmd" || w.val == "-S" || w.val == "-s" || strings.HasPrefix(w.val, "+") ||
				name == "ex" || strings.HasPrefix(w.val, "-e") || w.val == "-E" || w.val == "-es" {
				a.dynamic(name + " is given editor commands, which may run shell commands")
				return
			}
		}
		if name == "ex" || in.has || in.from != "" {
			a.dynamic(name + " reads editor commands from its standard input")
		}
		return
	case "ed", "red":
		if in.has || in.from != "" {
			a.dynamic(name + " reads editor commands, which may run shell commands, from its standard input")
		}
		return
	case "at", "batch":
		for _, w := range args {
			if w.val == "-f" || strings.HasPrefix(w.val, "-f") {
				a.dynamic(name + " runs a file as shell code")
				return
			}
		}
		switch {
		case in.has:
			a.line(in.script, depth+1)
		case in.from != "":
			a.dynamic(name + " runs the commands it reads from " + in.from)
		}
		return
	case "trap":
		args = skipFlags(args, "")
		if len(args) > 0 && args[0].lit {
			a.line(args[0].val, depth+1) // the handler runs later, in this shell
		} else if len(args) > 0 {
			a.dynamic("trap runs " + args[0].val + " as shell code")
		}
		return
	case "su", "runuser":
		for i, w := range args {
			if (w.val == "-c" || w.val == "--command") && i+1 < len(args) {
				a.script(name, args[i+1], depth)
			}
		}
		return
	case "watch":
		a.line(joinVals(skipFlags(args, "ndq")), depth+1) // watch runs its arguments with sh -c
		return
	case "find":
		a.find(args, depth)
		return
	case "awk", "gawk", "mawk", "nawk", "busybox-awk":
		for _, w := range args {
			if strings.Contains(w.val, "system") || strings.Contains(w.val, "|") {
				a.dynamic(name + " is given a program that may run commands")
				return
			}
		}
		return
	case "deno":
		if len(args) > 0 && args[0].val == "eval" {
			a.dynamic("deno eval runs inline code")
		}
		return
	}
	if flags, ok := interpreterFlags(name); ok {
		for _, w := range args {
			v := w.val
			if v == "-" {
				a.dynamic(name + " runs code from its standard input")
				return
			}
			if !strings.HasPrefix(v, "-") {
				return // a script file: what it does is not in the line
			}
			if strings.HasPrefix(v, "--") {
				if v == "--eval" || v == "--print" || strings.HasPrefix(v, "--eval=") || strings.HasPrefix(v, "--print=") {
					a.dynamic(name + " runs inline code (" + v + ")")
					return
				}
				continue
			}
			if strings.ContainsAny(v[1:], flags) && flags != "" {
				a.dynamic(name + " runs inline code (" + v + ")")
				return
			}
		}
		if in.has || in.from != "" {
			a.dynamic(name + " runs code from its standard input")
		}
	}
}

func interpreterFlags(name string) (string, bool) {
	if f, ok := interpreters[name]; ok {
		return f, true
	}
	// python3.12, perl5.36, lua5.4, ruby3.2
	for _, p := range []string{"python", "perl", "ruby", "lua", "pypy", "node"} {
		if v, ok := strings.CutPrefix(name, p); ok && v != "" && strings.Trim(v, "0123456789.") == "" {
			return interpreters[p], true
		}
	}
	return "", false
}

func indexVal(ws []word, v string) int {
	for i, w := range ws {
		if w.val == v {
			return i
		}
	}
	return -1
}

func skipFlags(ws []word, withValue string) []word {
	for i := 0; i < len(ws); i++ {
		v := ws[i].val
		if !strings.HasPrefix(v, "-") || v == "-" {
			return ws[i:]
		}
		if v == "--" {
			return ws[i+1:]
		}
		if len(v) == 2 && strings.IndexByte(withValue, v[1]) >= 0 {
			i++
		}
	}
	return nil
}

// shell analyzes sh/bash/zsh: the -c string, a script file, or stdin.
func (a *analyzer) shell(name string, args []word, in stdin, depth int) {
	cflag := false
	for i := 0; i < len(args); i++ {
		v := args[i].val
		switch {
		case !args[i].lit:
			if cflag {
				a.script(name, args[i], depth)
			} else {
				a.dynamic(name + " runs " + v)
			}
			return
		case v == "--" || v == "-":
			continue
		case strings.HasPrefix(v, "--"):
			if v == "--rcfile" || v == "--init-file" {
				a.dynamic(name + " " + v + " runs a file as shell code")
				i++
			}
			continue
		case strings.HasPrefix(v, "-") || strings.HasPrefix(v, "+"):
			if strings.ContainsRune(v[1:], 'c') {
				cflag = true
			}
			if strings.ContainsAny(v[1:], "oO") {
				i++ // -o option
			}
			continue
		}
		if cflag {
			if a.repl != "" && strings.Contains(v, a.repl) {
				a.dynamic("xargs puts its input into the script of " + name)
			}
			a.script(name, args[i], depth)
		} else {
			a.dynamic(name + " runs the script file " + v)
		}
		return
	}
	switch {
	case a.fed:
		a.dynamic(name + " runs the script xargs gives it from its input")
	case cflag:
	case in.has:
		a.line(in.script, depth+1)
	case in.from != "":
		a.dynamic(name + " runs the commands it reads from " + in.from)
	}
}

// script analyzes a string given to a shell as code.
func (a *analyzer) script(name string, w word, depth int) {
	if !w.lit {
		a.dynamic(name + " runs " + w.val + ", which is not a literal")
		// Shown to deny rules as written, quotes removed.
		a.line(strings.Trim(w.val, `"'`), depth+1)
		return
	}
	a.line(w.val, depth+1)
}

// find: -exec and -ok run a command (judged by its name), -delete
// deletes, -fprint and friends write files.
func (a *analyzer) find(args []word, depth int) {
	for i := 0; i < len(args); i++ {
		switch v := args[i].val; v {
		case "-exec", "-execdir", "-ok", "-okdir":
			a.dynamic("find " + v + " runs a command on each file found")
			j := i + 1
			for j < len(args) && args[j].val != ";" && args[j].val != "+" {
				j++
			}
			if j > i+1 {
				a.command(args[i+1:j], stdin{}, depth+1, false)
			}
			i = j
		case "-delete":
			a.dynamic("find -delete deletes the files found")
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if i+1 < len(args) && a.out.Writes == "" {
				a.out.Writes = args[i+1].val
			}
		}
	}
}

// splitSegments is the fallback for a line that does not parse: its
// pieces between ; & | and newlines.
func splitSegments(cmd string) []string {
	var out []string
	for _, s := range strings.FieldsFunc(cmd, func(r rune) bool { return strings.ContainsRune(";|&\n", r) }) {
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	return out
}
