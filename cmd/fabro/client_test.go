package main

import (
	"strings"
	"testing"
)

// TestTokensStayLocal: the admin token fabro serve wrote is presented to a
// server on this machine only, and no token is sent in plaintext to one
// elsewhere.
func TestTokensStayLocal(t *testing.T) {
	for target, want := range map[string]bool{
		"127.0.0.1:7700": true, "[::1]:7700": true, "localhost:7700": true,
		"10.1.2.3:7700": false, "fabro.example:7700": false, "127.0.0.1": false,
	} {
		if got := loopbackTarget(target); got != want {
			t.Errorf("loopbackTarget(%q) = %v, want %v", target, got, want)
		}
	}
	noEnv := func(string) (string, bool) { return "", false }
	withToken := func(k string) (string, bool) { return "fabro_x", k == "FABRO_TOKEN" }

	remote := &clientFlags{server: "10.1.2.3:7700", dataDir: t.TempDir(), lookupEnv: noEnv}
	if _, err := remote.token(); err == nil || !strings.Contains(err.Error(), "on this machine only") {
		t.Errorf("token() for a remote server without a token = %v; want the data directory's admin token refused", err)
	}
	remote.lookupEnv = withToken
	if _, _, _, err := remote.connect(t.Context()); err == nil || !strings.Contains(err.Error(), "plaintext") {
		t.Errorf("connect to a remote server without TLS = %v; want a refusal", err)
	}
	local := &clientFlags{server: "127.0.0.1:1", lookupEnv: withToken}
	_, _, done, err := local.connect(t.Context())
	if err != nil {
		t.Fatalf("connect to this machine: %v", err)
	}
	done()
}
