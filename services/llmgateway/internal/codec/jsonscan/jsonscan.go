// Package jsonscan walks JSON text without building values, so a stream
// decoder can pick the few fields it needs and skip the rest with no
// allocation. Only the strings a caller keeps are copied.
//
// Scanner is the pull reader; Object, Array and Valid are callback helpers
// on top of it that hand out object members and array elements as raw
// sub-slices of the input, and String, Unquoted, Int, Bool, IsNull and
// Equal read such raw values.
//
// Everything walked is validated as encoding/json would (strings, escapes,
// numbers, literals, nesting up to maxDepth), so a truncated or malformed
// chunk is reported as an error rather than silently half-read. Invalid
// UTF-8 and unpaired surrogates in decoded strings become U+FFFD, as in
// encoding/json: the text ends up in protobuf strings, which must be valid
// UTF-8.
package jsonscan

import "errors"

// ErrSyntax reports malformed JSON to the callback helpers' callers.
var ErrSyntax = errors.New("jsonscan: malformed JSON")

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

// Valid reports whether d is exactly one JSON value (with optional
// surrounding whitespace).
func Valid(d []byte) bool {
	var s Scanner
	s.Reset(d)
	s.Skip()
	return s.End() == nil
}

// Object calls f with each member of the JSON object d: the raw key bytes
// (without quotes, escapes not decoded) and the raw value. It stops at the
// first error f returns.
func Object(d []byte, f func(key, val []byte) error) error {
	var s Scanner
	s.Reset(d)
	if !s.Object() {
		return ErrSyntax
	}
	for s.More() {
		k := s.rawKey()
		v := s.Raw()
		if s.err != nil {
			return ErrSyntax
		}
		if err := f(k, v); err != nil {
			return err
		}
	}
	if s.End() != nil {
		return ErrSyntax
	}
	return nil
}

// Array calls f with each element of the JSON array d.
func Array(d []byte, f func(val []byte) error) error {
	var s Scanner
	s.Reset(d)
	if !s.Array() {
		return ErrSyntax
	}
	for s.More() {
		v := s.Raw()
		if s.err != nil {
			return ErrSyntax
		}
		if err := f(v); err != nil {
			return err
		}
	}
	if s.End() != nil {
		return ErrSyntax
	}
	return nil
}

// IsNull reports whether v is the literal null.
func IsNull(v []byte) bool { return string(v) == "null" }

// Unquoted returns the decoded contents of the string literal v: a
// sub-slice of v when it needs no decoding, else the decoding written to
// scratch[:0]. The result is only valid until v or scratch change.
func Unquoted(scratch, v []byte) ([]byte, error) {
	var s Scanner
	s.Reset(v)
	s.buf = scratch
	b := s.String()
	if s.End() != nil {
		return nil, ErrSyntax
	}
	return b, nil
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

// Int parses an integer value; null gives 0, and a number with a fraction
// or exponent (1e3, 12.0) its integer part.
func Int(v []byte) (int64, error) {
	var s Scanner
	s.Reset(v)
	n := s.Int()
	if s.End() != nil {
		return 0, ErrSyntax
	}
	return n, nil
}

// Bool parses true or false; null gives false.
func Bool(v []byte) bool { return string(v) == "true" }
