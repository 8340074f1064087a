package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// completionCommand is `fabro completion bash|zsh|fish`: a script,
// generated from the command tree, that completes subcommands, flags and
// the values of flags that take one of a few words.
func completionCommand() *command {
	return &command{
		name: "completion", args: "bash|zsh|fish|powershell", summary: "print a shell completion script",
		long: `Prints a script that completes fabro's commands, subcommands and flags
(and the values of --permissions, --sandbox, --role) in your shell. Session
ids, model ids and sandbox drivers come from the server (--server on the
line, else the configured one) when it answers within a second. Load it in
the shell's start-up file.`,
		examples: `  source <(fabro completion bash)                          # in ~/.bashrc
  fabro completion zsh > "${fpath[1]}/_fabro"               # then restart zsh
  fabro completion fish > ~/.config/fish/completions/fabro.fish
  fabro completion powershell | Out-String | Invoke-Expression   # in $PROFILE`,
		define: func(fs *flag.FlagSet, e env) runner {
			return func(_ context.Context, args []string) error {
				if len(args) != 1 {
					return usagef("completion takes one shell: bash, zsh, fish or powershell")
				}
				nodes := completionNodes(commands(), e)
				switch args[0] {
				case "bash":
					writeBash(e.stdout, nodes)
				case "zsh":
					writeZsh(e.stdout, nodes)
				case "fish":
					writeFish(e.stdout, nodes)
				case "powershell", "pwsh":
					writePowerShell(e.stdout, nodes)
				default:
					return usagef("unknown shell %q: want bash, zsh, fish or powershell", args[0])
				}
				return nil
			}
		},
	}
}

// flagWords are the values a flag takes, for completion.
var flagWords = map[string][]string{
	"permissions": {"read-only", "read-write", "full"},
	"sandbox":     {"local", "docker"},
	"role":        {"user", "admin"},
}

type compWord struct{ word, help string }

// compNode is one command path's completions.
type compNode struct {
	path  string     // "" for fabro itself, "secret set"
	subs  []compWord // subcommands
	flags []compWord // --flags
}

func completionNodes(root *command, e env) []compNode {
	var nodes []compNode
	var walk func(c *command)
	walk = func(c *command) {
		n := compNode{path: c.path}
		for _, s := range c.subs {
			n.subs = append(n.subs, compWord{s.name, s.summary})
		}
		if c.path == "" {
			n.flags = []compWord{{"help", "show the help"}, {"version", "print the version"}}
		} else {
			n.flags = []compWord{{"help", "show the help"}}
		}
		if c.define != nil {
			fs, _ := c.flagSet(e)
			fs.VisitAll(func(f *flag.Flag) {
				_, usage := flag.UnquoteUsage(f)
				n.flags = append(n.flags, compWord{f.Name, usage})
			})
		}
		nodes = append(nodes, n)
		for _, s := range c.subs {
			walk(s)
		}
	}
	walk(root)
	return nodes
}

func words(ws []compWord, prefix string) string {
	var out []string
	for _, w := range ws {
		out = append(out, prefix+w.word)
	}
	return strings.Join(out, " ")
}

