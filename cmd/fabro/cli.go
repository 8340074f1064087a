package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Exit codes of every fabro command (documented in `fabro help` and the
// docs/CLI.md).
const (
	exitOK          = 0   // done
	exitFailure     = 1   // the command, or the prompt, failed
	exitUsage       = 2   // the command line or the config file is wrong
	exitInterrupted = 130 // interrupted (Ctrl-C), or the prompt was cancelled
)

// command is one node of the command tree: a group (subs) or a leaf
// (define).
type command struct {
	name     string // the word that selects it
	aliases  []string
	args     string // the positional arguments, for the synopsis
	summary  string // one line, for the parent's list
	long     string // what it does, in help
	examples string // indented command lines, in help
	subs     []*command
	// define registers the leaf's flags on fs and returns what runs it
	// with the positional arguments. It has no other effect, so help and
	// completion can call it too.
	define func(fs *flag.FlagSet, e env) runner
	path   string // "secret set", set by the tree
}

type runner func(ctx context.Context, args []string) error

// tree links every command to its full path.
func tree(root *command) *command {
	var walk func(c *command, prefix string)
	walk = func(c *command, prefix string) {
		c.path = strings.TrimSpace(prefix + " " + c.name)
		for _, s := range c.subs {
			walk(s, c.path)
		}
	}
	root.name = ""
	walk(root, "")
	return root
}

func (c *command) find(word string) *command {
	for _, s := range c.subs {
		if s.name == word || slices.Contains(s.aliases, word) {
			return s
		}
	}
	return nil
}

func (c *command) title() string { return strings.TrimSpace("fabro " + c.path) }

func (c *command) synopsis() string {
	if c.subs != nil {
		return c.title() + " COMMAND [flags]"
	}
	return strings.TrimSpace(c.title() + " [flags] " + c.args)
}

func (c *command) subNames() string {
	var names []string
	for _, s := range c.subs {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

// usageError is a mistake in the command line: exit 2, the message, then
// the usage on stderr.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// exitStatus ends a command with code; what it had to say is printed.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// exitCode is the error of a command that printed its outcome: none for 0.
func exitCode(code int) error {
	if code == exitOK {
		return nil
	}
	return exitStatus(code)
}

// configError is a bad config file or environment value: exit 2 with its
// message, without the usage.
type configError struct{ err error }

func (c configError) Error() string { return c.err.Error() }

// dispatch walks args down the tree and runs the leaf they name.
func dispatch(ctx context.Context, root *command, args []string, e env) int {
	c := root
	for c.subs != nil {
		if len(args) == 0 {
			if c == root {
				return fail(e, c, nil, "missing command")
			}
			return fail(e, c, nil, "missing subcommand: want "+c.subNames())
		}
		word := args[0]
		switch word {
		case "-h", "-help", "--help":
			writeHelp(e.stdout, c, nil, e)
			return exitOK
		case "-version", "--version":
			if c == root {
				fmt.Fprint(e.stdout, versionText())
				return exitOK
			}
		}
		next := c.find(word)
		if next == nil {
			if strings.HasPrefix(word, "-") {
				return fail(e, c, nil, fmt.Sprintf("unknown flag %s (flags go after the command)", word))
			}
			if c == root {
				return failTypo(e, c, fmt.Sprintf("unknown command %q", word), nearest(word, c.subWords()))
			}
			return failTypo(e, c, fmt.Sprintf("unknown subcommand %q: want %s", word, c.subNames()), nearest(word, c.subWords()))
		}
		c, args = next, args[1:]
	}
	return runLeaf(ctx, c, args, e)
}

// failTypo reports a word that names no command or flag: one line saying
// so, with near (the nearest word that would have meant something) when
// there is one, then a one-line hint: a typo wants the right spelling, not
// every flag.
func failTypo(e env, c *command, msg, near string) int {
	if near != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	help := c.title() + " --help"
	if c.path == "" {
		help = "fabro help"
	}
	fmt.Fprintf(e.stderr, "%s: %s\nRun %q for usage.\n", c.title(), msg, help)
	return exitUsage
}

// subWords is every name and alias of c's subcommands.
func (c *command) subWords() []string {
	var words []string
	for _, s := range c.subs {
		words = append(append(words, s.name), s.aliases...)
	}
	return words
}

// nearest is the word of words closest to w by edit distance when it is
// close enough to be a typo of it (a third of its letters changed, at
// least one), else the first that w abbreviates (serv for server), else "".
func nearest(w string, words []string) string {
	best, bestD := "", max(1, len(w)/3)+1
	for _, c := range words {
		if d := editDistance(w, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" || len(w) < 3 {
		return best
	}
	for _, c := range words {
		if strings.HasPrefix(c, w) {
			return c
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, bytewise.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fail reports a usage error: one line saying what is wrong, then the
// command's usage, on stderr.
func fail(e env, c *command, fs *flag.FlagSet, msg string) int {
	fmt.Fprintf(e.stderr, "%s: %s\n\n", c.title(), msg)
	writeUsage(e.stderr, c, fs, e)
	return exitUsage
}

func runLeaf(ctx context.Context, c *command, args []string, e env) int {
	fs, run := c.flagSet(e)
	pos, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeHelp(e.stdout, c, fs, e)
		return exitOK
	case err != nil:
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			name = strings.TrimLeft(name, "-")
			var flags []string
			fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
			near := nearest(name, flags)
			if near != "" {
				near = "--" + near
			}
			return failTypo(e, c, "unknown flag --"+name, near)
		}
		return fail(e, c, fs, flagMessage(err))
	}
	if err := applyDefaults(fs, e); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", c.title(), err)
		return exitUsage
	}
	err = run(ctx, pos)
	var (
		ue usageError
		ce configError
		es exitStatus
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return fail(e, c, fs, ue.msg)
	case errors.As(err, &ce):
		fmt.Fprintf(e.stderr, "%s: %v\n", c.title(), ce.err)
		return exitUsage
	case errors.As(err, &es):
		return int(es)
	default:
		fmt.Fprintf(e.stderr, "fabro: %v\n", err)
		return exitFailure
	}
}

// flagSet builds a leaf's flags, with --config on every leaf that reads
// the config file.
func (c *command) flagSet(e env) (*flag.FlagSet, runner) {
	fs := flag.NewFlagSet(c.title(), flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by dispatch
	fs.Usage = func() {}
	run := c.define(fs, e)
	if readsConfig(fs) {
		fs.String("config", "", "config file (default $XDG_CONFIG_HOME/fabro/config.toml, else ~/.config/fabro/config.toml)")
	}
	return fs, run
}

// parseArgs parses flags anywhere among the positional arguments, until
// "--", after which everything is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagMessage rephrases the flag package's errors.
func flagMessage(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return "unknown flag --" + strings.TrimLeft(name, "-")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "flag --" + strings.TrimLeft(name, "-") + " needs a value"
	}
	return strings.Replace(msg, " for flag -", " for --", 1)
}

// helpCmd is `fabro help [COMMAND...]`.
func helpCmd(root *command) *command {
	return &command{
		name: "help", args: "[COMMAND...]", summary: "show the help of fabro or of a command",
		examples: "  fabro help exec\n  fabro help secret set",
		define: func(fs *flag.FlagSet, e env) runner {
			return func(_ context.Context, args []string) error {
				c := root
				for _, a := range args {
					next := c.find(a)
					if next == nil {
						return usagef("no command %q in %s", a, c.title())
					}
					c = next
				}
				var fs *flag.FlagSet
				if c.define != nil {
					fs, _ = c.flagSet(e)
				}
				writeHelp(e.stdout, c, fs, e)
				return nil
			}
		},
	}
}

// writeUsage prints the synopsis and, for a leaf, its flags.
func writeUsage(w io.Writer, c *command, fs *flag.FlagSet, e env) {
	fmt.Fprintf(w, "Usage:\n  %s\n", c.synopsis())
	if c.subs != nil {
		writeCommands(w, c)
	}
	if fs != nil {
		writeFlags(w, fs)
	}
	help := c.title() + " --help"
	if c.path == "" {
		help = "fabro help COMMAND"
	}
	fmt.Fprintf(w, "\nRun %q for more, with examples.\n", help)
}

// writeHelp prints everything about a command, for help on stdout.
func writeHelp(w io.Writer, c *command, fs *flag.FlagSet, e env) {
	if c.path == "" {
		fmt.Fprint(w, rootHelpHead)
	}
	fmt.Fprintf(w, "Usage:\n  %s\n", c.synopsis())
	if c.long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.long, "\n"))
	}
	if c.subs != nil {
		writeCommands(w, c)
	}
	if c.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(c.examples, "\n"))
	}
	if fs == nil && c.define != nil {
		fs, _ = c.flagSet(e)
	}
	if fs != nil {
		writeFlags(w, fs)
	}
	if c.path == "" {
		fmt.Fprint(w, rootHelpTail)
	} else if c.subs != nil {
		fmt.Fprintf(w, "\nRun \"%s COMMAND --help\" for a command's flags.\n", c.title())
	}
}

