package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEveryRouteIsServed calls every REST route of proto/fabro/http.yaml on
// a running `fabro serve` with placeholder ids and an empty body. Each must
// reach its service's handler: not the gateway's "route not found", and not
// Unimplemented.
func TestEveryRouteIsServed(t *testing.T) {
	data, err := os.ReadFile("../../proto/fabro/http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type route struct{ selector, method, path string }
	var routes []route
	ruleRE := regexp.MustCompile(`(?m)^\s*- selector: (\S+)\n\s*(get|put|post|delete|patch): (\S+)`)
	for _, m := range ruleRE.FindAllStringSubmatch(string(data), -1) {
		routes = append(routes, route{m[1], strings.ToUpper(m[2]), m[3]})
	}
	if len(routes) < 40 {
		t.Fatalf("parsed %d routes from http.yaml; the pattern no longer matches the file", len(routes))
	}

	s := startServe(t, t.TempDir())
	param := regexp.MustCompile(`\{[^}]+\}`)
	// The classifier must see a route that does not exist as missing, or
	// this test could never fail.
	admin := s.adminToken(t)
	if got := callRoute(t, s.httpAddr, admin, http.MethodGet, "/v1/no-such-route"); got != "no route" {
		t.Fatalf("an unknown route was classified %q", got)
	}
	for _, r := range routes {
		t.Run(r.selector, func(t *testing.T) {
			path := param.ReplaceAllString(r.path, "placeholder")
			if got := callRoute(t, s.httpAddr, admin, r.method, path); got != "" {
				t.Errorf("%s %s: %s", r.method, path, got)
			}
		})
	}
}

// callRoute calls a route with an empty body and says what is wrong: "no
// route", "unimplemented", or "" when a handler answered.
func callRoute(t *testing.T, addr, token, method, path string) string {
	t.Helper()
	var body io.Reader
	if method != http.MethodGet && method != http.MethodDelete {
		body = strings.NewReader("{}")
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	// A streamed route answers 200 and puts the error in its first message.
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &st)
	if st.Error != nil {
		st.Code, st.Message = st.Error.Code, st.Error.Message
	}
	switch {
	case st.Code == 5 && len(st.Details) > 0 && st.Details[0].Reason == "ROUTE_NOT_FOUND":
		return "no route"
	case st.Code == 12 || resp.StatusCode == http.StatusNotImplemented:
		return "unimplemented"
	case st.Code == 16 || st.Code == 7:
		return "refused: " + st.Message // the admin may call every route
	}
	return ""
}