func writeBash(w io.Writer, nodes []compNode) {
	fmt.Fprint(w, `# bash completion for fabro; load with: source <(fabro completion bash)
_fabro_subs() {
  case "$1" in
`)
	for _, n := range nodes {
		if len(n.subs) > 0 {
			fmt.Fprintf(w, "    %q) echo %q ;;\n", n.path, words(n.subs, ""))
		}
	}
	fmt.Fprint(w, `  esac
}
_fabro_flags() {
  case "$1" in
`)
	for _, n := range nodes {
		fmt.Fprintf(w, "    %q) echo %q ;;\n", n.path, words(n.flags, "--"))
	}
	fmt.Fprint(w, `  esac
}
_fabro_values() {
  case "$1" in
`)
	for _, name := range slices.Sorted(maps.Keys(flagWords)) {
		fmt.Fprintf(w, "    --%s|-%s) echo %q ;;\n", name, name, strings.Join(flagWords[name], " "))
	}
	fmt.Fprint(w, `    *) return 1 ;;
  esac
}
# The kind of word only the server knows that a flag's value or a
# command's argument is: fabro __complete KIND prints them.
_fabro_flag_kind() {
  case "$1" in
`)
	for _, name := range slices.Sorted(maps.Keys(flagKinds)) {
		fmt.Fprintf(w, "    --%s|-%s) echo %s ;;\n", name, name, flagKinds[name])
	}
	fmt.Fprint(w, `    *) return 1 ;;
  esac
}
_fabro_arg_kind() {
  case "$1" in
`)
	for _, path := range slices.Sorted(maps.Keys(argKinds)) {
		fmt.Fprintf(w, "    %q) echo %s ;;\n", path, argKinds[path])
	}
	fmt.Fprint(w, `    *) return 1 ;;
  esac
}
# The server's words of kind $1, from the --server typed on the line if
# any; nothing when it does not answer within a second.
_fabro_server_words() {
  local i server=()
  for (( i = 1; i < COMP_CWORD; i++ )); do
    case ${COMP_WORDS[i]} in
      --server|-server) server=(--server "${COMP_WORDS[i+1]}") ;;
    esac
  done
  "${COMP_WORDS[0]}" __complete "$1" "${server[@]}" 2>/dev/null
}
_fabro() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev= path= i w subs values kind
  (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}
  for (( i = 1; i < COMP_CWORD; i++ )); do
    w=${COMP_WORDS[i]}
    subs=" $(_fabro_subs "$path") "
    if [[ $w != -* && $subs == *" $w "* ]]; then
      path=${path:+$path }$w
    fi
  done
  if kind=$(_fabro_flag_kind "$prev"); then
    values=$(_fabro_server_words "$kind")
    [[ -n $values ]] || values=$(_fabro_values "$prev")
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return
  fi
  if values=$(_fabro_values "$prev"); then
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_fabro_flags "$path")" -- "$cur"))
    return
  fi
  subs=$(_fabro_subs "$path")
  if [[ -n $subs ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  elif kind=$(_fabro_arg_kind "$path"); then
    COMPREPLY=($(compgen -W "$(_fabro_server_words "$kind")" -- "$cur"))
  fi
}
complete -o default -F _fabro fabro
`)
}

