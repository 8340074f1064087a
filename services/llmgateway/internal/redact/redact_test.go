package redact

import (
	"cmp"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
)

const key = "sk-proj-A1b2C3d4E5f6/G7h8+I9j0K1l2M3n4"

// encodings are the key's shapes the guarantee names, computed here apart
// from the package's own list.
func encodings(s string) map[string]string {
	j, _ := json.Marshal(s)
	out := map[string]string{
		"raw": s, "hex": hex.EncodeToString([]byte(s)), "query": url.QueryEscape(s), "path": url.PathEscape(s),
		"json": string(j[1 : len(j)-1]),
	}
	for _, p := range []string{"", "Bearer ", "Basic u:", "x"} {
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "rawstd": base64.RawStdEncoding,
			"url": base64.URLEncoding, "rawurl": base64.RawURLEncoding} {
			out["base64 "+name+" of "+p+"key"] = enc.EncodeToString([]byte(p + s))
		}
	}
	return out
}

// leaks lists each run of Window characters of the key, in any encoding,
// that text still holds, ignoring case.
func leaks(text string) []string {
	low := strings.ToLower(text)
	var found []string
	for name, f := range encodings(key) {
		// A base64 of a prefixed key holds the prefix's encoding first and
		// a padding-dependent tail: only runs wholly from the key count,
		// which are those of the encoding of what follows the prefix.
		if strings.HasPrefix(name, "base64") && !strings.HasSuffix(name, " of key") {
			f = f[min(len(f), 12):max(12, len(f)-4)]
		}
		f = strings.ToLower(f)
		for i := 0; i+Window <= len(f); i++ {
			if strings.Contains(low, f[i:i+Window]) {
				found = append(found, name+": "+f[i:i+Window])
			}
		}
	}
	slices.Sort(found)
	return found
}

// TestStringAnyShape: every transformation a provider was seen echoing is
// masked, with the text around it kept.
func TestStringAnyShape(t *testing.T) {
	r := New(key, "AKIAEXAMPLEKEYID0000", "abc", "")
	upper := strings.ToUpper(key)
	dropped := key[:17] + key[18:]
	tests := map[string]string{
		"24-character prefix":   key[:24],
		"suffix":                key[len(key)-20:],
		"hex":                   hex.EncodeToString([]byte(key)),
		"hex of Bearer":         hex.EncodeToString([]byte("Bearer " + key)),
		"upper-case hex":        strings.ToUpper(hex.EncodeToString([]byte(key))),
		"upper case":            upper,
		"split across fields":   `{"message":"bad key ` + key[:18] + `","code":"` + key[18:] + `"}`,
		"one character dropped": dropped,
		"two copies":            key + " and " + key,
		"JSON-escaped in JSON":  func() string { b, _ := json.Marshal(map[string]string{"auth": "Bearer " + key}); return string(b) }(),
	}
	for name, enc := range encodings(key) {
		tests[name] = enc
	}
	for name, form := range tests {
		t.Run(name, func(t *testing.T) {
			in := "upstream said: " + form + " (see docs)"
			got := r.String(in)
			if l := leaks(got); len(l) > 0 {
				t.Errorf("String(%q) = %q still holds %q", in, got, l)
			}
			if !strings.HasPrefix(got, "upstream said: ") || !strings.HasSuffix(got, " (see docs)") || !strings.Contains(got, Mask) {
				t.Errorf("String(%q) = %q: the text around the key is not kept as it was", in, got)
			}
		})
	}
	// Short values are not secrets: "abc" must not be masked, nor text
	// that shares fewer than Window characters with a key.
	for _, keep := range []string{"abc def", "sk-proj is 7 characters of it", "plain text, nothing secret"} {
		if got := r.String(keep); got != keep {
			t.Errorf("String(%q) = %q, want it unchanged", keep, got)
		}
	}
	if got := New("s3cr3t").String("a s3cr3t b"); got != "a "+Mask+" b" {
		t.Errorf("a secret shorter than Window, whole: %q", got)
	}
	var none *Redactor
	if got := none.String("x " + key); got != "x "+key {
		t.Errorf("nil redactor changed text: %q", got)
	}
	if got := New().String("plain"); got != "plain" {
		t.Errorf("empty redactor changed text: %q", got)
	}
}

// FuzzString: whatever surrounds the key, and however often, no run of
// Window of its characters remains.
func FuzzString(f *testing.F) {
	r := New(key)
	f.Add("before ", " after", uint8(0))
	f.Add(`{"e":"`, `"}`, uint8(3))
	f.Fuzz(func(t *testing.T, before, after string, cut uint8) {
		form := key[:len(key)-int(cut)%12]
		got := r.String(before + form + after + strings.ToUpper(form))
		low := strings.ToLower(got)
		for i := 0; i+Window <= len(form); i++ {
			if strings.Contains(low, strings.ToLower(form[i:i+Window])) && !strings.Contains(strings.ToLower(before+after), strings.ToLower(form[i:i+Window])) {
				t.Fatalf("String(%q) = %q holds %q", before+form+after, got, form[i:i+Window])
			}
		}
	})
}

// exactRedactor is the redactor this package had before: each encoding of
// each secret, replaced where it appears whole and in its exact case. It
// is the baseline of BenchmarkString.
func exactRedactor(secrets ...string) *strings.Replacer {
	var forms []string
	for _, s := range secrets {
		j, _ := json.Marshal(s)
		forms = append(forms, s,
			base64.StdEncoding.EncodeToString([]byte(s)), base64.RawStdEncoding.EncodeToString([]byte(s)),
			base64.URLEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)),
			url.QueryEscape(s), url.PathEscape(s), string(j[1:len(j)-1]))
	}
	slices.SortFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	forms = slices.Compact(forms)
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Mask)
	}
	return strings.NewReplacer(pairs...)
}

// BenchmarkString: the cost per KiB of an error body (1 KiB of prose,
// without and with the key in it) against the exact-match baseline, and
// of building a redactor for one call's credentials.
func BenchmarkString(b *testing.B) {
	secrets := []string{key, "AKIAEXAMPLEKEYID0000", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
	prose := strings.Repeat("The request was refused: the model is overloaded, try again later. ", 16)[:1024]
	texts := map[string]string{"clean": prose, "leaky": prose[:512] + key + prose[512+len(key):]}
	for _, name := range []string{"clean", "leaky"} {
		text := texts[name]
		b.Run("fuzzy/"+name, func(b *testing.B) {
			r := New(secrets...)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				r.String(text)
			}
		})
		b.Run("exact/"+name, func(b *testing.B) {
			r := exactRedactor(secrets...)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				r.Replace(text)
			}
		})
	}
	b.Run("fuzzy/new", func(b *testing.B) {
		for b.Loop() {
			New(secrets...)
		}
	})
	b.Run("exact/new", func(b *testing.B) {
		for b.Loop() {
			exactRedactor(secrets...)
		}
	})
}
