package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestSandboxPsLogs: a service started over REST is listed by `fabro
// sandbox ps`, its log printed and followed to its end by `fabro sandbox
// logs -f` by name; REST lists processes and streams an attach as NDJSON.
func TestSandboxPsLogs(t *testing.T) {
	work := t.TempDir()
	s := startServe(t, t.TempDir(), "FABRO_SANDBOX_ALLOWED_ROOTS="+work)
	admin := s.adminToken(t)
	call := func(method, path, body string) string {
		t.Helper()
		code, b := s.rest(t, admin, method, path, body)
		if code != 200 {
			t.Fatalf("%s %s = %d %s", method, path, code, b)
		}
		return b
	}
	var created struct {
		Sandbox struct {
			ID string `json:"sandboxId"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal([]byte(call(http.MethodPost, "/v1/sandboxes", `{"spec":{"driver":"local","workingDirectory":"`+work+`"}}`)), &created); err != nil {
		t.Fatal(err)
	}
	id := created.Sandbox.ID
	call(http.MethodPost, "/v1/sandboxes/"+id+"/processes", `{"spec":{"command":"for i in 1 2 3; do echo line$i; sleep 0.3; done","service":true,"name":"counter"}}`)
	out, errOut, code := fabro(t, "", "sandbox", "ps", "--server", s.grpcAddr, id)
	if code != 0 || !strings.Contains(out, "counter") || !strings.Contains(out, "running") {
		t.Errorf("sandbox ps = %d %q %q", code, out, errOut)
	}
	out, errOut, code = fabro(t, "", "sandbox", "logs", "-f", "--server", s.grpcAddr, id, "counter")
	if code != 0 || out != "line1\nline2\nline3\n" {
		t.Errorf("sandbox logs -f = %d %q %q", code, out, errOut)
	}
	out, _, code = fabro(t, "", "sandbox", "logs", "--server", s.grpcAddr, id, "counter")
	if code != 0 || out != "line1\nline2\nline3\n" {
		t.Errorf("sandbox logs (ended) = %d %q", code, out)
	}
	if b := call(http.MethodGet, "/v1/sandboxes/"+id+"/processes", ""); !strings.Contains(b, `"name":"counter"`) || !strings.Contains(b, `"PROCESS_STATE_EXITED"`) {
		t.Errorf("GET processes = %s", b)
	}
	nd := call(http.MethodPost, "/v1/processes:attach", `{"open":{"sandboxId":"`+id+`","processId":"counter"}}`)
	lines := strings.Split(strings.TrimSpace(nd), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], `"attached"`) || !strings.Contains(lines[len(lines)-1], `"exited"`) || !strings.Contains(nd, `"output"`) {
		t.Errorf("attach over REST (NDJSON):\n%s", nd)
	}
	_, errOut, code = fabro(t, "", "sandbox", "logs", "--server", s.grpcAddr, id, "nope")
	if code == 0 || !strings.Contains(errOut, "nope") {
		t.Errorf("logs of an unknown process = %d %q", code, errOut)
	}
}
