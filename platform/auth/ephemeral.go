package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync"
)

// Ephemeral verifies tokens issued in memory, for principals of this process
// only (the services fabro serve runs in one process), and every other token
// against the store. Its tokens never reach a file and die with the process,
// so two processes sharing a store cannot revoke each other's.
type Ephemeral struct {
	Store Verifier

	mu     sync.RWMutex
	tokens map[string]verifyEntry // by public id
}

// NewEphemeral returns a verifier over store.
func NewEphemeral(store Verifier) *Ephemeral {
	return &Ephemeral{Store: store, tokens: map[string]verifyEntry{}}
}

// Issue returns a new in-memory token for the principal.
func (e *Ephemeral) Issue(name string, role Role) string {
	value, id := newToken()
	e.mu.Lock()
	e.tokens[id] = verifyEntry{p: Principal{Name: name, Role: role, TokenID: id}, hash: sha256.Sum256([]byte(value))}
	e.mu.Unlock()
	return value
}

// Verify implements Verifier.
func (e *Ephemeral) Verify(value string) (Principal, error) {
	if id, ok := tokenID(value); ok {
		e.mu.RLock()
		v, ok := e.tokens[id]
		e.mu.RUnlock()
		if ok {
			h := hashToken(value)
			if subtle.ConstantTimeCompare(h[:], v.hash[:]) == 1 {
				return v.p, nil
			}
			return Principal{}, ErrInvalidToken
		}
	}
	return e.Store.Verify(value)
}