func writeCommands(w io.Writer, c *command) {
	fmt.Fprintln(w, "\nCommands:")
	width := 0
	for _, s := range c.subs {
		width = max(width, len(strings.TrimSpace(s.name+" "+s.args)))
	}
	for _, s := range c.subs {
		fmt.Fprintf(w, "  %-*s  %s\n", width, strings.TrimSpace(s.name+" "+s.args), s.summary)
	}
}

// writeFlags lists a leaf's flags: the name, its value's kind, what it
// does, its default and the environment variable behind it.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintln(w, "\nFlags:")
			first = false
		}
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintln(w, line)
		fmt.Fprintf(w, "      %s", usage)
		var notes []string
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			notes = append(notes, "default "+def)
		}
		notes = append(notes, "$"+envName(f.Name))
		fmt.Fprintf(w, " (%s)\n", strings.Join(notes, "; "))
	})
}

const rootHelpHead = `fabro runs AI coding agents against your code.

`

const rootHelpTail = `
Flags:
  -h, --help     this help; "fabro COMMAND --help" for a command's
  --version      the version, commit and build date

Server and token:
  The client commands talk to one address, --server: the all-in-one server
  that ` + "`fabro serve`" + ` runs (every service on one port, default 127.0.0.1:7700),
  or the front door of the compose stack. ` + "`fabro exec`" + ` without --server runs
  every service in its own process instead. They present the token in
  --token-file, else $FABRO_TOKEN, else (for a server on this machine) the
  admin token fabro serve writes to <data-dir>/auth/admin.token.

Configuration:
  Every flag can be set by an environment variable: FABRO_ and the flag's
  name in capitals, "-" as "_" (--data-dir is $FABRO_DATA_DIR). The config
  file $XDG_CONFIG_HOME/fabro/config.toml (default ~/.config/fabro/config.toml,
  or --config FILE, or $FABRO_CONFIG) sets the defaults you choose once:

    server      = "127.0.0.1:7700"   # --server
    token_file  = "~/fabro.token"    # --token-file
    model       = "anthropic/claude-sonnet-4.5"  # --model
    sandbox     = "docker"           # --sandbox
    permissions = "read-write"       # --permissions

  A flag beats its environment variable, which beats the file, which beats
  the built-in default. An unknown key in the file is an error.

Exit codes:
  0    done
  1    the command failed (or the prompt did: an error, its turn limit)
  2    usage: an unknown command or flag, a missing argument, a bad config file
  3    fabro exec --max-cost: the prompt stopped at its budget
  130  interrupted (Ctrl-C), or the prompt was cancelled
`