// zshItem is one _describe item, "word:description", quoted; a colon in
// the word is escaped, as _describe splits at the first plain one.
func zshItem(word, help string) string {
	s := strings.ReplaceAll(word, ":", `\:`) + ":" + help
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func writeZsh(w io.Writer, nodes []compNode) {
	fmt.Fprint(w, `#compdef fabro
# zsh completion for fabro; save as _fabro in a directory of $fpath, or
# load with: source <(fabro completion zsh)
_fabro_subs() {
  case "$1" in
`)
	for _, n := range nodes {
		if len(n.subs) > 0 {
			var items []string
			for _, s := range n.subs {
				items = append(items, zshItem(s.word, s.help))
			}
			fmt.Fprintf(w, "    %q) reply=(%s) ;;\n", n.path, strings.Join(items, " "))
		}
	}
	fmt.Fprint(w, `    *) reply=() ;;
  esac
}
_fabro_flags() {
  case "$1" in
`)
	for _, n := range nodes {
		var items []string
		for _, f := range n.flags {
			items = append(items, zshItem("--"+f.word, f.help))
		}
		fmt.Fprintf(w, "    %q) reply=(%s) ;;\n", n.path, strings.Join(items, " "))
	}
	fmt.Fprint(w, `    *) reply=() ;;
  esac
}
# The server's words of kind $1 (fabro __complete), from the --server
# typed on the line if any; none when it does not answer within a second.
_fabro_server_words() {
  local i
  local -a server
  for (( i = 2; i < CURRENT; i++ )); do
    [[ ${words[i]} == (--server|-server) ]] && server=(--server ${words[i+1]})
  done
  reply=(${(f)"$(${words[1]} __complete $1 $server 2>/dev/null)"})
}
_fabro() {
  local path= i w kind= prev=${words[CURRENT-1]}
  local -a reply names
  for (( i = 2; i < CURRENT; i++ )); do
    w=${words[i]}
    [[ $w == -* ]] && continue
    _fabro_subs "$path"
    names=(${reply%%:*})
    if (( ${names[(Ie)$w]} )); then
      path=${path:+$path }$w
    fi
  done
  case $prev in
`)
	for _, name := range slices.Sorted(maps.Keys(flagKinds)) {
		fmt.Fprintf(w, "    --%s|-%s) kind=%s ;;\n", name, name, flagKinds[name])
	}
	fmt.Fprint(w, `  esac
  if [[ -n $kind ]]; then
    _fabro_server_words $kind
    if (( ${#reply} )); then
      compadd -- $reply
      return
    fi
  fi
  case $prev in
`)
	for _, name := range slices.Sorted(maps.Keys(flagWords)) {
		fmt.Fprintf(w, "    --%s|-%s) compadd -- %s; return ;;\n", name, name, strings.Join(flagWords[name], " "))
	}
	fmt.Fprint(w, `  esac
  if [[ ${words[CURRENT]} == -* ]]; then
    _fabro_flags "$path"
    _describe -t flags 'flag' reply
    return
  fi
  _fabro_subs "$path"
  if (( ${#reply} )); then
    _describe -t commands 'command' reply
    return
  fi
  case $path in
`)
	for _, path := range slices.Sorted(maps.Keys(argKinds)) {
		fmt.Fprintf(w, "    %q) _fabro_server_words %s; compadd -- $reply; return ;;\n", path, argKinds[path])
	}
	fmt.Fprint(w, `  esac
  _files
}
# Autoloaded from $fpath, this file is the completion function itself;
# sourced, it registers the function.
if [[ $funcstack[1] == _fabro ]]; then
  _fabro "$@"
else
  compdef _fabro fabro
fi
`)
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

func writeFish(w io.Writer, nodes []compNode) {
	fmt.Fprint(w, `# fish completion for fabro; save as ~/.config/fish/completions/fabro.fish
function __fabro_path
    # The subcommands typed so far, as one string ("secret set").
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l path
    for t in $tokens
        switch $t
            case '-*'
                continue
        end
        set -l candidate (string join ' ' $path $t)
        if contains -- $candidate $__fabro_paths
            set path $path $t
        end
    end
    string join ' ' $path
end
function __fabro_at
    set -l p (__fabro_path)
    test "$p" = "$argv[1]"
end
# The server's words of kind $argv[1] (fabro __complete), from the
# --server typed on the line if any; none when it does not answer.
function __fabro_server_words
    set -l tokens (commandline -opc)
    set -l server
    for i in (seq (count $tokens))
        if contains -- $tokens[$i] --server -server
            set server --server $tokens[(math $i + 1)]
        end
    end
    $tokens[1] __complete $argv[1] $server 2>/dev/null
end
`)
	var paths []string
	for _, n := range nodes {
		if n.path != "" {
			paths = append(paths, fishQuote(n.path))
		}
	}
	fmt.Fprintf(w, "set -g __fabro_paths %s\n", strings.Join(paths, " "))
	fmt.Fprintln(w, "complete -c fabro -f")
	for _, n := range nodes {
		cond := "__fabro_at " + fishQuote(n.path)
		for _, s := range n.subs {
			fmt.Fprintf(w, "complete -c fabro -n %s -a %s -d %s\n", fishQuote(cond), fishQuote(s.word), fishQuote(s.help))
		}
		for _, f := range n.flags {
			line := fmt.Sprintf("complete -c fabro -n %s -l %s -d %s", fishQuote(cond), f.word, fishQuote(f.help))
			if kind, ok := flagKinds[f.word]; ok {
				// The server's words, else the built-in ones.
				alt := ""
				if vals, ok := flagWords[f.word]; ok {
					alt = "; or string split ' ' " + strings.Join(vals, " ")
				}
				line += " -x -a " + fishQuote("(__fabro_server_words "+kind+alt+")")
			} else if vals, ok := flagWords[f.word]; ok {
				line += " -x -a " + fishQuote(strings.Join(vals, " "))
			}
			fmt.Fprintln(w, line)
		}
		if kind, ok := argKinds[n.path]; ok {
			fmt.Fprintf(w, "complete -c fabro -n %s -a %s\n", fishQuote(cond), fishQuote("(__fabro_server_words "+kind+")"))
		} else if len(n.subs) == 0 {
			fmt.Fprintf(w, "complete -c fabro -n %s -F\n", fishQuote(cond))
		}
	}
}

// psQuote is s as a PowerShell single-quoted string.
func psQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func psList(ws []string) string {
	q := make([]string, len(ws))
	for i, w := range ws {
		q[i] = psQuote(w)
	}
	return "@(" + strings.Join(q, ", ") + ")"
}

func writePowerShell(w io.Writer, nodes []compNode) {
	fmt.Fprint(w, `# PowerShell completion for fabro; load it from $PROFILE with:
#   fabro completion powershell | Out-String | Invoke-Expression
Register-ArgumentCompleter -Native -CommandName fabro -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)
    $subs = @{
`)
	for _, n := range nodes {
		if len(n.subs) > 0 {
			var ws []string
			for _, s := range n.subs {
				ws = append(ws, s.word)
			}
			fmt.Fprintf(w, "        %s = %s\n", psQuote(n.path), psList(ws))
		}
	}
	fmt.Fprint(w, "    }\n    $flags = @{\n")
	for _, n := range nodes {
		var ws []string
		for _, f := range n.flags {
			ws = append(ws, "--"+f.word)
		}
		fmt.Fprintf(w, "        %s = %s\n", psQuote(n.path), psList(ws))
	}
	fmt.Fprint(w, "    }\n    $values = @{\n")
	for _, name := range slices.Sorted(maps.Keys(flagWords)) {
		fmt.Fprintf(w, "        %s = %s\n", psQuote(name), psList(flagWords[name]))
	}
	fmt.Fprint(w, "    }\n    # Words only the server knows: fabro __complete KIND prints them.\n    $flagKinds = @{\n")
	for _, name := range slices.Sorted(maps.Keys(flagKinds)) {
		fmt.Fprintf(w, "        %s = %s\n", psQuote(name), psQuote(flagKinds[name]))
	}
	fmt.Fprint(w, "    }\n    $argKinds = @{\n")
	for _, path := range slices.Sorted(maps.Keys(argKinds)) {
		fmt.Fprintf(w, "        %s = %s\n", psQuote(path), psQuote(argKinds[path]))
	}
	fmt.Fprint(w, `    }
    # The words before the one being completed, fabro first.
    $words = @($commandAst.CommandElements | Where-Object { $_.Extent.EndOffset -lt $cursorPosition -or ($_.Extent.EndOffset -eq $cursorPosition -and $wordToComplete -eq '') } | ForEach-Object { $_.Extent.Text })
    $path = ''
    $server = @()
    for ($i = 1; $i -lt $words.Count; $i++) {
        $w = $words[$i]
        if ($w -in '--server', '-server' -and $i + 1 -lt $words.Count) { $server = @('--server', $words[$i + 1]) }
        if ($w -notlike '-*' -and $subs.ContainsKey($path) -and $subs[$path] -contains $w) { $path = "$path $w".Trim() }
    }
    $prev = if ($words.Count -gt 1) { $words[-1] } else { '' }
    $flag = $prev.TrimStart('-')
    $candidates = @()
    if ($prev -like '-*' -and $flagKinds.ContainsKey($flag)) {
        $candidates = @(& $words[0] __complete $flagKinds[$flag] @server 2>$null)
        if ($candidates.Count -eq 0 -and $values.ContainsKey($flag)) { $candidates = $values[$flag] }
    } elseif ($prev -like '-*' -and $values.ContainsKey($flag)) {
        $candidates = $values[$flag]
    } elseif ($wordToComplete -like '-*') {
        $candidates = $flags[$path]
    } elseif ($subs.ContainsKey($path)) {
        $candidates = $subs[$path]
    } elseif ($argKinds.ContainsKey($path)) {
        $candidates = @(& $words[0] __complete $argKinds[$path] @server 2>$null)
    }
    $candidates | Where-Object { $_ -like "$wordToComplete*" } | ForEach-Object {
        [System.Management.Automation.CompletionResult]::new($_, $_, 'ParameterValue', $_)
    }
}
`)
}
