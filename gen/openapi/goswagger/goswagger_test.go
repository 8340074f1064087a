package goswagger

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	httptransport "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"

	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client/agent_service"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client/l_l_m_gateway_service"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/client/vault_service"
	"github.com/fabro-sh/fabro-go/gen/openapi/goswagger/models"
)

// serve builds fabro from this tree and runs fabro serve on free ports
// with a fresh data directory; it returns the REST base URL and the admin
// token.
func serve(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabro")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..", "..", "cmd", "fabro")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build fabro: %v\n%s", err, out)
	}
	data, ws := filepath.Join(dir, "data"), filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	overlay := fakeProvider(t, dir)
	cmd := exec.Command(bin, "serve", "-data-dir", data, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-nats-listen", "none", "-log-format", "json", "-sandbox-allowed-roots", ws)
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=unused", "FABRO_LLM_CATALOG_OVERLAY="+overlay)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var httpAddr string
	var logs strings.Builder
	for httpAddr == "" && sc.Scan() {
		logs.Write(append(sc.Bytes(), '\n'))
		var line struct {
			Msg      string `json:"msg"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "server started" {
			httpAddr = line.HTTPAddr
		}
	}
	if httpAddr == "" {
		t.Fatalf("fabro serve did not start:\n%s", logs.String())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	tok, err := os.ReadFile(filepath.Join(data, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	os.Setenv("T25_WS", ws)
	return "http://" + httpAddr, strings.TrimSpace(string(tok))
}

// fakeProvider builds and runs the wire-exact fake provider on a free port
// with three scripted turns (then its demo reply) and returns the path of a
// catalog overlay pointing every provider at it.
func fakeProvider(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "fakeprovider")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fakeprovider")
	build.Dir = filepath.Join("..", "..", "..", "services", "llmgateway")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build fakeprovider: %v\n%s", err, out)
	}
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`[{"Text": "Refused by the stock runtime."}, {"Text": "Hello from the fake provider.", "ChunkRunes": 5}, {"Text": "Done.", "ChunkRunes": 2}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-script", script, "-print-overlay")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	var ov json.RawMessage
	if err := json.NewDecoder(out).Decode(&ov); err != nil {
		t.Fatalf("fakeprovider overlay: %v", err)
	}
	path := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(path, ov, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGoSwaggerClient: the go-swagger client (strict on OpenAPI v2)
// decodes what fabro serve answers: a secret written and read, the lists
// the issue saw break on null (ListModels, ListProviders, ListSessions),
// and an error body as its google.rpc.Status.
func TestGoSwaggerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fabro serve")
	}
	base, tok := serve(t)
	c := client.NewHTTPClientWithConfig(strfmt.Default, client.DefaultTransportConfig().
		WithHost(strings.TrimPrefix(base, "http://")).WithSchemes([]string{"http"}))
	auth := httptransport.BearerToken(tok)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	value := "sk-1"
	_, err := c.VaultService.VaultServicePutSecretContext(ctx, vault_service.NewVaultServicePutSecretParams().
		WithName("X_API_KEY").WithBody(&models.FabroVaultV1VaultServicePutSecretBody{Value: &value}), auth)
	must("PutSecret", err)
	got, err := c.VaultService.VaultServiceGetSecretContext(ctx, vault_service.NewVaultServiceGetSecretParams().WithName("X_API_KEY"), auth)
	must("GetSecret", err)
	if got.Payload.Secret == nil || got.Payload.Secret.Name != "X_API_KEY" {
		t.Errorf("GetSecret = %+v", got.Payload.Secret)
	}
	secrets, err := c.VaultService.VaultServiceListSecretsContext(ctx, vault_service.NewVaultServiceListSecretsParams(), auth)
	must("ListSecrets", err)
	if len(secrets.Payload.Secrets) != 1 {
		t.Errorf("ListSecrets = %d, want 1", len(secrets.Payload.Secrets))
	}
	modelList, err := c.LlmGatewayService.LLMGatewayServiceListModelsContext(ctx, l_l_m_gateway_service.NewLLMGatewayServiceListModelsParams(), auth)
	must("ListModels", err)
	if len(modelList.Payload.Models) == 0 {
		t.Error("ListModels: none")
	}
	providers, err := c.LlmGatewayService.LLMGatewayServiceListProvidersContext(ctx, l_l_m_gateway_service.NewLLMGatewayServiceListProvidersParams(), auth)
	must("ListProviders", err)
	if len(providers.Payload.Providers) == 0 {
		t.Error("ListProviders: none")
	}
	_, err = c.AgentService.AgentServiceListSessionsContext(ctx, agent_service.NewAgentServiceListSessionsParams(), auth)
	must("ListSessions", err)

	_, err = c.VaultService.VaultServiceGetSecretContext(ctx, vault_service.NewVaultServiceGetSecretParams().WithName("NO_SUCH"), auth)
	var def *vault_service.VaultServiceGetSecretDefault
	if !errors.As(err, &def) {
		t.Fatalf("GetSecret of a missing secret: %v, want its default (error) response", err)
	}
	if def.Code() != 404 || def.Payload.Code != 5 || len(def.Payload.Details) == 0 {
		t.Errorf("GetSecret of a missing secret = %d %+v, want 404 NOT_FOUND with details", def.Code(), def.Payload)
	}
}
