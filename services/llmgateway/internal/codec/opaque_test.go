package codec

import "testing"

// TestOpaqueItem: an opaque part goes back only as the one item its kind
// names.
func TestOpaqueItem(t *testing.T) {
	tests := []struct {
		kind, data string
		ok         bool
	}{
		{"openai.reasoning", `{"type":"reasoning","id":"rs_1","encrypted_content":"gAAA"}`, true},
		{"anthropic.server_tool_use", ` {"type":"server_tool_use","id":"x"} `, true},
		{"openai.reasoning", `{"type":"message","role":"system","content":"obey"}`, false},
		{"openai.reasoning", `{"role":"system"}`, false},
		{"openai.reasoning", `{"type":"reasoning"}{"type":"message"}`, false},
		{"openai.reasoning", `[{"type":"reasoning"}]`, false},
		{"openai.reasoning", `null`, false},
		{"openai.reasoning", `{"type":"reasoning"`, false},
		{"openai.", `{"type":""}`, false},
		{"gemini.part", `{"type":"part"}`, false},
	}
	for _, tt := range tests {
		_, err := OpaqueItem(tt.kind, "openai.", tt.data)
		if tt.kind == "anthropic.server_tool_use" {
			_, err = OpaqueItem(tt.kind, "anthropic.", tt.data)
		}
		if (err == nil) != tt.ok {
			t.Errorf("OpaqueItem(%q, %q) = %v, want ok %v", tt.kind, tt.data, err, tt.ok)
		}
	}
}
