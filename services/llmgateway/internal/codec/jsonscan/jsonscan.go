// Package jsonscan walks JSON text without building values: object members
// and array elements are handed out as sub-slices of the input, so a stream
// decoder can pick the few fields it needs and skip the rest with no
// allocation. Only the strings a caller keeps are copied (String).
//
// The scanner validates what it walks (strings, escapes, literals, nesting),
// so a truncated or malformed chunk is reported as an error rather than
// silently half-read.
package jsonscan

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax reports malformed JSON.
var ErrSyntax = errors.New("jsonscan: malformed JSON")

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

func skipWS(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the index just past the value starting at d[i].
func skipValue(d []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, ErrSyntax
	}
	i = skipWS(d, i)
	if i >= len(d) {
		return 0, ErrSyntax
	}
	switch c := d[i]; {
	case c == '"':
		return skipString(d, i)
	case c == '{':
		i = skipWS(d, i+1)
		if i < len(d) && d[i] == '}' {
			return i + 1, nil
		}
		for {
			i = skipWS(d, i)
			if i >= len(d) || d[i] != '"' {
				return 0, ErrSyntax
			}
			var err error
			if i, err = skipString(d, i); err != nil {
				return 0, err
			}
			i = skipWS(d, i)
			if i >= len(d) || d[i] != ':' {
				return 0, ErrSyntax
			}
			if i, err = skipValue(d, i+1, depth+1); err != nil {
				return 0, err
			}
			i = skipWS(d, i)
			if i >= len(d) {
				return 0, ErrSyntax
			}
			if d[i] == '}' {
				return i + 1, nil
			}
			if d[i] != ',' {
				return 0, ErrSyntax
			}
			i++
		}
	case c == '[':
		i = skipWS(d, i+1)
		if i < len(d) && d[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = skipValue(d, i, depth+1); err != nil {
				return 0, err
			}
			i = skipWS(d, i)
			if i >= len(d) {
				return 0, ErrSyntax
			}
			if d[i] == ']' {
				return i + 1, nil
			}
			if d[i] != ',' {
				return 0, ErrSyntax
			}
			i++
		}
	case c == 't':
		return skipLit(d, i, "true")
	case c == 'f':
		return skipLit(d, i, "false")
	case c == 'n':
		return skipLit(d, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		j := i
		for j < len(d) {
			switch b := d[j]; {
			case b >= '0' && b <= '9', b == '-', b == '+', b == '.', b == 'e', b == 'E':
				j++
				continue
			}
			break
		}
		return j, nil
	}
	return 0, ErrSyntax
}

func skipLit(d []byte, i int, lit string) (int, error) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, ErrSyntax
	}
	return i + len(lit), nil
}

