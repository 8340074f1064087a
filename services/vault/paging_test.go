package vault_test

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// TestListSecretsPagesUnderConcurrentWrites pages through the secrets, a
// few at a time, while other secrets are written and deleted: before the
// cursor and after it between pages, and from a writer running throughout.
// Every secret that existed throughout is listed exactly once, in order.
func TestListSecretsPagesUnderConcurrentWrites(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	ctx := t.Context()
	var throughout []string
	for i := range 30 {
		name := fmt.Sprintf("K_%03d0", i)
		h.put(t, name, "v")
		throughout = append(throughout, name)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // writes new names, updates old ones, deletes its own
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("K_%03d5", i%30)
			if _, err := h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: name, Value: "w"}); err != nil {
				t.Error(err)
				return
			}
			if _, err := h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: throughout[i%30], Value: "v2"}); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				if _, err := h.client.DeleteSecret(ctx, &vaultv1.DeleteSecretRequest{Name: name}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})

	seen := map[string]int{}
	var order []string
	token, pages := "", 0
	for {
		resp, err := h.client.ListSecrets(ctx, &vaultv1.ListSecretsRequest{Prefix: "K_", PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range resp.GetSecrets() {
			seen[s.GetName()]++
			order = append(order, s.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		// Between pages: one name before the cursor, one after it.
		last := order[len(order)-1]
		for _, name := range []string{"K_0000" + fmt.Sprint(pages%10), last + "1"} {
			if _, err := h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: name, Value: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()

	if pages < 8 {
		t.Errorf("%d pages of 4 for 30+ secrets", pages)
	}
	for _, name := range throughout {
		if seen[name] != 1 {
			t.Errorf("%s listed %d times, want once", name, seen[name])
		}
	}
	for name, n := range seen {
		if n > 1 {
			t.Errorf("%s listed %d times", name, n)
		}
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("order: %s before %s", order[i-1], order[i])
		}
	}
}

// TestListSecretsRefusesForeignTokens: a token this listing did not issue,
// or issued for another prefix, is INVALID_ARGUMENT on page_token.
func TestListSecretsRefusesForeignTokens(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	for _, n := range []string{"A_1", "A_2", "B_1"} {
		h.put(t, n, "v")
	}
	first, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{Prefix: "A_", PageSize: 1})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page = %v, %v; want a next page token", first, err)
	}
	for _, tt := range []struct {
		name  string
		req   *vaultv1.ListSecretsRequest
		field string
	}{
		{"offset token of the old scheme", &vaultv1.ListSecretsRequest{PageToken: "b2Zmc2V0OjI"}, "page_token"},
		{"not base64", &vaultv1.ListSecretsRequest{PageToken: "%%%"}, "page_token"},
		{"issued for another prefix", &vaultv1.ListSecretsRequest{Prefix: "B_", PageToken: first.GetNextPageToken()}, "page_token"},
		{"negative page size", &vaultv1.ListSecretsRequest{PageSize: -1}, "page_size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.ListSecrets(t.Context(), tt.req)
			if code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
			}
			if v := grpcerr.ViolationsOf(err); len(v) != 1 || v[0].GetField() != tt.field {
				t.Errorf("violations = %v, want field %s", v, tt.field)
			}
		})
	}
	// The token still continues the listing it was issued for.
	next, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{Prefix: "A_", PageSize: 1, PageToken: first.GetNextPageToken()})
	if err != nil || len(next.GetSecrets()) != 1 || next.GetSecrets()[0].GetName() != "A_2" || next.GetNextPageToken() != "" {
		t.Errorf("second page = %v, %v; want A_2 and no next token", next, err)
	}
}
