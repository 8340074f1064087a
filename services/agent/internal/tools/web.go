package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
)

const (
	defaultBraveBaseURL = "https://api.search.brave.com"
	braveKeyName        = "BRAVE_SEARCH_API_KEY"
	fetchOutputCap      = 100 * 1024 // characters of page text the model gets
	fetchBodyCap        = 10 << 20   // bytes read from the network, decompressed
	fetchMaxRedirects   = 5
	fetchUserAgent      = "fabro/0.1 (+https://fabro.sh)"
)

// ---------------------------------------------------------------------------
// SSRF guard

// errBlockedAddress is a dial refused by the SSRF guard.
var errBlockedAddress = errors.New("refused: the address is private, loopback, link-local or otherwise not public")

// blockedPrefixes are special-purpose ranges netip's predicates miss.
var blockedPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",         // "this network"
		"100.64.0.0/10",     // CGNAT
		"192.0.0.0/24",      // IETF protocol assignments
		"192.0.2.0/24",      // TEST-NET-1
		"198.18.0.0/15",     // benchmarking
		"198.51.100.0/24",   // TEST-NET-2
		"203.0.113.0/24",    // TEST-NET-3
		"240.0.0.0/4",       // reserved, broadcast
		"64:ff9b::/96",      // NAT64
		"64:ff9b:1::/48",    // local NAT64
		"100::/64",          // discard
		"2001::/23",         // IETF protocol assignments (Teredo, ...)
		"2001:db8::/32",     // documentation
		"2002::/16",         // 6to4
		"fec0::/10",         // site-local (deprecated)
		"3fff::/20",         // documentation
		"5f00::/16",         // SRv6 SIDs
		"::/128", "::1/128", // unspecified, loopback
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// publicAddr reports whether a may be fetched: not loopback, private,
// link-local, multicast, unspecified, nor in a special-purpose range.
// IPv4-mapped IPv6 addresses are judged as IPv4.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// dialControl runs on every connection attempt, after DNS resolution and
// for every redirect hop, so a name that resolves (or rebinds) to an
// internal address is refused.
func (s *Set) dialControl(network, address string, _ syscall.RawConn) error {
	if s.allowAddr != nil && s.allowAddr(address) {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errBlockedAddress, address)
	}
	if !publicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", errBlockedAddress, ap.Addr())
	}
	if p := ap.Port(); p != 80 && p != 443 {
		return fmt.Errorf("%w: port %d (only 80 and 443 may be fetched)", errBlockedAddress, p)
	}
	return nil
}

// guardedClient copies base (or a default client) with the SSRF guard on
// its dialer, no proxy from the environment, and checked redirects.
func (s *Set) guardedClient(base *http.Client) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	c.CheckRedirect = checkRedirect
	if s.env.AllowPrivateNetwork {
		return c
	}
	var tr *http.Transport
	if t, ok := c.Transport.(*http.Transport); ok {
		tr = t.Clone()
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	tr.Proxy = nil
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: s.dialControl}
	tr.DialContext = d.DialContext
	tr.DialTLSContext = nil
	c.Transport = tr
	return c
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= fetchMaxRedirects {
		return fmt.Errorf("stopped after %d redirects", fetchMaxRedirects)
	}
	if err := checkFetchURL(req.URL); err != nil {
		return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
	}
	if prev := via[len(via)-1].URL; prev.Scheme == "https" && req.URL.Scheme == "http" {
		return fmt.Errorf("refused redirect from https to http (%s)", req.URL.Redacted())
	}
	return nil
}

func checkFetchURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("only http:// and https:// URLs can be fetched, not %q", u.Scheme+":")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("the URL has no host")
	}
	if u.User != nil {
		return errors.New("URLs with credentials (user:password@) are not fetched")
	}
	return nil
}

// ---------------------------------------------------------------------------
// web_fetch

func webFetchTool() *tool {
	return &tool{
		name: "web_fetch",
		description: "Fetch a web page (http:// or https://) and return its content, HTML converted to Markdown, capped at 100 KB. " +
			"With a prompt, return a concise answer to it about the page instead of the page. Private and internal addresses are refused.",
		category: catShell,
		schema: object([]string{"url"}, map[string]*schema{
			"url":        str("URL to fetch (must be http:// or https://)"),
			"prompt":     str("A question about the page content; returns a concise answer instead of the full page"),
			"timeout_ms": integer("Timeout in milliseconds (default: 30000, max: 60000)", 1),
		}),
		run: runWebFetch,
	}
}

