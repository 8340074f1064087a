package redact

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	const key = "sk-live/ab+cd=ef&1234"
	r := New(key, "AKIAEXAMPLEKEYID", "abc", "")
	tests := []struct {
		name, in string
	}{
		{"raw", "Incorrect API key provided: Bearer " + key + "."},
		{"base64", "basic " + base64.StdEncoding.EncodeToString([]byte(key))},
		{"base64url", base64.RawURLEncoding.EncodeToString([]byte(key))},
		{"query", "https://x/?key=" + url.QueryEscape(key)},
		{"path", "/v1/" + url.PathEscape(key)},
		{"json", func() string { b, _ := json.Marshal(map[string]string{"auth": key}); return string(b) }()},
		{"twice and another", key + " and " + key + " and AKIAEXAMPLEKEYID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.String(tt.in)
			if !strings.Contains(got, Mask) {
				t.Errorf("String(%q) = %q: nothing masked", tt.in, got)
			}
			for _, leak := range []string{key, "AKIAEXAMPLEKEYID", "ab+cd", "ab%2Bcd", base64.StdEncoding.EncodeToString([]byte(key))[:12]} {
				if strings.Contains(got, leak) {
					t.Errorf("String(%q) = %q still holds %q", tt.in, got, leak)
				}
			}
		})
	}
	// Short values are not secrets: "abc" must not be masked.
	if got := r.String("abc def"); got != "abc def" {
		t.Errorf("a short value was masked: %q", got)
	}
	var none *Redactor
	if got := none.String("x " + key); got != "x "+key {
		t.Errorf("nil redactor changed text: %q", got)
	}
	if got := New().String("plain"); got != "plain" {
		t.Errorf("empty redactor changed text: %q", got)
	}
}