// skipString returns the index just past the string literal at d[i].
func skipString(d []byte, i int) (int, error) {
	i++
	for i < len(d) {
		switch c := d[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(d) {
				return 0, ErrSyntax
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) {
					return 0, ErrSyntax
				}
				if _, ok := hex4(d[i+2 : i+6]); !ok {
					return 0, ErrSyntax
				}
				i += 6
			default:
				return 0, ErrSyntax
			}
		case c < 0x20:
			return 0, ErrSyntax
		default:
			i++
		}
	}
	return 0, ErrSyntax
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Valid reports whether d is exactly one JSON value (with optional
// surrounding whitespace).
func Valid(d []byte) bool {
	i, err := skipValue(d, 0, 0)
	return err == nil && skipWS(d, i) == len(d)
}

// Object calls f with each member of the JSON object d: the raw key bytes
// (without quotes, escapes not decoded) and the raw value. It stops at the
// first error f returns.
func Object(d []byte, f func(key, val []byte) error) error {
	i := skipWS(d, 0)
	if i >= len(d) || d[i] != '{' {
		return ErrSyntax
	}
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == '}' {
		return trailing(d, i+1)
	}
	for {
		i = skipWS(d, i)
		if i >= len(d) || d[i] != '"' {
			return ErrSyntax
		}
		end, err := skipString(d, i)
		if err != nil {
			return err
		}
		key := d[i+1 : end-1]
		i = skipWS(d, end)
		if i >= len(d) || d[i] != ':' {
			return ErrSyntax
		}
		vstart := skipWS(d, i+1)
		vend, err := skipValue(d, vstart, 1)
		if err != nil {
			return err
		}
		if err := f(key, d[vstart:vend]); err != nil {
			return err
		}
		i = skipWS(d, vend)
		if i >= len(d) {
			return ErrSyntax
		}
		if d[i] == '}' {
			return trailing(d, i+1)
		}
		if d[i] != ',' {
			return ErrSyntax
		}
		i++
	}
}

// Array calls f with each element of the JSON array d.
func Array(d []byte, f func(val []byte) error) error {
	i := skipWS(d, 0)
	if i >= len(d) || d[i] != '[' {
		return ErrSyntax
	}
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == ']' {
		return trailing(d, i+1)
	}
	for {
		vstart := skipWS(d, i)
		vend, err := skipValue(d, vstart, 1)
		if err != nil {
			return err
		}
		if err := f(d[vstart:vend]); err != nil {
			return err
		}
		i = skipWS(d, vend)
		if i >= len(d) {
			return ErrSyntax
		}
		if d[i] == ']' {
			return trailing(d, i+1)
		}
		if d[i] != ',' {
			return ErrSyntax
		}
		i++
	}
}

func trailing(d []byte, i int) error {
	if skipWS(d, i) != len(d) {
		return ErrSyntax
	}
	return nil
}

// IsNull reports whether v is the literal null.
func IsNull(v []byte) bool { return string(v) == "null" }

// AppendUnquoted appends the decoded contents of the JSON string literal v
// (quotes included) to buf. Invalid surrogates become U+FFFD, as in
// encoding/json.
func AppendUnquoted(buf, v []byte) ([]byte, error) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return buf, ErrSyntax
	}
	s := v[1 : len(v)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			buf = append(buf, s[i:j]...)
			i = j
			continue
		}
		if i+1 >= len(s) {
			return buf, ErrSyntax
		}
		switch s[i+1] {
		case '"', '\\', '/':
			buf = append(buf, s[i+1])
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			if i+6 > len(s) {
				return buf, ErrSyntax
			}
			r, ok := hex4(s[i+2 : i+6])
			if !ok {
				return buf, ErrSyntax
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if r2, ok := hex4(s[i+2 : i+6]); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							buf = utf8.AppendRune(buf, dec)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
			continue
		default:
			return buf, ErrSyntax
		}
		i += 2
	}
	return buf, nil
}

// Unquoted returns the decoded contents of the string literal v: a
// sub-slice of v when it has no escapes, else the decoding appended to
// scratch[:0]. The result is only valid until v or scratch change.
func Unquoted(scratch, v []byte) ([]byte, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		inner := v[1 : len(v)-1]
		plain := true
		for _, c := range inner {
			if c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			return inner, nil
		}
	}
	return AppendUnquoted(scratch[:0], v)
}

// String decodes the string literal v into a new string (its one
// allocation). null gives "".
func String(scratch *[]byte, v []byte) (string, error) {
	if IsNull(v) {
		return "", nil
	}
	b, err := Unquoted(*scratch, v)
	if err != nil {
		return "", err
	}
	if len(b) > 0 && len(v) > 2 && &b[0] != &v[1] {
		*scratch = b[:0] // keep the grown buffer for the next escape
	}
	return string(b), nil
}

// Equal reports whether the string literal v equals s (no escapes in v).
func Equal(v []byte, s string) bool {
	return len(v) == len(s)+2 && v[0] == '"' && string(v[1:len(v)-1]) == s
}

// Int parses an integer value; null gives 0.
func Int(v []byte) (int64, error) {
	if IsNull(v) {
		return 0, nil
	}
	var n int64
	neg := false
	i := 0
	if len(v) > 0 && v[0] == '-' {
		neg, i = true, 1
	}
	if i >= len(v) {
		return 0, ErrSyntax
	}
	for ; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			// Not a plain integer: fall back to a float parse (1e3, 12.0).
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return 0, ErrSyntax
			}
			return int64(f), nil
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// Bool parses true or false; null gives false.
func Bool(v []byte) bool { return string(v) == "true" }
