package bedrock

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// errJSON reports a payload that is not the JSON the decoder expects.
var errJSON = errors.New("malformed JSON payload")

// jscan is a minimal pull reader for the small JSON objects in ConverseStream
// event payloads. encoding/json costs several allocations per event (reflection
// state, the scanner's stack, every string field); this reader allocates
// nothing itself, so a text delta costs only its own string.
//
// Strings are returned as byte slices into the payload, or into scratch when
// they hold escapes; both are valid until the next call.
type jscan struct {
	b       []byte
	i       int
	err     error
	scratch []byte
}

func (s *jscan) reset(b []byte) {
	s.b, s.i, s.err = b, 0, nil
}

func (s *jscan) fail() {
	if s.err == nil {
		s.err = errJSON
	}
	s.i = len(s.b)
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// object consumes '{' and reports whether a value that is an object starts here;
// anything else (null included) is skipped and reports false.
func (s *jscan) object() bool {
	if s.peek() == '{' {
		s.i++
		return true
	}
	s.skip()
	return false
}

// key returns the next key of the current object and consumes its ':', or
// false at the object's end. Call it after object() and after each value.
func (s *jscan) key() ([]byte, bool) {
	c := s.peek()
	if c == ',' {
		s.i++
		c = s.peek()
	}
	if c == '}' {
		s.i++
		return nil, false
	}
	if c != '"' {
		s.fail()
		return nil, false
	}
	// Keys are plain ASCII in this protocol: take them raw, escapes and all,
	// so a key never disturbs the scratch buffer of a string being read.
	start := s.i + 1
	end, ok := s.stringEnd()
	if !ok {
		s.fail()
		return nil, false
	}
	k := s.b[start:end]
	s.i = end + 1
	if s.peek() != ':' {
		s.fail()
		return nil, false
	}
	s.i++
	return k, true
}

// stringEnd returns the index of the closing quote of the string at s.i.
func (s *jscan) stringEnd() (int, bool) {
	for j := s.i + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			return j, true
		}
	}
	return 0, false
}

// str reads a string value; a null reads as empty.
func (s *jscan) str() []byte {
	c := s.peek()
	if c == 'n' {
		s.skip()
		return nil
	}
	if c != '"' {
		s.fail()
		return nil
	}
	start := s.i + 1
	j := start
	for j < len(s.b) && s.b[j] != '"' && s.b[j] != '\\' {
		j++
	}
	if j < len(s.b) && s.b[j] == '"' {
		s.i = j + 1
		return s.b[start:j]
	}
	out := append(s.scratch[:0], s.b[start:j]...)
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			s.scratch = out
			return out
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(s.b) {
			break
		}
		e := s.b[j+1]
		j += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s.b, j)
			if !ok {
				s.fail()
				return nil
			}
			j += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if j+6 <= len(s.b) && s.b[j] == '\\' && s.b[j+1] == 'u' {
					r2, ok = hex4(s.b, j+2)
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					j += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			s.fail()
			return nil
		}
	}
	s.scratch = out
	s.fail()
	return nil
}

func hex4(b []byte, j int) (rune, bool) {
	if j+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[j : j+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// int reads an integer value; null reads as 0.
func (s *jscan) int() int64 {
	raw := s.raw()
	if s.err != nil || string(raw) == "null" {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		s.fail()
	}
	return n
}

// raw returns the next value's bytes exactly as they appear.
func (s *jscan) raw() []byte {
	s.ws()
	start := s.i
	s.skip()
	if s.err != nil {
		return nil
	}
	return s.b[start:s.i]
}

// skip consumes one value of any type.
func (s *jscan) skip() {
	switch c := s.peek(); c {
	case '"':
		end, ok := s.stringEnd()
		if !ok {
			s.fail()
			return
		}
		s.i = end + 1
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				end, ok := s.stringEnd()
				if !ok {
					s.fail()
					return
				}
				s.i = end
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return
				}
			}
			s.i++
		}
		s.fail()
	case 0:
		s.fail()
	default:
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if s.i == start {
					s.fail()
				}
				return
			}
			s.i++
		}
		if s.i == start {
			s.fail()
		}
	}
}

// end checks that nothing but space follows the top-level value.
func (s *jscan) end() {
	if s.peek() != 0 {
		s.fail()
	}
}
