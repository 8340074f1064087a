package jsonscan

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner walks one JSON document in place, validating as it goes, so the
// stream decoders can pick a few fields out of a chunk without building a
// struct: a string without escapes is returned as a sub-slice of the input,
// and an escaped one is unescaped into a reused buffer. Errors are sticky:
// after the first, every method is a no-op and Err reports it.
type Scanner struct {
	data  []byte
	pos   int
	err   error
	buf   []byte
	depth int
	// Bit i of close is set when container i is an object, of first when
	// container i has produced no element yet.
	close, first [maxDepth / 64]uint64
}

// Reset starts scanning data.
func (s *Scanner) Reset(data []byte) {
	// close and first need no clearing: open sets both bits of a level.
	s.data, s.pos, s.err, s.depth = data, 0, nil, 0
}

// Err returns the first error met.
func (s *Scanner) Err() error { return s.err }

// Fail records err unless one is already recorded.
func (s *Scanner) Fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *Scanner) syntax() {
	if s.err == nil {
		s.err = &SyntaxError{Offset: s.pos}
	}
}

// SyntaxError locates malformed JSON.
type SyntaxError struct{ Offset int }

func (e *SyntaxError) Error() string { return "invalid JSON at offset " + strconv.Itoa(e.Offset) }

func (s *Scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// Peek returns the next non-space byte, or 0 at the end or after an error.
func (s *Scanner) Peek() byte {
	if s.err != nil {
		return 0
	}
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

// End checks that nothing but space follows the document.
func (s *Scanner) End() error {
	if s.err == nil {
		s.ws()
		if s.pos != len(s.data) {
			s.syntax()
		}
	}
	return s.err
}

// Null consumes a null literal if one is next.
func (s *Scanner) Null() bool {
	if s.Peek() == 'n' {
		s.literal("null")
		return s.err == nil
	}
	return false
}

func (s *Scanner) literal(lit string) {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		s.syntax()
		return
	}
	s.pos += len(lit)
}

func (s *Scanner) open(c byte, object bool) bool {
	if s.Peek() != c {
		s.syntax()
		return false
	}
	if s.depth >= maxDepth {
		s.Fail(errors.New("JSON nested too deeply"))
		return false
	}
	s.pos++
	w, bit := s.depth/64, uint64(1)<<(s.depth%64)
	if object {
		s.close[w] |= bit
	} else {
		s.close[w] &^= bit
	}
	s.first[w] |= bit
	s.depth++
	return true
}

// Object enters an object; iterate its members with More and Key.
func (s *Scanner) Object() bool { return s.open('{', true) }

// Array enters an array; iterate its elements with More.
func (s *Scanner) Array() bool { return s.open('[', false) }

// More reports whether the current object or array has another member,
// consuming the separating comma, or consumes the closing bracket.
func (s *Scanner) More() bool {
	if s.err != nil || s.depth == 0 {
		return false
	}
	w, bit := (s.depth-1)/64, uint64(1)<<((s.depth-1)%64)
	want := byte(']')
	if s.close[w]&bit != 0 {
		want = '}'
	}
	c := s.Peek()
	if c == want {
		s.pos++
		s.depth--
		return false
	}
	if s.first[w]&bit != 0 {
		s.first[w] &^= bit
		return c != 0 || s.failEnd()
	}
	if c != ',' {
		s.syntax()
		return false
	}
	s.pos++
	return true
}

func (s *Scanner) failEnd() bool { s.syntax(); return false }

// Key reads an object member's name and its colon.
func (s *Scanner) Key() []byte {
	k := s.String()
	if s.Peek() != ':' {
		s.syntax()
		return nil
	}
	s.pos++
	return k
}

// String reads a string. The result aliases the input or an internal
// buffer: it is valid until the next call.
func (s *Scanner) String() []byte {
	if s.Peek() != '"' {
		s.syntax()
		return nil
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.data[start : s.pos-1]
		case c == '\\':
			return s.unescape(start)
		case c < 0x20:
			s.syntax()
			return nil
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && size == 1 {
				return s.unescape(start) // invalid UTF-8 is replaced there
			}
			s.pos += size
			continue
		}
		s.pos++
	}
	s.syntax()
	return nil
}

