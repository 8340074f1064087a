package llmgateway

import (
	"errors"
	"maps"
	"slices"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/redact"
)

// redactError masks the values of creds in an upstream error before it
// becomes a caller's error, a log line or an event. Codec errors carry the
// upstream's text; any other error is replaced by classify with a fixed
// message, so none of its text travels on.
func redactError(err error, creds map[string]string) error {
	var ce *codec.Error
	if err == nil || len(creds) == 0 || !errors.As(err, &ce) {
		return err
	}
	r := redactorOf(creds)
	out := *ce
	out.Message, out.Code, out.RequestID = r.String(ce.Message), r.String(ce.Code), r.String(ce.RequestID)
	return &out
}

// notSecret names the credentials resolved beside the secrets that are
// settings, not secrets: masking a region would only mangle messages.
var notSecret = map[string]bool{"AWS_REGION": true, "AWS_DEFAULT_REGION": true}

// redactorOf masks the secret values among creds.
func redactorOf(creds map[string]string) *redact.Redactor {
	var secrets []string
	for _, name := range slices.Sorted(maps.Keys(creds)) {
		if !notSecret[name] {
			secrets = append(secrets, creds[name])
		}
	}
	return redact.New(secrets...)
}

// redactPlainError masks the secret values of creds in any error's text
// (model discovery's, which are logged and shown as warnings).
func redactPlainError(err error, creds map[string]string) error {
	if err == nil || len(creds) == 0 {
		return err
	}
	r := redactorOf(creds)
	if msg := r.String(err.Error()); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}
