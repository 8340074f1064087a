package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestOutputJSON: --output json (and -o json) of every listing and show
// command prints what the REST API answers for the same call, field for
// field; a format other than text or json is a usage error naming it.
func TestOutputJSON(t *testing.T) {
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FABRO_LLM_CATALOG_OVERLAY", overlay)
	s := startServe(t, filepath.Join(dir, "data"))
	if _, errOut, code := fabro(t, "sk-one", "secret", "set", "ANTHROPIC_API_KEY", "-no-probe", "-server", s.grpcAddr); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	if _, errOut, code := fabro(t, "", "token", "create", "--name", "ci", "-server", s.grpcAddr); code != 0 {
		t.Fatalf("token create: %s", errOut)
	}
	admin := s.adminToken(t)

	tests := []struct {
		args []string
		rest string // the REST route of the same call
	}{
		{[]string{"secret", "list", "-o", "json"}, "/v1/secrets?page_size=1000"},
		{[]string{"token", "list", "--output", "json"}, "/v1/tokens?page_size=1000"},
		{[]string{"models", "-o", "json"}, "/v1/models?page_size=1000"},
		{[]string{"providers", "--output=json"}, "/v1/providers?page_size=1000"},
		{[]string{"sessions", "list", "-o", "json"}, "/v1/sessions?page_size=50"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:len(tt.args)-2], " "), func(t *testing.T) {
			out, errOut, code := fabro(t, "", append(tt.args, "-server", s.grpcAddr)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			status, body := s.rest(t, admin, "GET", tt.rest, "")
			if status != 200 {
				t.Fatalf("REST %s: %d %s", tt.rest, status, body)
			}
			var got, want map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if err := json.Unmarshal([]byte(body), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("--output json differs from REST %s (-rest +cli):\n%s", tt.rest, diff)
			}
			if len(got) == 0 {
				t.Errorf("empty document %s", out)
			}
			golden, err := json.MarshalIndent(stable(got, s.grpcAddr, l.URL), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			var words []string
			for _, a := range tt.args {
				if !strings.HasPrefix(a, "-") && a != "json" {
					words = append(words, a)
				}
			}
			checkGolden(t, "output-json-"+strings.Join(words, "-")+".json", string(golden)+"\n")
		})
	}

	for _, args := range [][]string{{"secret", "list", "-o", "yaml"}, {"sessions", "show", "x", "--output", "table"}} {
		_, errOut, code := fabro(t, "", append(args, "-server", s.grpcAddr)...)
		if code != exitUsage || !strings.Contains(errOut, "want text or json") {
			t.Errorf("%v: exit %d, %q; want 2 naming text or json", args, code, errOut)
		}
		checkGolden(t, "usage-output-"+args[len(args)-1]+".txt", strings.ReplaceAll(errOut, s.grpcAddr, "$SERVER"))
	}
}

// rfc3339 matches a protojson timestamp.
var rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)

// stable replaces what differs from run to run in a --output json
// document (times, generated ids, the test's addresses), so the rest is
// pinned by a golden file.
func stable(v any, addrs ...string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && (k == "tokenId" || k == "sessionId") {
				if s != "" {
					v[k] = "{" + k + "}"
				}
				continue
			}
			v[k] = stable(x, addrs...)
		}
	case []any:
		for i, x := range v {
			v[i] = stable(x, addrs...)
		}
	case string:
		if rfc3339.MatchString(v) {
			return "{time}"
		}
		for _, a := range addrs {
			v = strings.ReplaceAll(v, strings.TrimPrefix(a, "http://"), "{addr}")
		}
		return v
	}
	return v
}
