package vault_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
)

// TestValueOverTheCapIsRefused: INVALID_ARGUMENT naming the field, and
// nothing stored, not even a new version of an existing secret.
func TestValueOverTheCapIsRefused(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, nil)
	h.put(t, "OPENAI_API_KEY", "sk-one")
	before, _ := os.ReadFile(filepath.Join(dir, "vault", "secrets.db"))
	for _, name := range []string{"OPENAI_API_KEY", "NEW_API_KEY"} {
		_, err := h.client.PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: name, Value: strings.Repeat("x", 64<<10+1)})
		if code(err) != codes.InvalidArgument {
			t.Fatalf("put %s over the cap: %v, want InvalidArgument", name, err)
		}
		var field string
		for _, d := range status.Convert(err).Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				field = br.GetFieldViolations()[0].GetField()
			}
		}
		if field != "value" || !strings.Contains(err.Error(), "65536") {
			t.Errorf("error %v: want a field violation on value stating the limit", err)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "vault", "secrets.db")); !bytes.Equal(before, after) {
		t.Error("a refused put changed the store")
	}
	list, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{})
	if err != nil || len(list.GetSecrets()) != 1 || list.GetSecrets()[0].GetCurrentVersion() != 1 {
		t.Errorf("list after refused puts = %v, %v; want OPENAI_API_KEY at version 1 only", list, err)
	}
	// A value at the cap is accepted and survives a restart.
	h.put(t, "BIG_API_KEY", strings.Repeat("y", 64<<10))
	h = start(t, dir, nil)
	if list, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{}); err != nil || len(list.GetSecrets()) != 2 {
		t.Errorf("after restart: %v, %v", list, err)
	}
}

// TestStoreCutShortNamesEverySecretAtStart: a store file that lost its last
// records at a line boundary starts, names each lost secret in a log line
// and in ListSecrets, and serves the rest.
func TestStoreCutShortNamesEverySecretAtStart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, nil)
	for _, n := range []string{"A_API_KEY", "B_API_KEY", "C_API_KEY", "D_API_KEY"} {
		h.put(t, n, "value of "+n)
	}
	path := filepath.Join(dir, "vault", "secrets.db")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the header and the first two records (sorted by name).
	lines := strings.SplitAfter(string(data), "\n")
	if err := os.WriteFile(path, []byte(strings.Join(lines[:3], "")), 0o600); err != nil {
		t.Fatal(err)
	}

	h = start(t, dir, nil)
	list, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetSecrets()) != 2 || !cmp.Equal(list.GetCorruptNames(), []string{"C_API_KEY", "D_API_KEY"}) {
		t.Errorf("list = %v; want A and B served, C and D reported", list)
	}
	logs := h.logs.String()
	for _, n := range []string{"C_API_KEY", "D_API_KEY"} {
		if !strings.Contains(logs, `"msg":"vault secret damaged; delete it and put it again","name":"`+n+`"`) {
			t.Errorf("start-up log does not name %s:\n%s", n, logs)
		}
	}
	resp, err := h.client.ResolveCredentials(h.as(t.Context(), "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"A_API_KEY"}})
	if err != nil || resp.GetCredentials()[0].GetValue() != "value of A_API_KEY" {
		t.Errorf("resolve A = %v, %v", resp, err)
	}
	if _, err := h.client.ResolveCredentials(h.as(t.Context(), "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"D_API_KEY"}}); code(err) != codes.DataLoss {
		t.Errorf("resolve D = %v, want DataLoss", err)
	}
}
