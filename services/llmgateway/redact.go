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
	r := redact.New(slices.Collect(maps.Values(creds))...)
	out := *ce
	out.Message, out.Code, out.RequestID = r.String(ce.Message), r.String(ce.Code), r.String(ce.RequestID)
	return &out
}
