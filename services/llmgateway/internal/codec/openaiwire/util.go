package openaiwire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
)

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// Marshal encodes v as JSON without HTML escaping: prompts are sent as the
// caller wrote them.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode adds a newline
}