func (s *Scanner) unescape(start int) []byte {
	b := append(s.buf[:0], s.data[start:s.pos]...)
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			s.buf = b
			return b
		case c < 0x20:
			s.syntax()
			return nil
		case c >= utf8.RuneSelf:
			// Invalid UTF-8 becomes U+FFFD, as encoding/json does: the text
			// ends up in protobuf strings, which must be valid UTF-8.
			r, size := utf8.DecodeRune(s.data[s.pos:])
			b = utf8.AppendRune(b, r)
			s.pos += size
			continue
		case c != '\\':
			b = append(b, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := s.hex4()
			if r < 0 {
				return nil
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate pairs with a following \u low surrogate;
				// an unpaired one decodes to U+FFFD, as encoding/json does.
				if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
					save := s.pos
					s.pos += 2
					r2 := s.hex4()
					if r2 < 0 {
						return nil
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
					} else {
						s.pos = save
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			s.syntax()
			return nil
		}
	}
	s.syntax()
	return nil
}

func (s *Scanner) hex4() rune {
	if len(s.data)-s.pos < 4 {
		s.syntax()
		return -1
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			s.syntax()
			return -1
		}
		r = r<<4 | rune(c)
	}
	s.pos += 4
	return r
}

// number consumes a JSON number and returns its text.
func (s *Scanner) number() []byte {
	s.ws()
	start := s.pos
	d := s.data
	i := s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > j
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		s.syntax()
		return nil
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			s.pos = i
			s.syntax()
			return nil
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			s.pos = i
			s.syntax()
			return nil
		}
	}
	s.pos = i
	return d[start:i]
}

// Int reads an integer; null reads as 0.
func (s *Scanner) Int() int64 {
	if s.Null() {
		return 0
	}
	n := s.number()
	if s.err != nil {
		return 0
	}
	var v int64
	neg := false
	for i, c := range n {
		if i == 0 && c == '-' {
			neg = true
			continue
		}
		if c < '0' || c > '9' {
			// A float where an integer belongs: take its integer part.
			f, err := strconv.ParseFloat(string(n), 64)
			if err != nil {
				s.Fail(err)
			}
			return int64(f)
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v
}

// rawKey reads an object member's name and its colon, returning the name
// as it stands between the quotes (escapes not decoded).
func (s *Scanner) rawKey() []byte {
	k := s.rawString()
	if s.Peek() != ':' {
		s.syntax()
		return nil
	}
	s.pos++
	return k
}

// rawString validates and skips a string as String does, without decoding
// it, and returns what stands between the quotes.
func (s *Scanner) rawString() []byte {
	if s.Peek() != '"' {
		s.syntax()
		return nil
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c == '"':
			s.pos++
			return s.data[start : s.pos-1]
		case c < 0x20:
			s.syntax()
			return nil
		case c == '\\':
			if s.pos+1 >= len(s.data) {
				s.pos = len(s.data)
				s.syntax()
				return nil
			}
			switch s.data[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				s.pos += 2
				if s.hex4() < 0 {
					return nil
				}
			default:
				s.pos += 2
				s.syntax()
				return nil
			}
		default:
			s.pos++
		}
	}
	s.syntax()
	return nil
}

// Skip validates and skips one value.
func (s *Scanner) Skip() {
	switch s.Peek() {
	case '{':
		s.Object()
		for s.More() {
			s.rawKey()
			s.Skip()
		}
	case '[':
		s.Array()
		for s.More() {
			s.Skip()
		}
	case '"':
		s.rawString()
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.number()
	}
}

// Raw skips one value and returns its bytes, aliasing the input.
func (s *Scanner) Raw() []byte {
	s.ws()
	start := s.pos
	s.Skip()
	if s.err != nil {
		return nil
	}
	return s.data[start:s.pos]
}
