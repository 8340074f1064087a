package ogenclient

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
)

type bearer string

func (b bearer) Bearer(context.Context, OperationName) (Bearer, error) {
	return Bearer{APIKey: "Bearer " + string(b)}, nil // an apiKey scheme on Authorization
}

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
	cmd := exec.Command(bin, "serve", "-data-dir", data, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-nats-listen", "none", "-log-format", "json", "-sandbox-allowed-roots", ws)
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=unused")
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

// TestOgenClient: the ogen client decodes what fabro serve answers, lists
// with unset fields (ListModels, ListProviders, ListSessions) and error
// bodies (a google.rpc.Status with its ErrorInfo) included.
func TestOgenClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fabro serve")
	}
	base, tok := serve(t)
	c, err := NewClient(base, bearer(tok))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	_, err = c.VaultServicePutSecret(ctx, &FabroVaultV1VaultServicePutSecretBody{Value: "sk-1"}, VaultServicePutSecretParams{Name: "X_API_KEY"})
	must("PutSecret", err)
	got, err := c.VaultServiceGetSecret(ctx, VaultServiceGetSecretParams{Name: "X_API_KEY"})
	must("GetSecret", err)
	if n := got.Secret.Value.Name.Value; n != "X_API_KEY" {
		t.Errorf("GetSecret name = %q", n)
	}
	secrets, err := c.VaultServiceListSecrets(ctx, VaultServiceListSecretsParams{})
	must("ListSecrets", err)
	if len(secrets.Secrets) != 1 {
		t.Errorf("ListSecrets = %d secrets, want 1", len(secrets.Secrets))
	}

	models, err := c.LLMGatewayServiceListModels(ctx, LLMGatewayServiceListModelsParams{})
	must("ListModels", err)
	if len(models.Models) == 0 {
		t.Fatal("ListModels: none")
	}
	m := models.Models[0]
	_, err = c.LLMGatewayServiceGetModel(ctx, LLMGatewayServiceGetModelParams{ProviderId: m.ProviderId.Value, ModelId: m.ModelId.Value})
	must("GetModel", err)
	providers, err := c.LLMGatewayServiceListProviders(ctx, LLMGatewayServiceListProvidersParams{})
	must("ListProviders", err)
	_, err = c.LLMGatewayServiceGetProvider(ctx, LLMGatewayServiceGetProviderParams{ProviderId: providers.Providers[0].ProviderId.Value})
	must("GetProvider", err)

	drivers, err := c.SandboxServiceListDrivers(ctx, SandboxServiceListDriversParams{})
	must("ListDrivers", err)
	_, err = c.SandboxServiceGetDriver(ctx, SandboxServiceGetDriverParams{DriverId: drivers.Drivers[0].DriverId.Value})
	must("GetDriver", err)
	_, err = c.SandboxServiceListSandboxes(ctx, SandboxServiceListSandboxesParams{})
	must("ListSandboxes", err)
	tokens, err := c.TokenServiceListTokens(ctx, TokenServiceListTokensParams{})
	must("ListTokens", err)
	_, err = c.TokenServiceGetToken(ctx, TokenServiceGetTokenParams{TokenId: tokens.Tokens[0].TokenId.Value})
	must("GetToken", err)

	created, err := c.AgentServiceCreateSession(ctx, &FabroAgentV1CreateSessionRequest{
		Model:       NewOptString("anthropic/claude-sonnet-4.5"),
		SandboxSpec: NewOptFabroSandboxV1SandboxSpec(FabroSandboxV1SandboxSpec{Driver: NewOptString("local"), WorkingDirectory: NewOptString(os.Getenv("T25_WS"))}),
	})
	must("CreateSession", err)
	id := created.Session.Value.SessionId.Value
	_, err = c.AgentServiceGetSession(ctx, AgentServiceGetSessionParams{SessionId: id})
	must("GetSession", err)
	sessions, err := c.AgentServiceListSessions(ctx, AgentServiceListSessionsParams{})
	must("ListSessions", err)
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].SessionId.Value != id {
		t.Errorf("ListSessions = %+v, want the session %s", sessions.Sessions, id)
	}

	// An error answer decodes as the google.rpc.Status it is.
	_, err = c.VaultServiceGetSecret(ctx, VaultServiceGetSecretParams{Name: "NO_SUCH"})
	var st *GoogleRPCStatusStatusCode
	if !errors.As(err, &st) {
		t.Fatalf("GetSecret of a missing secret: %v, want a *GoogleRPCStatusStatusCode", err)
	}
	if st.StatusCode != 404 || st.Response.Code.Value != 5 || len(st.Response.Details) == 0 {
		t.Errorf("GetSecret of a missing secret = %d %+v, want 404 NOT_FOUND with details", st.StatusCode, st.Response)
	}
}
