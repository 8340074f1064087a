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
func ParseRipgrepJSON(br *bufio.Reader, name func([]byte) string, max int, out *[]driver.GrepMatch) (bool, error) {
	var pending []driver.GrepMatch
	for {
		rec, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(rec)) > 0 {
			var m rgMessage
			if jerr := json.Unmarshal(rec, &m); jerr != nil {
				return false, fmt.Errorf("printed an unparseable message %q: %v", Truncate(rec, 200), jerr)
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
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
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
