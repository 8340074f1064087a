package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// A token is "fabro_<id>_<secret>": id is 8 random bytes in hex, public, so a
// token can be listed and revoked without its value; secret is 32 random
// bytes (256 bits) in unpadded base64url. Only SHA-256 of the whole token is
// stored: for a random 256-bit secret a plain hash is as good as a slow one.
const (
	tokenPrefix = "fabro_"
	idBytes     = 8
	secretBytes = 32
)

var (
	idLen     = hex.EncodedLen(idBytes)
	secretLen = base64.RawURLEncoding.EncodedLen(secretBytes)
	tokenLen  = len(tokenPrefix) + idLen + 1 + secretLen
)

// ErrInvalidToken is every reason a presented token is refused: malformed,
// unknown or revoked. Callers do not learn which.
var ErrInvalidToken = errors.New("auth: invalid token")

// newToken returns a fresh token and its public id.
func newToken() (value, id string) {
	var b [idBytes + secretBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id = hex.EncodeToString(b[:idBytes])
	return tokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(b[idBytes:]), id
}

// tokenID returns the public id of a well-formed token.
func tokenID(value string) (string, bool) {
	if len(value) != tokenLen || !strings.HasPrefix(value, tokenPrefix) {
		return "", false
	}
	id, rest := value[len(tokenPrefix):len(tokenPrefix)+idLen], value[len(tokenPrefix)+idLen:]
	if rest[0] != '_' {
		return "", false
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	for _, c := range []byte(rest[1:]) {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return "", false
		}
	}
	return id, true
}

func hashToken(value string) [sha256.Size]byte { return sha256.Sum256([]byte(value)) }

// ParseBearer returns the token of an "authorization" header or metadata
// value: "Bearer <token>", the scheme in any case.
func ParseBearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
