package driver

import (
	"fmt"
	"path"
	"regexp/syntax"
	"slices"
	"strings"
)

// ValidatePattern checks a grep regex up front, so a bad one is refused
// with a reason rather than failing differently in each back end. The
// dialect is the part of RE2's that ripgrep and POSIX ERE (GNU grep -E)
// read the same way: RE2 refuses backreferences and lookaround, and
// [PortablePattern] refuses what the two back ends would read differently.
//
// Matching is by bytes, as in the C locale: "." and negated classes match
// one byte, \w, \s, \d and \b are ASCII, and case-insensitive matching
// folds ASCII letters only ("É" does not match "é"). A non-ASCII character
// in the pattern matches its UTF-8 bytes.
func ValidatePattern(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("%w: the pattern is empty", ErrInvalidPattern)
	}
	if _, err := syntax.Parse(pattern, syntax.Perl); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPattern, err)
	}
	return PortablePattern(pattern)
}

// portableEscapes are the characters both back ends read as themselves
// after a backslash (besides the classes \d \D \w \W \s \S \b \B).
// ripgrep refuses escapes of other punctuation, and GNU grep gives some
// a meaning of its own (\< \> \` \').
const portableEscapes = `.^$*+?()[]{}|\-#&~`

// PortablePattern refuses the constructs RE2 accepts that ripgrep and
// GNU grep -E read differently, saying what to write instead. The pattern
// must parse as RE2.
func PortablePattern(p string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPattern, fmt.Sprintf(format, args...))
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\' && i+1 < len(p):
			i++
			n := p[i]
			if strings.IndexByte(portableEscapes, n) < 0 && strings.IndexByte("dDwWsSbB", n) < 0 {
				return bad(`the escape \%c at offset %d is not portable between ripgrep and grep -E; write the character itself, or a bracket expression such as [[:space:]]`, rune(n), i-1)
			}
		case c == '(' && i+1 < len(p) && p[i+1] == '?':
			return bad("the group at offset %d starts with (?, which grep -E does not have (flags, non-capturing or named groups); use case_insensitive, or a plain group", i)
		case c == '{':
			end := strings.IndexByte(p[i:], '}')
			if end < 0 || !isRepeat(p[i+1:i+end]) {
				return bad(`the '{' at offset %d does not start a repetition {n}, {n,} or {n,m}; write \{ for a literal brace`, i)
			}
			i += end
		case c == '[':
			end, err := bracket(p, i)
			if err != nil {
				return bad("%s", err)
			}
			i = end
		}
	}
	return nil
}

// posixClasses are the bracket classes both back ends have.
var posixClasses = []string{"alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper", "xdigit"}

// isRepeat reports whether s, the text between braces, is n, n, or n,m.
func isRepeat(s string) bool {
	lo, hi, comma := strings.Cut(s, ",")
	digits := func(x string) bool {
		return x != "" && strings.Trim(x, "0123456789") == ""
	}
	return digits(lo) && (!comma || hi == "" || digits(hi))
}

// bracket checks the bracket expression starting at p[i] and returns the
// offset of its closing ']'.
func bracket(p string, i int) (int, error) {
	start := i
	i++
	if i < len(p) && p[i] == '^' {
		i++
	}
	if i < len(p) && p[i] == ']' {
		i++ // a ']' first is literal
	}
	for ; i < len(p); i++ {
		switch c := p[i]; {
		case c == ']':
			return i, nil
		case c == '[' && i+1 < len(p) && p[i+1] == ':':
			end := strings.Index(p[i+2:], ":]")
			if end < 0 {
				return 0, fmt.Errorf("the class at offset %d is not closed", i)
			}
			if name := p[i+2 : i+2+end]; !slices.Contains(posixClasses, name) {
				return 0, fmt.Errorf("[:%s:] at offset %d is not a POSIX class; use one of %s", name, i, strings.Join(posixClasses, ", "))
			}
			i += 2 + end + 1
		case c == '\\':
			if i+1 < len(p) && (p[i+1] == 'd' || p[i+1] == '\\') {
				i++
				continue
			}
			return 0, fmt.Errorf(`the bracket expression at offset %d has a backslash escape; inside brackets only \d and \\ are portable (put ']' first and '-' last to match them)`, start)
		case c >= 0x80:
			return 0, fmt.Errorf("the bracket expression at offset %d holds a non-ASCII character, which matching by bytes would split; use alternation such as (é|è)", start)
		}
	}
	return 0, fmt.Errorf("the bracket expression at offset %d is not closed", start)
}

// ValidateGlobFilter checks a grep file-name filter such as "*.go". It must
// be a name pattern (no "/") without brace alternation, which ripgrep has
// and grep --include does not, and must not start with '!', which ripgrep
// reads as "exclude".
func ValidateGlobFilter(g string) error {
	if g == "" {
		return nil
	}
	if strings.ContainsAny(g, "/\\{}") {
		return fmt.Errorf("%w: glob filter %q must be a file-name pattern without '/', '\\' or braces", ErrInvalidPattern, g)
	}
	if strings.HasPrefix(g, "!") {
		return fmt.Errorf("%w: glob filter %q: a leading '!' is ripgrep's exclusion, which grep --include lacks; use [!...] or [^...] inside brackets", ErrInvalidPattern, g)
	}
	if _, err := path.Match(posixBrackets(g), ""); err != nil {
		return fmt.Errorf("%w: glob filter %q: unbalanced brackets", ErrInvalidPattern, g)
	}
	return nil
}

// ValidateGlob checks a Glob pattern: relative, "/"-separated, no
// backslash, no ".." segment, balanced brackets.
func ValidateGlob(pattern string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: glob %q %s", ErrInvalidPattern, pattern, why)
	}
	switch {
	case pattern == "":
		return bad("is empty")
	case strings.HasPrefix(pattern, "/"):
		return bad("is absolute; give it relative to path")
	case strings.Contains(pattern, "\\"):
		return bad("contains a backslash; use '/'")
	}
	for seg := range strings.SplitSeq(pattern, "/") {
		if seg == ".." {
			return bad("has a '..' segment")
		}
		if _, err := path.Match(posixBrackets(seg), ""); err != nil {
			return bad("has unbalanced brackets")
		}
	}
	return nil
}

// MatchGlob reports whether the "/"-separated relative path name matches a
// pattern that passed [ValidateGlob]: "*", "?" and "[...]" stay within a
// segment, and a "**" segment matches any number of segments.
func MatchGlob(pattern, name string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true
			}
			for i := range name {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(posixBrackets(pat[0]), name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// MatchName reports whether a file name matches a glob filter that passed
// [ValidateGlobFilter], as ripgrep's --glob and grep's --include do.
func MatchName(pattern, name string) bool {
	ok, _ := path.Match(posixBrackets(pattern), name)
	return ok
}

// posixBrackets rewrites POSIX bracket expressions into path.Match's:
// the negation "[!" becomes "[^", so "[!a]" matches any character but "a"
// as in the shell, ripgrep and grep --include, and a ']' first in the
// brackets, literal in POSIX, is escaped. A "!" elsewhere stays literal.
func posixBrackets(p string) string {
	if !strings.Contains(p, "[") {
		return p
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(c)
			i++
			c = p[i]
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte('[')
			if i+1 < len(p) && (p[i+1] == '!' || p[i+1] == '^') {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String()
}
