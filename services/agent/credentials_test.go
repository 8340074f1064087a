package agent

import (
	"strings"
	"testing"
)

func TestCredentialFromEnvironment(t *testing.T) {
	lookup := func(k string) (string, bool) {
		if k == "BRAVE_SEARCH_API_KEY" {
			return "brave-env", true
		}
		return "", false
	}
	cred := credentialFunc(nil, lookup)
	if v, err := cred(t.Context(), "BRAVE_SEARCH_API_KEY"); err != nil || v != "brave-env" {
		t.Errorf("BRAVE_SEARCH_API_KEY = %q, %v", v, err)
	}
	_, err := cred(t.Context(), "OTHER_API_KEY")
	if err == nil || !strings.Contains(err.Error(), "OTHER_API_KEY is not set") {
		t.Errorf("missing key error = %v, want it named", err)
	}
}
