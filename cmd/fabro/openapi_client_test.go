package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/gen/openapi/client"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestGeneratedRESTClient drives `fabro serve` through the Go client that
// oapi-codegen generates from the OpenAPI 3 document (gen/openapi/client):
// unary routes (PutSecret, GetSecret, and an error as google.rpc.Status)
// and a streaming one (LLMGatewayService.Stream), whose NDJSON lines
// decode into the document's StreamResult type.
func TestGeneratedRESTClient(t *testing.T) {
	fake, err := fakeprovider.Listen("127.0.0.1:0", fakeprovider.New(
		fakeprovider.Turn{Text: "Hello from the fake provider.", ChunkRunes: 5},
	))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	dir := t.TempDir()
	overlay := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, filepath.Join(dir, "data"), "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=")
	token := s.adminToken(t)
	c, err := client.NewClientWithResponses("http://"+s.httpAddr, client.WithRequestEditorFn(
		func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	// Unary: the key the stream below spends, written and read back.
	put, err := c.VaultServicePutSecretWithResponse(ctx, "ANTHROPIC_API_KEY",
		client.VaultServicePutSecretJSONRequestBody{Value: "sk-ant-through-the-generated-client"})
	if err != nil {
		t.Fatal(err)
	}
	if put.JSON200 == nil {
		t.Fatalf("PutSecret: %d %s", put.StatusCode(), put.Body)
	}
	got, err := c.VaultServiceGetSecretWithResponse(ctx, "ANTHROPIC_API_KEY")
	if err != nil {
		t.Fatal(err)
	}
	if got.JSON200 == nil || got.JSON200.Secret == nil {
		t.Fatalf("GetSecret: %d %s", got.StatusCode(), got.Body)
	}
	if diff := cmp.Diff("ANTHROPIC_API_KEY", apiVal(got.JSON200.Secret.Name)); diff != "" {
		t.Errorf("GetSecret name (-want +got):\n%s", diff)
	}
	// An error is the document's google.rpc.Status, with an ErrorInfo.
	missing, err := c.VaultServiceGetSecretWithResponse(ctx, "NO_SUCH_SECRET")
	if err != nil {
		t.Fatal(err)
	}
	if missing.StatusCode() != http.StatusNotFound || missing.JSONDefault == nil {
		t.Fatalf("GetSecret of a missing secret: %d %s", missing.StatusCode(), missing.Body)
	}
	if code := apiVal(missing.JSONDefault.Code); code != 5 {
		t.Errorf("status code = %d, want 5 (NOT_FOUND)", code)
	}
	if !hasErrorInfo(missing.JSONDefault) {
		t.Errorf("status without an ErrorInfo: %s", missing.Body)
	}

	// Streaming: one StreamResult per line.
	role := client.FabroLlmV1RoleROLEUSER
	resp, err := c.LLMGatewayServiceStream(ctx, client.LLMGatewayServiceStreamJSONRequestBody{
		Request: client.FabroLlmV1Request{
			Model:            "anthropic/claude-sonnet-4.5",
			DisableFallbacks: apiPtr(true),
			Messages: &[]client.FabroLlmV1Message{{
				Role:  &role,
				Parts: &[]client.FabroLlmV1ContentPart{{Text: &client.FabroLlmV1TextPart{Text: apiPtr("Say hello.")}}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Stream: %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Stream Content-Type = %q, want application/x-ndjson", ct)
	}
	var text strings.Builder
	var lines, ended int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line client.FabroLlmV1StreamResponseStreamResult
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields() // a line is exactly {"result": ...} or {"error": ...}
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("line %d is not a StreamResult: %v\n%s", lines+1, err, sc.Text())
		}
		lines++
		if line.Error != nil {
			t.Fatalf("stream error: %s", sc.Text())
		}
		if line.Result == nil {
			t.Fatalf("line without a result event: %s", sc.Text())
		}
		ev := line.Result // each streamed StreamResponse is the event
		if ev.TextDelta != nil {
			text.WriteString(apiVal(ev.TextDelta.Text))
		}
		if ev.Ended != nil {
			ended++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if ended != 1 || text.String() != "Hello from the fake provider." {
		t.Errorf("stream of %d lines: %d ended events, text %q; want 1 and the fake's text", lines, ended, text.String())
	}
	// A stream that fails before its first message is an ordinary error
	// response: the code's HTTP status and one google.rpc.Status, not an
	// NDJSON {"error": ...} line.
	failed, err := c.LLMGatewayServiceStreamWithResponse(ctx, client.LLMGatewayServiceStreamJSONRequestBody{
		Request: client.FabroLlmV1Request{
			Model:    "nobody/no-such-model",
			Messages: &[]client.FabroLlmV1Message{{Role: &role, Parts: &[]client.FabroLlmV1ContentPart{{Text: &client.FabroLlmV1TextPart{Text: apiPtr("Hi.")}}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if failed.StatusCode() != http.StatusNotFound || failed.JSONDefault == nil || apiVal(failed.JSONDefault.Code) != 5 || !hasErrorInfo(failed.JSONDefault) {
		t.Errorf("a stream failing before it starts: %d %s, want 404 and a google.rpc.Status", failed.StatusCode(), failed.Body)
	}
	if reqs := fake.Requests(); len(reqs) != 1 || reqs[0].Header.Get("X-Api-Key") != "sk-ant-through-the-generated-client" {
		t.Errorf("the fake provider saw %d requests, want 1 with the key put through the client", len(reqs))
	}
}

func hasErrorInfo(st *client.GoogleRpcStatus) bool {
	if st.Details == nil {
		return false
	}
	for _, d := range *st.Details {
		reason, _ := d.AdditionalProperties["reason"].(string)
		if apiVal(d.Type) == "type.googleapis.com/google.rpc.ErrorInfo" && reason != "" {
			return true
		}
	}
	return false
}

func apiPtr[T any](v T) *T { return &v }

func apiVal[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