func runWebFetch(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		URL       string `json:"url"`
		Prompt    string `json:"prompt"`
		TimeoutMS int64  `json:"timeout_ms"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	u, err := url.Parse(strings.TrimSpace(a.URL))
	if err != nil {
		return output{}, invalidArgs("url is not a valid URL: %v", err)
	}
	if err := checkFetchURL(u); err != nil {
		return output{}, invalidArgs("%v", err)
	}
	timeout := fetchTimeout(a.TimeoutMS)
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return output{}, invalidArgs("url: %v", err)
	}
	req.Header.Set("User-Agent", fetchUserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/markdown,text/plain;q=0.9,*/*;q=0.8")
	resp, err := s.fetchClient.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, errBlockedAddress):
			return output{}, failed("Refused to fetch %s: it resolves to a private, loopback or otherwise internal address (%v). Only public web addresses can be fetched.", u.Redacted(), rootCause(err))
		case ctx.Err() != nil:
			return output{}, ctx.Err()
		case fctx.Err() != nil:
			return output{}, &toolError{kind: KindTimeout, msg: fmt.Sprintf("Fetching %s timed out after %d ms", u.Redacted(), timeout.Milliseconds())}
		}
		return output{}, failed("Failed to fetch %s: %v", u.Redacted(), rootCause(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, fetchBodyCap))
	if err != nil {
		if fctx.Err() != nil && ctx.Err() == nil {
			return output{}, &toolError{kind: KindTimeout, msg: fmt.Sprintf("Fetching %s timed out after %d ms", u.Redacted(), timeout.Milliseconds())}
		}
		return output{}, failed("Failed to read %s: %v", u.Redacted(), err)
	}
	final := resp.Request.URL
	text, err := pageText(body, resp.Header.Get("Content-Type"), final)
	if err != nil {
		return output{}, failed("Cannot show %s: %v", final.Redacted(), err)
	}
	if resp.StatusCode >= 400 {
		return output{}, failed("HTTP %s fetching %s\n\n%s", resp.Status, final.Redacted(), capText(text, 2000, "[...]"))
	}
	const capMarker = "\n\n[Output truncated at 100KB]"
	page := capText(text, fetchOutputCap, capMarker)
	var cut, markers int64 // counted when the page is part of the output
	if page != text {
		cut, markers = int64(len(text)-(len(page)-len(capMarker))), int64(len(capMarker))
	}
	text = page
	var b strings.Builder
	if final.String() != u.String() {
		fmt.Fprintf(&b, "(redirected to %s)\n\n", final.Redacted())
	}
	switch {
	case a.Prompt == "":
		b.WriteString(text)
	case s.env.Summarize == nil:
		b.WriteString("[No summarizer model is configured; the page content follows.]\n\n" + text)
	default:
		answer, err := s.env.Summarize(ctx, a.Prompt, text)
		if err != nil {
			if ctx.Err() != nil {
				return output{}, ctx.Err()
			}
			fmt.Fprintf(&b, "[Summarization failed (%v); the page content follows.]\n\n%s", err, text)
		} else {
			b.WriteString(answer)
			cut, markers = 0, 0 // the answer is the output, not the page
		}
	}
	return output{text: b.String(), cut: cut, markers: markers}, nil
}

// fetchTimeout is web_fetch's timeout: 30 s by default, at most 60 s.
func fetchTimeout(ms int64) time.Duration {
	if ms <= 0 {
		return 30 * time.Second
	}
	return min(time.Duration(ms)*time.Millisecond, 60*time.Second)
}

// pageText turns a response body into text: HTML to Markdown, text types
// as they are (decoded from their charset), anything else refused.
func pageText(body []byte, contentType string, base *url.URL) (string, error) {
	mt, params, _ := mime.ParseMediaType(contentType)
	if mt == "" {
		mt, params, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	isHTML := mt == "text/html" || mt == "application/xhtml+xml"
	isText := strings.HasPrefix(mt, "text/") || mt == "application/json" || mt == "application/xml" ||
		mt == "application/javascript" || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml")
	if !isHTML && !isText {
		return "", fmt.Errorf("content type %q is not text", mt)
	}
	var r io.Reader = bytes.NewReader(body)
	if cs := params["charset"]; isHTML || (cs != "" && !strings.EqualFold(cs, "utf-8")) {
		if cr, err := charset.NewReader(r, contentType); err == nil {
			r = cr
		}
	}
	if isHTML {
		title, md, err := htmlToMarkdown(r, base)
		if err != nil {
			return "", err
		}
		if title != "" && !strings.HasPrefix(md, "# ") {
			md = "Title: " + title + "\n\n" + md
		}
		return md, nil
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

// capText keeps the first n characters of s and appends marker if cut.
func capText(s string, n int, marker string) string {
	if len(s) <= n || utf8.RuneCountInString(s) <= n {
		return s
	}
	return s[:byteOffset(s, n)] + marker
}

// rootCause drops the url.Error and net.OpError wrapping of a transport
// error, which repeats the URL.
func rootCause(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		err = oe.Err
	}
	return err
}

// ---------------------------------------------------------------------------
// web_search

func webSearchTool() *tool {
	return &tool{
		name:        "web_search",
		description: "Search the web with Brave Search. Returns numbered results with title, URL and description.",
		category:    catShell,
		schema: object([]string{"query"}, map[string]*schema{
			"query":       str("Search query"),
			"max_results": integer("Maximum results (default: 5, max: 20)", 1),
		}),
		run: runWebSearch,
	}
}

type braveResponse struct {
	Web struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
		} `json:"results"`
	} `json:"web"`
}

var htmlTag = regexp.MustCompile(`<[^>]*>`)

func stripTags(s string) string { return html.UnescapeString(htmlTag.ReplaceAllString(s, "")) }

func runWebSearch(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Query      string `json:"query"`
		MaxResults int    `json:"max_results"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	if strings.TrimSpace(a.Query) == "" {
		return output{}, invalidArgs("query must not be empty")
	}
	count := 5
	if a.MaxResults > 0 {
		count = min(a.MaxResults, 20)
	}
	missing := failed("web_search needs %s, and none is configured. Set it in the vault: fabro secret set %s <key>", braveKeyName, braveKeyName)
	if s.env.Credential == nil {
		return output{}, missing
	}
	key, err := s.env.Credential(ctx, braveKeyName)
	if err != nil || key == "" {
		if ctx.Err() != nil {
			return output{}, ctx.Err()
		}
		return output{}, missing
	}
	q := url.Values{"q": {a.Query}, "count": {strconv.Itoa(count)}}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, strings.TrimRight(s.env.BraveBaseURL, "/")+"/res/v1/web/search?"+q.Encode(), nil)
	if err != nil {
		return output{}, failed("web_search: bad Brave base URL: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Subscription-Token", key)
	resp, err := s.searchClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return output{}, ctx.Err()
		}
		if sctx.Err() != nil {
			return output{}, &toolError{kind: KindTimeout, msg: "Brave Search did not answer within 30 s"}
		}
		return output{}, failed("Brave Search request failed: %v", rootCause(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return output{}, failed("Brave Search response could not be read: %v", err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return output{}, failed("Brave Search rejected the API key (HTTP %d); check %s in the vault", resp.StatusCode, braveKeyName)
	case resp.StatusCode == http.StatusTooManyRequests:
		return output{}, failed("Brave Search rate limit reached (HTTP 429); try again later")
	case resp.StatusCode != http.StatusOK:
		// An error body may quote the request back: the key never reaches
		// the model, its events or NATS.
		text := strings.ReplaceAll(string(body), key, "[REDACTED]")
		return output{}, failed("Brave Search failed: HTTP %d: %s", resp.StatusCode, capText(strings.TrimSpace(text), 300, "..."))
	}
	var br braveResponse
	if err := json.Unmarshal(body, &br); err != nil {
		return output{}, failed("Brave Search returned a response that is not the expected JSON: %v", err)
	}
	results := br.Web.Results
	if len(results) == 0 {
		return ok("No results found.")
	}
	results = results[:min(len(results), count)]
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%d. %s\n   URL: %s\n", i+1, stripTags(r.Title), r.URL)
		if d := strings.TrimSpace(stripTags(r.Description)); d != "" {
			fmt.Fprintf(&b, "   %s\n", d)
		}
	}
	return ok(b.String())
}

// PublicHTTPClient is an HTTP client with web_fetch's SSRF guard: only
// public addresses on ports 80 and 443, no proxy, checked redirects. The
// agent dials MCP servers named by an API caller with it.
func PublicHTTPClient() *http.Client {
	return (&Set{}).guardedClient(nil)
}
