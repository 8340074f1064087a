package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestCanaryAppearsNowhere is the system canary: a secret with a
// distinctive value is stored in the vault of a `fabro serve` logging at
// debug level; the provider it is sent to quotes it back in a 401 body and
// in a mid-stream error event, as sent and then altered in every shape
// (fakeprovider.Transformations); agent prompts and calls of the
// compatible endpoints meet those errors. Afterwards no 8 characters of
// the value, of its hex or of its base64, in any case, are in a client
// output, a log line or an event on NATS, and the value is in no file under
// the data directory but the encrypted store.
func TestCanaryAppearsNowhere(t *testing.T) {
	const canary = "sk-CANARY-e2e-5b8d1c0f27a4"
	leaky := fakeprovider.NewLeaky(fakeprovider.LeakAuthError, fakeprovider.LeakMidStream,
		fakeprovider.LeakTransformed, fakeprovider.LeakTransformedMidStream)
	up := httptest.NewServer(leaky)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	overlay := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlay, []byte(`{"providers": {"leaky": {"codec": "CODEC_OPENAI_CHAT", "chatDialect": "CHAT_DIALECT_COMPATIBLE",
		"baseUrl": "`+up.URL+`/v1", "auth": {"scheme": "AUTH_SCHEME_BEARER", "credentialNames": ["LEAKY_API_KEY"]}}},
		"models": {"leaky/leaky-1": {"contextWindow": 100000, "maxOutputTokens": 4096}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	natsAddr := freeAddr(t)
	s := startServeWith(t, dataDir, []string{"-nats-listen", natsAddr},
		"FABRO_LLM_CATALOG_OVERLAY="+overlay, "LEAKY_API_KEY=", "FABRO_SANDBOX_ALLOWED_ROOTS="+dir)

	// Everything published on the event subjects, from the first event on.
	key, err := nats.NkeyOptionFromSeed(filepath.Join(dataDir, "agent", "nats-subscriber.nk"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+natsAddr, key)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var (
		mu   sync.Mutex
		msgs []string
	)
	if _, err := nc.Subscribe("fabro.agent.v1.sessions.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		h, _ := json.Marshal(m.Header)
		msgs = append(msgs, m.Subject+" "+string(h)+" "+string(m.Data))
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var printed []string
	run := func(stdin string, args ...string) {
		out, errOut, _ := fabro(t, stdin, args...)
		printed = append(printed, out, errOut)
	}
	run(canary+"\n", "secret", "set", "LEAKY_API_KEY", "-server", s.grpcAddr, "-data-dir", dataDir)
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, prompt := range []string{"first: the provider refuses the key", "second: the stream breaks",
		"third: the key comes back altered", "fourth: altered, mid-stream"} {
		run("", "exec", "-server", s.grpcAddr, "-data-dir", dataDir, "-dir", ws, "--model", "leaky/leaky-1", prompt)
	}
	run("", "secret", "list", "-server", s.grpcAddr, "-data-dir", dataDir)
	// The compatible endpoints, streamed or not, meet the altered echoes too.
	admin, err := os.ReadFile(filepath.Join(dataDir, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"false", "true"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.httpAddr+"/openai/v1/chat/completions",
			strings.NewReader(`{"model":"leaky/leaky-1","stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(admin)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		printed = append(printed, fmt.Sprintf("%d %v %s", resp.StatusCode, resp.Header, b))
	}

	// The canary really went upstream, and came back quoted both ways.
	echoes := leaky.Echoes()
	if len(echoes) < 2 || !strings.Contains(echoes[0], canary) {
		t.Fatalf("the provider saw %d requests (%q); want the stored key sent at least twice", len(echoes), echoes)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.stop(t)
	printed = append(printed, s.logs.String())
	mu.Lock()
	events := strings.Join(msgs, "\n")
	mu.Unlock()
	printed = append(printed, events)
	if !strings.Contains(events, "[REDACTED]") || !strings.Contains(strings.Join(printed, "\n"), "Incorrect API key provided") {
		t.Errorf("the provider's errors did not come through, masked: events:\n%s", events)
	}
	if !strings.Contains(strings.Join(printed, "\n"), "prefix=[REDACTED]") {
		t.Errorf("the provider's altered echoes did not come through, masked")
	}
	for i, p := range printed {
		if runs := canaryRuns(p, canary); len(runs) > 0 {
			t.Errorf("output %d holds %q of the canary:\n%s", i, runs, p)
		}
	}

	// No file but the encrypted store holds it, in any form.
	store := filepath.Join(dataDir, "vault", "secrets.db")
	files := 0
	err = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == store {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte("CANARY")) {
			t.Errorf("%s holds the canary", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(store); bytes.Contains(b, []byte("CANARY")) {
		t.Error("the store holds the canary in clear")
	}
	if files < 5 {
		t.Errorf("only %d files under the data directory: did the run write its logs, records and streams?", files)
	}
}

// canaryRuns lists the 8-character runs of canary, of its hex and of its
// base64 (std or URL, at each alignment) that text holds, ignoring case.
func canaryRuns(text, canary string) []string {
	low := strings.ToLower(text)
	forms := []string{canary, hex.EncodeToString([]byte(canary))}
	for k := range 3 {
		b := []byte(canary[k:])
		b = b[:len(b)/3*3] // whole groups: the same whatever follows
		forms = append(forms, base64.StdEncoding.EncodeToString(b), base64.URLEncoding.EncodeToString(b))
	}
	var found []string
	for _, f := range forms {
		f = strings.ToLower(f)
		for i := 0; i+8 <= len(f); i++ {
			if strings.Contains(low, f[i:i+8]) {
				found = append(found, f[i:i+8])
			}
		}
	}
	return found
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return "127.0.0.1:" + strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
}

// startServeWith runs `fabro serve` with extra flags, logging JSON at debug
// level, and waits until it serves.
func startServeWith(t *testing.T, dataDir string, args []string, extraEnv ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(fabroBin, append([]string{"serve", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-log-format", "json", "-log-level", "debug"}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"FABRO_DATA_DIR=" + dataDir}, extraEnv...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan error, 1)}
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
