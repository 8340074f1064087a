package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPublicAddr(t *testing.T) {
	tests := map[string]bool{
		"93.184.216.34":            true,
		"2606:4700::1111":          true,
		"8.8.8.8":                  true,
		"127.0.0.1":                false,
		"127.1.2.3":                false,
		"10.1.2.3":                 false,
		"172.16.0.1":               false,
		"192.168.1.1":              false,
		"169.254.169.254":          false, // cloud metadata
		"100.64.0.1":               false, // CGNAT
		"0.0.0.0":                  false,
		"0.1.2.3":                  false,
		"224.0.0.1":                false,
		"255.255.255.255":          false,
		"198.18.0.1":               false,
		"192.0.2.1":                false,
		"::1":                      false,
		"::":                       false,
		"fe80::1":                  false,
		"fc00::1":                  false,
		"fd12:3456::1":             false,
		"::ffff:127.0.0.1":         false, // IPv4-mapped loopback
		"::ffff:169.254.169.254":   false,
		"64:ff9b::a9fe:a9fe":       false, // NAT64 of 169.254.169.254
		"2002:7f00:1::1":           false, // 6to4 of 127.0.0.1
		"2001:db8::1":              false,
		"ff02::1":                  false,
		"::ffff:93.184.216.34":     true,
		"2001:4860:4860::8888":     true,
		"2001:0000:4136:e378::1":   false, // Teredo
		"100::1":                   false,
		"fec0::1":                  false,
		"203.0.113.5":              false,
		"198.51.100.7":             false,
		"240.0.0.1":                false,
		"192.0.0.8":                false,
		"64:ff9b:1::1":             false,
		"3fff::1":                  false,
		"2a00:1450:4001:80b::200e": true,
	}
	for addr, want := range tests {
		if got := publicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestWebFetchRefusesInternalAddresses(t *testing.T) {
	s := NewSet("openai", Full, Env{}, nil)
	tests := []struct {
		url  string
		kind string
		want string
	}{
		{"http://127.0.0.1/", KindFailed, "private, loopback or otherwise internal"},
		{"http://127.0.0.1:8080/admin", KindFailed, "private, loopback"},
		{"http://10.0.0.1/", KindFailed, "private, loopback"},
		{"http://192.168.0.1/", KindFailed, "private, loopback"},
		{"http://169.254.169.254/latest/meta-data/", KindFailed, "private, loopback"},
		{"http://[::1]/", KindFailed, "private, loopback"},
		{"http://[::ffff:127.0.0.1]/", KindFailed, "private, loopback"},
		{"http://[fe80::1%25lo]/", KindFailed, "private, loopback"},
		{"http://0.0.0.0/", KindFailed, "private, loopback"},
		{"http://localhost/", KindFailed, "private, loopback"}, // a name resolving to loopback
		{"https://localhost:443/", KindFailed, "private, loopback"},
		{"file:///etc/passwd", KindInvalidArguments, "only http:// and https://"},
		{"gopher://example.com/", KindInvalidArguments, "only http:// and https://"},
		{"http://user:pass@example.com/", KindInvalidArguments, "credentials"},
		{"http:///nohost", KindInvalidArguments, "no host"},
		{"::not a url", KindInvalidArguments, "not a valid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			r := run(t, s, "web_fetch", map[string]any{"url": tt.url})
			check(t, r, tt.kind, tt.want)
		})
	}
}

// page serves a small site on loopback.
func page(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/doc", func(w http.ResponseWriter, r *http.Request) {
		if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "fabro/") {
			t.Errorf("user agent %q", ua)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>The Doc</title><style>body{color:red}</style>
<script>alert("x")</script></head><body>
<nav><a href="/home">Home</a></nav>
<h1>Install</h1>
<p>Run the <b>installer</b> and see <a href="/next?a=1">the next page</a>.<br>Then relax.</p>
<ul><li>one</li><li>two <i>2</i><ul><li>nested</li></ul></li></ul>
<ol><li>first</li><li>second</li></ol>
<pre><code class="language-go">func main() {
	fmt.Println("hi")
}</code></pre>
<blockquote><p>quoted text</p></blockquote>
<table><tr><th>Name</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>
<p>inline <code>x := 1</code> code</p>
<img src="/logo.png" alt="Logo">
<noscript>enable js</noscript>
<script>document.write("hidden")</script>
</body></html>`)
	})
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "plain <b>text</b>")
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
		w.Write([]byte("caf\xe9"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("a", 200*1024))
	})
	mux.HandleFunc("/binary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte{0x89, 'P', 'N', 'G'})
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestWebFetch(t *testing.T) {
	srv := page(t)
	var gotPrompt, gotContent string
	summarize := func(_ context.Context, prompt, content string) (string, error) {
		gotPrompt, gotContent = prompt, content
		return "The answer is 42.", nil
	}
	s := NewSet("openai", Full, Env{AllowPrivateNetwork: true, Summarize: summarize}, nil)
	plain := NewSet("openai", Full, Env{AllowPrivateNetwork: true}, nil)

	r := run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/doc"})
	check(t, r, "")
	want := "Title: The Doc\n\n[Home](" + srv.URL + "/home)\n\n# Install\n\n" +
		"Run the **installer** and see [the next page](" + srv.URL + "/next?a=1).\nThen relax.\n\n" +
		"- one\n- two *2*\n  - nested\n\n1. first\n2. second\n\n" +
		"```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```\n\n" +
		"> quoted text\n\n| Name | Value |\n| --- | --- |\n| a | 1 |\n\ninline `x := 1` code\n\n![Logo](" + srv.URL + "/logo.png)"
	if r.Output != want {
		t.Errorf("markdown:\n%s\n--- want:\n%s", r.Output, want)
	}
	for _, bad := range []string{"alert", "color:red", "hidden", "enable js"} {
		if strings.Contains(r.Output, bad) {
			t.Errorf("output contains %q", bad)
		}
	}

	r = run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/doc", "prompt": "What is it?"})
	check(t, r, "", "The answer is 42.")
	if gotPrompt != "What is it?" || !strings.Contains(gotContent, "# Install") {
		t.Errorf("summarizer got %q / %.80q", gotPrompt, gotContent)
	}
	check(t, run(t, plain, "web_fetch", map[string]any{"url": srv.URL + "/doc", "prompt": "What?"}), "", "No summarizer", "# Install")

	failing := NewSet("openai", Full, Env{AllowPrivateNetwork: true, Summarize: func(context.Context, string, string) (string, error) {
		return "", errors.New("model down")
	}}, nil)
	check(t, run(t, failing, "web_fetch", map[string]any{"url": srv.URL + "/doc", "prompt": "What?"}), "", "Summarization failed (model down)", "# Install")

	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/text"}), "", "plain <b>text</b>")
	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/latin1"}), "", "café")

	r = run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/big"})
	check(t, r, "", "[Output truncated at 100KB]")
	if !strings.HasPrefix(r.Output, strings.Repeat("a", 100*1024)+"\n\n[Output") {
		t.Errorf("did not keep exactly 100 KB: %d bytes", len(r.Output))
	}
	if r.RetainedBytes != 100*1024 || r.ObservedBytes <= r.RetainedBytes || r.ObservedBytes != r.RetainedBytes+r.OmittedBytes {
		t.Errorf("bytes observed %d, retained %d, omitted %d: want the page past the cap counted", r.ObservedBytes, r.RetainedBytes, r.OmittedBytes)
	}

	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/binary"}), KindFailed, `content type "image/png" is not text`)
	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/missing"}), KindFailed, "HTTP 404 Not Found", "no such page")
	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/hang", "timeout_ms": 50}), KindTimeout, "timed out after 50 ms")
	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/redirect?to=/text"}), "", "(redirected to "+srv.URL+"/text)", "plain")
	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/loop"}), KindFailed, "stopped after 5 redirects")
}

func TestWebFetchRedirectToInternal(t *testing.T) {
	srv := page(t)
	secret := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the internal server was reached: %s", r.URL)
		fmt.Fprint(w, "secret")
	}))
	defer secret.Close()
	u, _ := url.Parse(srv.URL)
	s := NewSet("openai", Full, Env{}, nil)
	s.allowAddr = func(addr string) bool { return addr == u.Host } // only the public-facing test server

	// The allowed server is reachable through the guard...
	check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/text"}), "", "plain")
	// ...but its redirects to internal addresses are refused at dial time.
	for _, to := range []string{secret.URL + "/", "http://169.254.169.254/latest/meta-data/", "http://localhost/", "http://[::1]:80/"} {
		t.Run(to, func(t *testing.T) {
			r := run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/redirect?to=" + url.QueryEscape(to)})
			check(t, r, KindFailed, "private, loopback or otherwise internal")
			if strings.Contains(r.Output, "secret") {
				t.Errorf("leaked: %s", r.Output)
			}
		})
	}
	t.Run("redirect to another scheme", func(t *testing.T) {
		check(t, run(t, s, "web_fetch", map[string]any{"url": srv.URL + "/redirect?to=" + url.QueryEscape("file:///etc/passwd")}), KindFailed, "only http:// and https://")
	})
}

func TestCheckRedirectDowngrade(t *testing.T) {
	prev, _ := http.NewRequest("GET", "https://example.com/a", nil)
	next, _ := http.NewRequest("GET", "http://example.com/b", nil)
	if err := checkRedirect(next, []*http.Request{prev}); err == nil || !strings.Contains(err.Error(), "https to http") {
		t.Errorf("downgrade allowed: %v", err)
	}
	up, _ := http.NewRequest("GET", "https://example.com/c", nil)
	if err := checkRedirect(up, []*http.Request{next}); err != nil {
		t.Errorf("upgrade refused: %v", err)
	}
}

// brave is a fake of Brave's web search API.
func brave(t *testing.T, status int, results []map[string]string) (*httptest.Server, *url.Values) {
	t.Helper()
	got := &url.Values{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/res/v1/web/search" || r.Method != http.MethodGet {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if r.Header.Get("X-Subscription-Token") != "brave-key" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		*got = r.URL.Query()
		if status == http.StatusBadGateway { // an upstream that quotes the request back
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":"bad upstream for token %s"}`, r.Header.Get("X-Subscription-Token"))
			return
		}
		if status != http.StatusOK {
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":"nope"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"type": "search", "web": map[string]any{"results": results}})
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestWebSearch(t *testing.T) {
	many := make([]map[string]string, 25)
	for i := range many {
		many[i] = map[string]string{"title": fmt.Sprintf("R%d", i+1), "url": fmt.Sprintf("https://r%d.example", i+1), "description": "d"}
	}
	results := []map[string]string{
		{"title": "Go <strong>1.26</strong>", "url": "https://go.dev/doc/go1.26", "description": "Release notes &amp; <strong>news</strong>"},
		{"title": "Second", "url": "https://example.com/2", "description": ""},
	}
	key := func(_ context.Context, name string) (string, error) {
		if name != "BRAVE_SEARCH_API_KEY" {
			return "", fmt.Errorf("no secret %s", name)
		}
		return "brave-key", nil
	}
	tests := []struct {
		name      string
		status    int
		results   []map[string]string
		cred      func(context.Context, string) (string, error)
		args      map[string]any
		kind      string
		want      string
		wantCount string
	}{
		{"numbered results", 200, results, key, map[string]any{"query": "go release"}, "",
			"1. Go 1.26\n   URL: https://go.dev/doc/go1.26\n   Release notes & news\n\n2. Second\n   URL: https://example.com/2\n", "5"},
		{"max_results", 200, many, key, map[string]any{"query": "q", "max_results": 3}, "", "3. R3", "3"},
		{"max_results capped at 20", 200, many, key, map[string]any{"query": "q", "max_results": 50}, "", "20. R20", "20"},
		{"no results", 200, nil, key, map[string]any{"query": "zzz"}, "", "No results found.", "5"},
		{"no credential source", 200, results, nil, map[string]any{"query": "q"}, KindFailed, "web_search needs BRAVE_SEARCH_API_KEY", ""},
		{"missing key", 200, results, func(context.Context, string) (string, error) { return "", errors.New("not found") }, map[string]any{"query": "q"}, KindFailed, "fabro secret set BRAVE_SEARCH_API_KEY", ""},
		{"wrong key", 200, results, func(context.Context, string) (string, error) { return "wrong", nil }, map[string]any{"query": "q"}, KindFailed, "rejected the API key (HTTP 401)", ""},
		{"rate limited", 429, nil, key, map[string]any{"query": "q"}, KindFailed, "rate limit", "5"},
		{"server error", 500, nil, key, map[string]any{"query": "q"}, KindFailed, "HTTP 500", "5"},
		{"error quoting the key", 502, nil, key, map[string]any{"query": "q"}, KindFailed, "token [REDACTED]", "5"},
		{"empty query", 200, nil, key, map[string]any{"query": " "}, KindInvalidArguments, "must not be empty", ""},
		{"max_results below 1", 200, nil, key, map[string]any{"query": "q", "max_results": 0}, KindInvalidArguments, "at least 1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got := brave(t, tt.status, tt.results)
			s := NewSet("gemini", Full, Env{Credential: tt.cred, BraveBaseURL: srv.URL}, nil)
			r := run(t, s, "web_search", tt.args)
			check(t, r, tt.kind, tt.want)
			if tt.kind == "" && strings.Contains(tt.want, "1. Go") && r.Output != tt.want {
				t.Errorf("output:\n%q\nwant:\n%q", r.Output, tt.want)
			}
			if tt.wantCount != "" && (got.Get("count") != tt.wantCount || got.Get("q") != tt.args["query"]) {
				t.Errorf("query %v, want count %s", got, tt.wantCount)
			}
			if strings.Contains(r.Output, "brave-key") {
				t.Error("the key leaked into the output")
			}
			if strings.HasPrefix(tt.name, "max_results") && strings.Contains(r.Output, fmt.Sprintf("%s. R", "21")) {
				t.Error("more results than asked")
			}
		})
	}
}

func TestFetchTimeout(t *testing.T) {
	for ms, want := range map[int64]time.Duration{0: 30 * time.Second, 50: 50 * time.Millisecond, 60_000: time.Minute, 600_000: time.Minute} {
		if got := fetchTimeout(ms); got != want {
			t.Errorf("fetchTimeout(%d) = %v, want %v", ms, got, want)
		}
	}
}
