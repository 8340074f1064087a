package auth_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

func TestEphemeral(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	stored, _, _ := store.Issue("alice", auth.RoleUser)
	e := auth.NewEphemeral(store)
	agent := e.Issue("agent", auth.RoleService)
	if p, err := e.Verify(agent); err != nil || !p.IsService("agent") {
		t.Errorf("in-memory token: %v %v", p, err)
	}
	if p, err := e.Verify(stored); err != nil || p.Name != "alice" {
		t.Errorf("stored token through the ephemeral verifier: %v %v", p, err)
	}
	// Never written: the store and another process know nothing of it.
	if _, err := store.Verify(agent); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("the in-memory token verifies against the file: %v", err)
	}
	if _, err := e.Verify(agent[:len(agent)-2] + "zz"); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("a forged secret under a known id: %v", err)
	}
}
