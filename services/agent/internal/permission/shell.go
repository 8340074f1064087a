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
}

func (a *analyzer) dynamic(why string) {
	for _, d := range a.out.Dynamic {
		if d == why {
			return
		}
	}
	a.out.Dynamic = append(a.out.Dynamic, why)
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
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				piped[n.Y] = true
			}
		case *syntax.Stmt:
			if call, ok := n.Cmd.(*syntax.CallExpr); ok && len(call.Args) > 0 {
				ws := make([]word, len(call.Args))
				for i, w := range call.Args {
					ws[i] = a.word(src, w)
				}
				a.command(ws, stdinOf(src, n, piped[n]), depth)
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
	"env":     {short: "uCS", long: []string{"--unset", "--chdir", "--split-string"}, assigns: true},
	"command": {},
	"builtin": {},
	"exec":    {short: "a"},
	"nice":    {short: "n", long: []string{"--adjustment"}},
	"nohup":   {},
	"setsid":  {},
	"timeout": {short: "sk", long: []string{"--signal", "--kill-after"}, operands: 1},
	"time":    {short: "fo", long: []string{"--format", "--output"}},
	"stdbuf":  {short: "ioe", long: []string{"--input", "--output", "--error"}},
	"xargs":   {short: "IadEeLlnPs", long: []string{"--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}},
	"sudo":    {short: "uCDghpRrTtU", long: []string{"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--other-user", "--command-timeout", "--chroot"}, assigns: true},
	"doas":    {short: "uC"},
	"busybox": {},
}

// shells run a script given with -c, as a file, or on stdin.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true, "ash": true, "fish": true}

// command analyzes one simple command's words.
func (a *analyzer) command(ws []word, in stdin, depth int) {
	for len(ws) > 0 {
		if !ws[0].lit {
			a.dynamic("the command name " + ws[0].val + " is not a literal")
			a.record(ws[0].val, ws)
			return
		}
		name := ws[0].val
		if strings.Contains(name, "/") {
			name = path.Base(name)
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
		if len(rest) == 0 && name == "xargs" {
			rest = []word{{val: "echo", lit: true}} // xargs runs echo by default
		}
		ws = rest
	}
}

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
	text := name
	if len(ws) > 1 {
		text += " " + joinVals(ws[1:])
	}
	a.out.Commands = append(a.out.Commands, Command{Name: name, Text: text})
}

// interpreters run code given inline with one of their flags; a cluster
// such as perl's -ne counts.
var interpreters = map[string]string{
	"python": "c", "python2": "c", "python3": "c", "pypy": "c", "pypy3": "c",
	"perl": "eE", "ruby": "e", "node": "ep", "nodejs": "ep", "bun": "e",
	"php": "r", "lua": "e", "luajit": "e", "Rscript": "e", "tclsh": "", "osascript": "e",
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
	case "trap":
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
			a.script(name, args[i], depth)
		} else {
			a.dynamic(name + " runs the script file " + v)
		}
		return
	}
	switch {
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
				a.command(args[i+1:j], stdin{}, depth+1)
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
