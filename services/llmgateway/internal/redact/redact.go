// Package redact removes known secret values from text: the credentials the
// gateway sends upstream, in the forms an upstream may echo them (as sent,
// base64, URL- or JSON-escaped), so a provider that quotes a key in an
// error reveals nothing to callers, logs or events.
package redact

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Mask replaces every secret found.
const Mask = "[REDACTED]"

// MinLen is the shortest value redacted: a shorter one is no secret, and
// masking it would mangle every message.
const MinLen = 4

// Redactor removes a fixed set of secrets. The zero value and nil remove
// nothing.
type Redactor struct {
	r *strings.Replacer
}

// New returns a redactor of secrets and their encodings.
func New(secrets ...string) *Redactor {
	var forms []string
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		j, _ := json.Marshal(s)
		forms = append(forms, s,
			base64.StdEncoding.EncodeToString([]byte(s)), base64.RawStdEncoding.EncodeToString([]byte(s)),
			base64.URLEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)),
			url.QueryEscape(s), url.PathEscape(s), string(j[1:len(j)-1]))
	}
	if len(forms) == 0 {
		return &Redactor{}
	}
	// Longest first: the replacer tries its pairs in order at each position,
	// so a longer form is never cut by a shorter one it contains.
	slices.SortFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	forms = slices.Compact(forms)
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Mask)
	}
	return &Redactor{r: strings.NewReplacer(pairs...)}
}

// String returns s with every secret masked.
func (r *Redactor) String(s string) string {
	if r == nil || r.r == nil || s == "" {
		return s
	}
	return r.r.Replace(s)
}
