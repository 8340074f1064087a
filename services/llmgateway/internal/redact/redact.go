// Package redact removes secret values from text: the credentials the
// gateway sends upstream, in whatever shape an upstream may echo them, so a
// provider that quotes a key in an error reveals nothing to callers, logs,
// events or spans.
//
// The guarantee: no run of Window (8) or more consecutive characters of a
// secret survives, compared without regard to ASCII case, in the secret
// itself or in any of its encodings: standard and URL base64, with or
// without padding, at each of the three byte alignments (so the base64 of
// "Bearer <key>", of "user:<key>" or of any text around the key is caught),
// hex, URL query and path escaping, and JSON string escaping. A prefix, a
// suffix, an upper-cased copy, a key split across two fields, or a copy
// with one character dropped each still holds such a run, so each is
// masked; what may remain of a secret is a run shorter than Window, at its
// very start or end, or beside a change. Secrets shorter than Window (but
// at least MinLen) are masked only whole, as given.
//
// Scanning is one pass over the text: each position's last 8 bytes, lower
// cased, are one uint64, tested against a small bit filter and, rarely,
// against the exact set of the secrets' 8-byte runs.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Mask replaces every secret found.
const Mask = "[REDACTED]"

// Window is the shortest run of a secret's characters that is masked
// wherever it appears.
const Window = 8

// MinLen is the shortest value redacted: a shorter one is no secret, and
// masking it would mangle every message.
const MinLen = 4

// Redactor removes a fixed set of secrets. The zero value and nil remove
// nothing. It is safe for concurrent use.
type Redactor struct {
	runs   []uint64          // every Window-byte run of every form, lower-cased, sorted
	filter []uint64          // bits set by hash of each run: a cheap first test
	shift  uint              // 64 - log2(len(filter)*64)
	short  *strings.Replacer // secrets shorter than Window, masked whole
}

// New returns a redactor of secrets and their encodings.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	var short []string
	for _, s := range secrets {
		switch {
		case len(s) < MinLen:
		case len(s) < Window:
			short = append(short, s, Mask)
		default:
			for _, f := range forms(s) {
				r.addRuns(f)
			}
		}
	}
	if len(short) > 0 {
		r.short = strings.NewReplacer(short...)
	}
	if len(r.runs) > 0 {
		slices.Sort(r.runs)
		r.runs = slices.Compact(r.runs)
		// About 32 filter bits per run: a position whose run is no
		// secret's passes the filter about once in 32.
		bits := 1 << 12
		for bits < 32*len(r.runs) {
			bits <<= 1
		}
		r.filter = make([]uint64, bits/64)
		r.shift = uint(64 - log2(bits))
		for _, k := range r.runs {
			h := r.hash(k)
			r.filter[h/64] |= 1 << (h % 64)
		}
	}
	return r
}

// forms are the shapes of s an upstream may echo.
func forms(s string) []string {
	b := []byte(s)
	out := []string{s, hex.EncodeToString(b), url.QueryEscape(s), url.PathEscape(s)}
	// Base64 of any text holding s encodes, from the first group boundary
	// inside s, one of s[0:], s[1:] or s[2:] on its own. Unpadded
	// encodings are prefixes of padded ones, so they share their runs.
	for k := range 3 {
		out = append(out, base64.StdEncoding.EncodeToString(b[k:]), base64.URLEncoding.EncodeToString(b[k:]))
	}
	var j bytes.Buffer
	enc := json.NewEncoder(&j)
	_ = enc.Encode(s) // HTML-escaped, as encoding/json writes by default
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	for line := range strings.Lines(j.String()) {
		q := strings.TrimSuffix(strings.TrimSpace(line), `"`)
		q = strings.TrimPrefix(q, `"`)
		out = append(out, q, strings.ReplaceAll(q, "/", `\/`))
	}
	return out
}

func (r *Redactor) addRuns(f string) {
	if len(f) < Window {
		return
	}
	var k uint64
	for i := 0; i < len(f); i++ {
		k = k<<8 | uint64(lower(f[i]))
		if i >= Window-1 {
			r.runs = append(r.runs, k)
		}
	}
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}

func (r *Redactor) hash(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> r.shift }

// String returns s with every secret masked, s itself when it holds none.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	if r.short != nil {
		s = r.short.Replace(s)
	}
	if r.runs == nil || len(s) < Window {
		return s
	}
	// Spans [start, end) to mask, merged as they are found: runs are found
	// in order of their end, so a new run either extends the last span or
	// starts after it.
	var spans [][2]int
	var k uint64
	for i := 0; i < len(s); i++ {
		k = k<<8 | uint64(lower(s[i]))
		if i < Window-1 {
			continue
		}
		h := r.hash(k)
		if r.filter[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		if _, ok := slices.BinarySearch(r.runs, k); !ok {
			continue
		}
		start, end := i+1-Window, i+1
		if n := len(spans); n > 0 && start <= spans[n-1][1] {
			spans[n-1][1] = end
		} else {
			spans = append(spans, [2]int{start, end})
		}
	}
	if spans == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(Mask)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}
