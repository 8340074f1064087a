package driver

import (
	"fmt"
	"path"
	"regexp/syntax"
	"strings"
)

// ValidatePattern checks a grep regex up front, so a bad one is refused
// with a reason rather than failing differently in each back end. The
// dialect is RE2's, which ripgrep and POSIX ERE largely share; RE2 also
// refuses backreferences and lookaround, which only one back end has.
func ValidatePattern(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("%w: the pattern is empty", ErrInvalidPattern)
	}
	if _, err := syntax.Parse(pattern, syntax.Perl); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPattern, err)
	}
	return nil
}

// ValidateGlobFilter checks a grep file-name filter such as "*.go". It must
// be a name pattern (no "/") without brace alternation, which ripgrep has
// and grep --include does not.
func ValidateGlobFilter(g string) error {
	if g == "" {
		return nil
	}
	if strings.ContainsAny(g, "/\\{}") {
		return fmt.Errorf("%w: glob filter %q must be a file-name pattern without '/', '\\' or braces", ErrInvalidPattern, g)
	}
	if _, err := path.Match(g, ""); err != nil {
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
		if _, err := path.Match(seg, ""); err != nil {
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
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
