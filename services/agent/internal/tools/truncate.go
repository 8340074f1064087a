package tools

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Mode says which part of a long output a [Limit] keeps.
type Mode int

const (
	// HeadTail keeps the start and the end, dropping the middle.
	HeadTail Mode = iota
	// Tail keeps the end.
	Tail
	// Head keeps the start.
	Head
)

// Limit is how much of a tool's output the model sees. Characters are
// counted as Unicode code points and applied first, then lines.
type Limit struct {
	// MaxChars is the most characters kept; 0 means no limit.
	MaxChars int
	// MaxLines is the most lines kept; 0 means no limit.
	MaxLines int
	// Mode is which part is kept.
	Mode Mode
}

// defaultLimits is the seed's table (grep 30,000 tail, glob 20,000 tail,
// edit_file and apply_patch 10,000 tail, write_file 1,000 tail), plus the
// upstream head-and-tail limits of read_file (50,000) and shell (30,000),
// which the seed's "other tools" row leaves open. Other tools have no
// limit beyond the 1 MiB retention cap and their own caps (web_fetch
// 100 KB).
var defaultLimits = map[string]Limit{
	"grep":        {MaxChars: 30_000, Mode: Tail},
	"glob":        {MaxChars: 20_000, Mode: Tail},
	"edit_file":   {MaxChars: 10_000, Mode: Tail},
	"apply_patch": {MaxChars: 10_000, Mode: Tail},
	"write_file":  {MaxChars: 1_000, Mode: Tail},
	"read_file":   {MaxChars: 50_000, Mode: HeadTail},
	"shell":       {MaxChars: 30_000, Mode: HeadTail},
	"spawn_agent": {MaxChars: 20_000, Mode: HeadTail},
	"wait":        {MaxChars: 20_000, Mode: HeadTail},
}

// DefaultLimit returns the default output limit of a tool (zero: none).
func DefaultLimit(name string) Limit { return defaultLimits[name] }

// retentionBytes caps what a tool result keeps at all (head and tail), as
// the ToolCallCompleted event's output.
const retentionBytes = 1 << 20

// retain caps s at retentionBytes, keeping head and tail halves.
func retain(s string) string {
	r, _ := retainCount(s)
	return r
}

// retainCount is retain, also returning how many bytes of s it dropped.
func retainCount(s string) (kept string, dropped int64) {
	if len(s) <= retentionBytes {
		return s, 0
	}
	half := retentionBytes / 2
	head := s[:runeStart(s, half)]
	tail := s[runeStart(s, len(s)-half):]
	cut := len(s) - len(head) - len(tail)
	return head + fmt.Sprintf("\n\n[... %d bytes omitted ...]\n\n", cut) + tail, int64(cut)
}

// runeStart moves i back to the start of the rune it falls in.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// truncate cuts s to l, returning what the model sees and how many
// characters were removed (lines mode counts the characters of the removed
// lines too).
func truncate(s string, l Limit) (string, int64) { return truncateFor(s, l, "") }

// truncateFor is truncate with the notes naming how to see the rest of the
// tool's output.
func truncateFor(s string, l Limit, tool string) (string, int64) {
	var omitted int64
	if l.MaxChars > 0 && len(s) > l.MaxChars {
		if n := utf8.RuneCountInString(s); n > l.MaxChars {
			s, omitted = truncateChars(s, n, l, tool)
		}
	}
	if l.MaxLines > 0 {
		var o int64
		s, o = truncateLines(s, l, tool)
		omitted += o
	}
	return s, omitted
}

// byteOffset returns the byte offset of the rune numbered r (0-based).
func byteOffset(s string, r int) int {
	i := 0
	for off := range s {
		if i == r {
			return off
		}
		i++
	}
	return len(s)
}

// seeRest tells the model how to see what a tool's limit cut.
func seeRest(tool string) string {
	switch tool {
	case "read_file", "Read", "read_many_files":
		return "To see the rest, read the file again with offset and limit set to the lines you need."
	case "shell", "Bash":
		return "To see the rest, run the command again with its output redirected to a file (cmd > /tmp/out.txt 2>&1), then read that file in parts with read_file's offset and limit, or filter it with grep, head or tail."
	case "grep", "Grep", "glob", "Glob", "list_dir":
		return "To see the rest, search again with a narrower pattern or path."
	case "web_fetch":
		return "To see the rest, fetch it again with a prompt asking for the part you need."
	}
	return "To see the rest, call the tool again with narrower arguments."
}

func truncateChars(s string, n int, l Limit, tool string) (string, int64) {
	removed := n - l.MaxChars
	note := seeRest(tool)
	switch l.Mode {
	case Tail:
		cut := byteOffset(s, removed)
		return fmt.Sprintf("[WARNING: Tool output was truncated. The first %d characters were removed; the last %d are shown. %s]\n\n", removed, l.MaxChars, note) + s[cut:], int64(removed)
	case Head:
		cut := byteOffset(s, l.MaxChars)
		return s[:cut] + fmt.Sprintf("\n\n[WARNING: Tool output was truncated. The last %d characters were removed. %s]", removed, note), int64(removed)
	}
	headChars := l.MaxChars / 2
	tailChars := l.MaxChars - headChars
	head := s[:byteOffset(s, headChars)]
	tail := s[byteOffset(s, n-tailChars):]
	return head + fmt.Sprintf("\n\n[WARNING: Tool output was truncated. %d characters were removed from the middle. %s]\n\n", removed, note) + tail, int64(removed)
}

func truncateLines(s string, l Limit, tool string) (string, int64) {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) <= l.MaxLines {
		return s, 0
	}
	dropped := len(lines) - l.MaxLines
	var kept, removed []string
	marker := func(where string, removed []string) string {
		return fmt.Sprintf("[... %d lines (%d characters) omitted %s; %d of %d lines shown. %s ...]", dropped, chars(removed), where, l.MaxLines, len(lines), seeRest(tool))
	}
	switch l.Mode {
	case Tail:
		removed, kept = lines[:dropped], lines[dropped:]
		return marker("from the start", removed) + "\n" + strings.Join(kept, ""), chars(removed)
	case Head:
		kept, removed = lines[:l.MaxLines], lines[l.MaxLines:]
		return strings.Join(kept, "") + "\n" + marker("from the end", removed), chars(removed)
	}
	h := l.MaxLines / 2
	t := l.MaxLines - h
	removed = lines[h : len(lines)-t]
	return strings.Join(lines[:h], "") + marker("from the middle", removed) + "\n" + strings.Join(lines[len(lines)-t:], ""), chars(removed)
}

func chars(lines []string) int64 {
	var n int64
	for _, l := range lines {
		n += int64(utf8.RuneCountInString(l))
	}
	return n
}
