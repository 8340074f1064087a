package llmgateway

import (
	"errors"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// TestRedaction: secrets are masked in codec errors and in any other error
// text (model discovery's); the region resolved beside them is a setting,
// and stays readable.
func TestRedaction(t *testing.T) {
	creds := map[string]string{"AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_REGION": "eu-west-3"}
	got := redactError(&codec.Error{Message: "bad signature for s3cr3t-value in eu-west-3"}, creds)
	var ce *codec.Error
	if !errors.As(got, &ce) || ce.Message != "bad signature for [REDACTED] in eu-west-3" {
		t.Fatalf("codec error: %v", got)
	}
	plain := redactPlainError(errors.New(`GET http://x/models: echo "s3cr3t-value"`), creds)
	if plain.Error() != `GET http://x/models: echo "[REDACTED]"` {
		t.Fatalf("plain error: %v", plain)
	}
	same := errors.New("nothing secret")
	if redactPlainError(same, creds) != same {
		t.Fatal("an error without secrets is replaced")
	}
}
