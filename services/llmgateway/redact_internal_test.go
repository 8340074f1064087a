package llmgateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// TestCheckedError: an upstream error keeps its kind, status, identifier
// code and request id; its message is masked, on one line and bounded; a
// code or request id that quotes anything is dropped. The region resolved
// beside the secrets is a setting, and stays readable.
func TestCheckedError(t *testing.T) {
	creds := map[string]string{"AWS_SECRET_ACCESS_KEY": "s3cr3t-value-0123", "AWS_REGION": "eu-west-3"}
	tests := []struct {
		name string
		in   codec.Error
		want codec.Error
	}{
		{"masked message", codec.Error{Kind: 3, StatusCode: 403, Message: "bad signature for s3cr3t-value-0123 in eu-west-3", Code: "SignatureDoesNotMatch", RequestID: "req-1"},
			codec.Error{Kind: 3, StatusCode: 403, Message: "bad signature for [REDACTED] in eu-west-3", Code: "SignatureDoesNotMatch", RequestID: "req-1"}},
		{"upper-cased prefix", codec.Error{Message: "key S3CR3T-VALUE-01 is wrong"}, codec.Error{Message: "key [REDACTED] is wrong"}},
		{"code and request id quoting the key", codec.Error{Message: "m", Code: "invalid_api_key Authorization: Bearer s3cr3t-value-0123", RequestID: "req_s3cr3t-value-0123"},
			codec.Error{Message: "m"}},
		{"code of free text", codec.Error{Message: "m", Code: "see https://example.test/?q=1 now"}, codec.Error{Message: "m"}},
		{"forged log line", codec.Error{Message: "no\n{\"level\":\"INFO\",\"msg\":\"forged\"}\r\x1b[2J"}, codec.Error{Message: `no {"level":"INFO","msg":"forged"}  [2J`}},
		{"long", codec.Error{Message: strings.Repeat("é", 400)}, codec.Error{Message: strings.Repeat("é", maxMessage/2) + "…"}},
		{"bad bytes", codec.Error{Message: "a\xffb"}, codec.Error{Message: "a\uFFFDb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			var ce *codec.Error
			if !errors.As(checkedError(&in, lazyRedactor(creds)), &ce) {
				t.Fatal("not a codec error")
			}
			if diff := cmp.Diff(&tt.want, ce); diff != "" {
				t.Errorf("checkedError (-want +got):\n%s", diff)
			}
		})
	}
	plain := redactPlainError(errors.New(`GET http://x/models: echo "s3cr3t-value-0123"`), creds)
	if plain.Error() != `GET http://x/models: echo "[REDACTED]"` {
		t.Fatalf("plain error: %v", plain)
	}
	same := errors.New("nothing secret")
	if redactPlainError(same, creds) != same {
		t.Fatal("an error without secrets is replaced")
	}
}
