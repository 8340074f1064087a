// Package grepout reads what ripgrep and POSIX grep print, and writes
// patterns each reads as the other does: the search back ends shared by the
// drivers that run them (local, and daytona inside its sandbox).
package grepout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// MaxLineBytes is how much of a matching line a result carries.
const MaxLineBytes = 2000

// ParseNull reads grep's "path\0line:text\n" records. The name is read up
// to its NUL, so a newline in a file name is part of the name. It reports
// whether max was reached with more to come.
func ParseNull(br *bufio.Reader, name func([]byte) string, max int, out *[]driver.GrepMatch) (bool, error) {
	for {
		printed, err := br.ReadBytes(0)
		if err == io.EOF && len(printed) == 0 {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("output ends inside a record %q", Truncate(printed, 200))
		}
		rest, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return false, err
		}
		num, text, ok := bytes.Cut(bytes.TrimSuffix(rest, []byte{'\n'}), []byte{':'})
		line, perr := strconv.ParseInt(string(num), 10, 64)
		if !ok || perr != nil {
			return false, fmt.Errorf("printed an unparseable record %q", Truncate(rest, 200))
		}
		if len(*out) == max {
			return true, nil
		}
		*out = append(*out, newMatch(name(printed[:len(printed)-1]), line, text))
	}
}

// rgData is the text or bytes of one field of ripgrep's JSON output.
type rgData struct {
	Text  *string `json:"text"`
	Bytes []byte  `json:"bytes"` // base64 in the JSON
}

func (d rgData) raw() []byte {
	if d.Text != nil {
		return []byte(*d.Text)
	}
	return d.Bytes
}

type rgMessage struct {
	Type string `json:"type"`
	Data struct {
		Path         rgData `json:"path"`
		Lines        rgData `json:"lines"`
		LineNumber   int64  `json:"line_number"`
		BinaryOffset *int64 `json:"binary_offset"`
	} `json:"data"`
}

// ParseRipgrepJSON reads ripgrep's --json messages. A file's matches count once
// its "end" says it is not binary: a binary file gives none, as grep -I
// and ripgrep's own directory search skip binary files (a file named
// outright is otherwise searched and its NUL bytes printed).
//
// Messages are read token by token, never whole: a match message lists
// every submatch of its line, so one long line of a hostile file makes a
// message fifty times its size (a 10 MB line, 537 MB), and only its path,
// line and text are kept.
func ParseRipgrepJSON(br *bufio.Reader, name func([]byte) string, max int, out *[]driver.GrepMatch) (bool, error) {
	var pending []driver.GrepMatch
	dec := json.NewDecoder(br)
	for {
		m, err := readMessage(dec)
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("printed an unparseable message: %v", err)
		}
		switch m.Type {
		case "begin":
			pending = pending[:0]
		case "match":
			pending = append(pending, newMatch(name(m.Data.Path.raw()), m.Data.LineNumber, bytes.TrimSuffix(m.Data.Lines.raw(), []byte{'\n'})))
		case "end":
			if m.Data.BinaryOffset == nil {
				for _, pm := range pending {
					if len(*out) == max {
						return true, nil
					}
					*out = append(*out, pm)
				}
			}
			pending = pending[:0]
		}
	}
}

// readMessage decodes one message's type and the data fields rgMessage
// names, skipping every other value without keeping it.
func readMessage(dec *json.Decoder) (rgMessage, error) {
	var m rgMessage
	err := object(dec, func(key string) error {
		switch key {
		case "type":
			return dec.Decode(&m.Type)
		case "data":
			return object(dec, func(key string) error {
				switch key {
				case "path":
					return dec.Decode(&m.Data.Path)
				case "lines":
					return dec.Decode(&m.Data.Lines)
				case "line_number":
					return dec.Decode(&m.Data.LineNumber)
				case "binary_offset":
					return dec.Decode(&m.Data.BinaryOffset)
				}
				return skip(dec)
			})
		}
		return skip(dec)
	})
	return m, err
}

// object reads a JSON object, calling field for each key with the decoder
// at its value, which field must consume. A null is an empty object.
func object(dec *json.Decoder, field func(key string) error) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('{') {
		return fmt.Errorf("want an object, got %v", t)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return noEOF(err)
		}
		key, ok := t.(string)
		if !ok {
			return fmt.Errorf("want a key, got %v", t)
		}
		if err := field(key); err != nil {
			return noEOF(err)
		}
	}
	_, err = dec.Token() // the closing brace
	return noEOF(err)
}

// skip consumes one value, however deep, holding one token at a time.
func skip(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return noEOF(err)
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// noEOF is err, with an end of input inside a message made unexpected.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func newMatch(p string, line int64, text []byte) driver.GrepMatch {
	m := driver.GrepMatch{Path: p, Line: line}
	if len(text) > MaxLineBytes {
		cut := MaxLineBytes
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text, m.TextTruncated = text[:cut], true
	}
	m.Text = strings.ToValidUTF8(string(text), "\uFFFD")
	return m
}

// Truncate is b as text, cut to its first n bytes and trimmed of white space.
func Truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(bytes.TrimSpace(b))
}

// RipgrepPattern writes the pattern's non-ASCII bytes as \xHH escapes, which
// ripgrep in --no-unicode mode matches as raw bytes, as grep does in the C
// locale.
func RipgrepPattern(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if c := p[i]; c >= 0x80 {
			fmt.Fprintf(&b, `\x%02X`, c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// POSIXPattern rewrites the Perl classes \d and \D, which GNU grep -E lacks,
// into bracket expressions; \w, \s and \b it has.
func POSIXPattern(p string) string {
	if !strings.Contains(p, `\d`) && !strings.Contains(p, `\D`) {
		return p
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			n := p[i+1]
			switch {
			case !inClass && n == 'd':
				b.WriteString("[0-9]")
			case !inClass && n == 'D':
				b.WriteString("[^0-9]")
			case inClass && n == 'd':
				b.WriteString("0-9")
			default:
				b.WriteByte(c)
				b.WriteByte(n)
			}
			i++
			continue
		case c == '[' && !inClass:
			inClass = true
			// A ']' first in a class is literal.
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteString("[^")
				i++
			} else {
				b.WriteByte(c)
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteByte(']')
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
