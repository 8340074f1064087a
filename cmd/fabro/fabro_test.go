package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// fabroBin is the fabro binary built once for every test, so the tests
// exercise the command exactly as a person runs it.
var fabroBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fabro-bin-")
	if err != nil {
		panic(err)
	}
	fabroBin = filepath.Join(dir, "fabro")
	if out, err := exec.Command("go", "build", "-race", "-o", fabroBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fabro: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// serveProc is a running `fabro serve`.
type serveProc struct {
	cmd      *exec.Cmd
	dataDir  string
	grpcAddr string
	httpAddr string
	logs     *bytes.Buffer // everything printed after start-up, once stopped
	// startLogs is what was printed up to "server started" (startTracedProc).
	startLogs string
	done      chan error
}

// startServe runs `fabro serve` on free ports and waits for it to report
// its addresses. The fabro commands the test runs afterwards see the same
// FABRO_DATA_DIR, as they would on a person's machine, and so find the
// admin token serve created there without being told.
func startServe(t *testing.T, dataDir string, extraEnv ...string) *serveProc {
	t.Helper()
	t.Setenv("FABRO_DATA_DIR", dataDir)
	cmd := exec.Command(fabroBin, "serve", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:-1", "-log-format", "json", "-log-level", "debug")
	cmd.Env = append(os.Environ(), append([]string{"FABRO_DATA_DIR=" + dataDir}, extraEnv...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, dataDir: dataDir, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		s.logs.Write(append(sc.Bytes(), '\n'))
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "server started" {
			s.grpcAddr, s.httpAddr = line.GRPCAddr, line.HTTPAddr
			break
		}
	}
	if s.grpcAddr == "" {
		cmd.Process.Kill()
		t.Fatalf("fabro serve did not start:\n%s", s.logs)
	}
	go func() {
		io.Copy(s.logs, stderr)
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// adminToken is the admin token serve created in its data directory.
func (s *serveProc) adminToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// rest calls the REST port with a token ("" for none) and a JSON body ("" for
// none) and returns the status and body.
func (s *serveProc) rest(t *testing.T, token, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+s.httpAddr+path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and waits for a clean exit.
func (s *serveProc) stop(t *testing.T) {
	t.Helper()
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("fabro serve exited with %v after SIGTERM:\n%s", err, s.logs)
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Errorf("fabro serve did not stop within 30s of SIGTERM")
	}
}

// fabro runs the CLI and returns its stdout, stderr and exit code.
func fabro(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(fabroBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestSecretCommands(t *testing.T) {
	const canary = "sk-CANARY-cli-3141592653"
	t.Setenv("FABRO_NO_PROBE", "true") // probe-before-store is tested in models_test.go
	dir := t.TempDir()
	s := startServe(t, dir)

	out, errOut, code := fabro(t, canary+"\n", "secret", "set", "OPENAI_API_KEY", "-server", s.grpcAddr)
	if code != 0 || !strings.Contains(out, "stored OPENAI_API_KEY version 1") {
		t.Fatalf("secret set = %d %q %q", code, out, errOut)
	}
	fabro(t, "second", "secret", "set", "-server", s.grpcAddr, "OPENAI_API_KEY") // flags before NAME work too
	fabro(t, "anthropic", "secret", "set", "ANTHROPIC_API_KEY", "-server", s.grpcAddr)

	out, _, code = fabro(t, "", "secret", "list", "-server", s.grpcAddr)
	if code != 0 {
		t.Fatalf("secret list exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "ANTHROPIC_API_KEY") ||
		!strings.HasPrefix(lines[2], "OPENAI_API_KEY") || strings.Fields(lines[2])[1] != "2" {
		t.Errorf("secret list =\n%s", out)
	}

	tests := []struct {
		name     string
		stdin    string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"value on the command line", "", []string{"secret", "set", "X_API_KEY", "sk-value"}, 2, "never from the command line"},
		{"empty value", "", []string{"secret", "set", "X_API_KEY"}, 1, "empty value"},
		{"stale version", "v", []string{"secret", "set", "OPENAI_API_KEY", "-expected-version", "1"}, 1, "Aborted"},
		{"bad name", "v", []string{"secret", "set", "lower-case"}, 1, "InvalidArgument"},
		{"unknown secret", "", []string{"secret", "rm", "NOPE_API_KEY"}, 1, "NotFound"},
		{"no name", "", []string{"secret", "rm"}, 2, "needs a secret NAME"},
		{"unknown subcommand", "", []string{"secret", "show"}, 2, `unknown subcommand "show": want set, list, rm`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := fabro(t, tt.stdin, append(tt.args, "-server", s.grpcAddr)...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}

	out, errOut, code = fabro(t, "", "secret", "rm", "ANTHROPIC_API_KEY", "-server", s.grpcAddr)
	if code != 0 || !strings.Contains(out, "deleted ANTHROPIC_API_KEY") {
		t.Errorf("secret rm = %d %q %q", code, out, errOut)
	}

	// Data survives a restart of the server.
	s.stop(t)
	s2 := startServe(t, dir)
	out, _, _ = fabro(t, "", "secret", "list", "-server", s2.grpcAddr)
	if !strings.Contains(out, "OPENAI_API_KEY") || strings.Contains(out, "ANTHROPIC_API_KEY") {
		t.Errorf("after restart, secret list =\n%s", out)
	}
	s2.stop(t)
	for _, printed := range []string{s.logs.String(), s2.logs.String(), out} {
		if strings.Contains(printed, "CANARY") {
			t.Errorf("the secret value was printed:\n%s", printed)
		}
	}
}

func TestSecretsOverREST(t *testing.T) {
	s := startServe(t, t.TempDir())
	admin := s.adminToken(t)
	do := func(method, path, body string) (int, string) { return s.rest(t, admin, method, path, body) }

	tests := []struct {
		method, path, body string
		wantStatus         int
		wantBody           string
	}{
		{"PUT", "/v1/secrets/GROQ_API_KEY", `{"value":"gsk-rest"}`, 200, `"currentVersion":"1"`},
		{"PUT", "/v1/secrets/GROQ_API_KEY", `{"value":"gsk-2","expectedVersion":"0"}`, 409, "expected version 0"},
		{"GET", "/v1/secrets/GROQ_API_KEY", "", 200, `"name":"GROQ_API_KEY"`},
		{"GET", "/v1/secrets", "", 200, `"GROQ_API_KEY"`},
		{"GET", "/v1/secrets/NOPE_API_KEY", "", 404, "SECRET_NOT_FOUND"},
		{"PUT", "/v1/secrets/bad-name", `{"value":"x"}`, 400, "invalid secret name"},
		// Values leave the vault over gRPC only: there is no such route.
		{"POST", "/v1/credentials:resolve", `{"names":["GROQ_API_KEY"]}`, 404, "ROUTE_NOT_FOUND"},
		{"DELETE", "/v1/secrets/GROQ_API_KEY", "", 200, `"deletedVersions":1`},
		{"GET", "/v1/secrets/GROQ_API_KEY", "", 404, "not found"},
		{"GET", "/openapi.json", "", 200, `"/v1/secrets/{name}"`},
	}
	for _, tt := range tests {
		status, body := do(tt.method, tt.path, tt.body)
		if status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
			t.Errorf("%s %s = %d %s; want %d containing %q", tt.method, tt.path, status, body, tt.wantStatus, tt.wantBody)
		}
		if strings.Contains(body, "gsk-") {
			t.Errorf("%s %s returned a secret value: %s", tt.method, tt.path, body)
		}
	}
}

// TestServeRunsSandbox checks that `fabro serve` serves the sandbox service
// beside the vault, on the same ports.
func TestServeRunsSandbox(t *testing.T) {
	work := t.TempDir()
	s := startServe(t, t.TempDir(), "FABRO_SANDBOX_ALLOWED_ROOTS="+work)
	admin := s.adminToken(t)
	post := func(path, body string) string {
		t.Helper()
		code, b := s.rest(t, admin, http.MethodPost, path, body)
		if code != 200 {
			t.Fatalf("POST %s = %d %s", path, code, b)
		}
		return b
	}
	var created struct {
		Sandbox struct {
			ID string `json:"sandboxId"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal([]byte(post("/v1/sandboxes", `{"spec":{"driver":"local","workingDirectory":"`+work+`"}}`)), &created); err != nil || created.Sandbox.ID == "" {
		t.Fatalf("create sandbox: %v %+v", err, created)
	}
	out := post("/v1/sandboxes/"+created.Sandbox.ID+":exec", `{"spec":{"command":"echo made-by-fabro > out.txt && cat out.txt"}}`)
	if !strings.Contains(out, `"exitCode":0`) {
		t.Errorf("exec result = %s", out)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out.txt")); err != nil || string(b) != "made-by-fabro\n" {
		t.Errorf("out.txt = %q, %v", b, err)
	}
}

// TestServeEndToEnd runs an agent prompt through `fabro serve`. The keys
// are stored with `fabro secret set`; the gateway resolves the model's key
// from the vault (not the environment) on its way to a wire-exact fake
// Anthropic, the agent's web_search resolves the Brave key from the vault
// with the agent's own identity, and read_file acts in a sandbox on a real
// directory.
func TestServeEndToEnd(t *testing.T) {
	const key, braveKey = "sk-ant-from-the-vault", "brave-from-the-vault"
	fake, err := fakeprovider.Listen("127.0.0.1:0", fakeprovider.New(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "read_file", Arguments: `{"file_path":"notes.txt"}`}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "web_search", Arguments: `{"query":"milk"}`}}},
		fakeprovider.Turn{Text: "The notes say: remember the milk."},
	))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	var (
		mu          sync.Mutex
		braveTokens []string
	)
	brave := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		braveTokens = append(braveTokens, r.Header.Get("X-Subscription-Token"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"web":{"results":[{"title":"Milk","url":"https://example.org/milk","description":"About milk."}]}}`)
	}))
	t.Cleanup(brave.Close)
	dir := t.TempDir()
	overlay := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, filepath.Join(dir, "data"), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "FABRO_BRAVE_BASE_URL="+brave.URL, "FABRO_SANDBOX_ALLOWED_ROOTS="+dir,
		"ANTHROPIC_API_KEY=", "BRAVE_SEARCH_API_KEY=")
	for name, value := range map[string]string{"ANTHROPIC_API_KEY": key, "BRAVE_SEARCH_API_KEY": braveKey} {
		// -no-probe: a probe would take one of the fake's scripted turns.
		if _, errOut, code := fabro(t, value, "secret", "set", name, "-no-probe", "-server", s.grpcAddr); code != 0 {
			t.Fatalf("secret set %s: %s", name, errOut)
		}
	}
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("remember the milk\n"), 0o644)

	out, errOut, code := fabro(t, "", "exec", "-server", s.grpcAddr, "-dir", ws, "--permissions", "full",
		"--model", "anthropic/claude-sonnet-4.5", "What do my notes say?")
	if code != 0 || !strings.Contains(out, "remember the milk") {
		t.Fatalf("fabro exec = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the fake provider saw %d requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		if got := r.Header.Get("X-Api-Key"); got != key {
			t.Errorf("x-api-key = %q, want the vault's value", got)
		}
	}
	// Each tool result is fed back to the model.
	if !strings.Contains(string(reqs[1].Body), "remember the milk") {
		t.Errorf("second request does not carry the read_file result:\n%s", reqs[1].Body)
	}
	if !strings.Contains(string(reqs[2].Body), "https://example.org/milk") {
		t.Errorf("third request does not carry the web_search result:\n%s", reqs[2].Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(braveTokens) != 1 || braveTokens[0] != braveKey {
		t.Errorf("Brave saw tokens %q, want the vault's value once", braveTokens)
	}
}

// TestServeRefusesExposedNATS: fabro serve with the embedded NATS on an
// address that is not loopback and no TLS stops before it listens, saying
// how to proceed, as it does for the gRPC and REST listeners.
func TestServeRefusesExposedNATS(t *testing.T) {
	t.Setenv("FABRO_DATA_DIR", t.TempDir())
	_, errOut, code := fabro(t, "", "serve", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-nats-listen", "0.0.0.0:0")
	if code == 0 || !strings.Contains(errOut, "refusing to listen for NATS on 0.0.0.0:0") || !strings.Contains(errOut, "-insecure") {
		t.Fatalf("fabro serve -nats-listen 0.0.0.0:0: exit %d, %s; want a refusal naming -insecure", code, errOut)
	}
}
