package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCompatEndpointsNeedAToken: the OpenAI- and Anthropic-compatible APIs
// on fabro serve's REST port take a fabro token as their API key, and answer
// a missing or unknown one with each API's own 401, before any
// model is called.
func TestCompatEndpointsNeedAToken(t *testing.T) {
	s := startServe(t, t.TempDir())
	admin := s.adminToken(t)
	anthropic := func(key string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.httpAddr+"/anthropic/v1/models", nil)
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	forged := "fabro_0123456789abcdef_" + strings.Repeat("A", 43)
	tests := []struct {
		name       string
		call       func() (int, string)
		wantStatus int
		wantBody   string
	}{
		{"openai no key", func() (int, string) { return s.rest(t, "", "GET", "/openai/v1/models", "") }, 401, "provide an API key"},
		{"openai forged key", func() (int, string) { return s.rest(t, forged, "GET", "/openai/v1/models", "") }, 401, "invalid_api_key"},
		{"openai chat forged key", func() (int, string) {
			return s.rest(t, forged, "POST", "/openai/v1/chat/completions", `{"model":"anthropic/claude-sonnet-4.5","messages":[{"role":"user","content":"hi"}]}`)
		}, 401, "invalid_api_key"},
		{"openai admin", func() (int, string) { return s.rest(t, admin, "GET", "/openai/v1/models", "") }, 200, `"object":"list"`},
		{"anthropic no key", func() (int, string) { return anthropic("") }, 401, "authentication_error"},
		{"anthropic forged key", func() (int, string) { return anthropic(forged) }, 401, "authentication_error"},
		{"anthropic admin", func() (int, string) { return anthropic(admin) }, 200, `"data"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := tt.call()
			if status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Errorf("= %d %s; want %d containing %q", status, body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}
