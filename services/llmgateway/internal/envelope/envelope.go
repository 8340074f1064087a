// Package envelope seals the round-trip state the gateway hands a client to
// send back (reasoning signatures, redacted reasoning, opaque provider
// items), so that nothing a client returns becomes provider input unless
// this gateway issued it, for that provider and model.
//
// An envelope is
//
//	fabro2.<base64url(route)>.<base64url(nonce || ciphertext || tag)>
//
// sealed with XChaCha20-Poly1305 under a 256-bit server key; route is the
// canonical "provider/model" that produced the state, in clear (the client
// saw it in the response anyway) and authenticated as additional data, so
// an envelope cannot be moved to another route without failing to open.
// The 192-bit random nonce makes nonce reuse negligible however many
// envelopes one key seals. Every replica that may receive a client's next
// turn must hold the same key (see LoadKey).
package envelope

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
)

// Prefix starts every envelope this version seals.
const Prefix = "fabro2."

// legacyPrefix is the unauthenticated envelope of earlier gateways: anyone
// could forge one, so none is accepted.
const legacyPrefix = "fabro1."

// KeySize is the length of a sealing key in bytes.
const KeySize = chacha20poly1305.KeySize

// Reasons an envelope does not open. Each is a client's error.
var (
	// ErrBare: the value is no envelope at all, such as a provider's own
	// signature or encrypted_content pasted in.
	ErrBare = errors.New("is not a round-trip envelope issued by this gateway")
	// ErrLegacy: a fabro1. envelope, which carried no authentication.
	ErrLegacy = errors.New("is an unauthenticated envelope of an earlier gateway version, which is no longer accepted; drop it from the conversation")
	// ErrForged: malformed, altered, or sealed under another key.
	ErrForged = errors.New("does not authenticate: it was altered, or not issued by this gateway")
)

// Sealer seals and opens envelopes under one key. It is safe for
// concurrent use.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a sealer for a KeySize-byte key.
func New(key []byte) (*Sealer, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("envelope: key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// NewRandom returns a sealer under a fresh key that lives in memory only:
// its envelopes do not open after a restart or on another replica.
func NewRandom() *Sealer {
	s, err := New(newKey())
	if err != nil {
		panic(err) // a KeySize key always makes an AEAD
	}
	return s
}

func newKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// additionalData binds an envelope to its route and, when one is known, to
// the principal it was handed to. The principal is not in the envelope:
// the opener supplies the caller's own, so another's fails to open. The
// two forms start differently and the route's length is given, so no
// route and principal can pass for another pair.
func additionalData(route, principal string) []byte {
	if principal == "" {
		return append([]byte("fabro2\x00"), route...)
	}
	ad := binary.AppendUvarint([]byte("fabro2\x01"), uint64(len(route)))
	return append(append(ad, route...), principal...)
}

// Seal returns the envelope of plaintext, bound to route and to principal
// ("user:alice"; "" when the caller is not known, as when the server runs
// without authentication).
func (s *Sealer) Seal(route, principal string, plaintext []byte) string {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	box := s.aead.Seal(nonce, nonce, plaintext, additionalData(route, principal))
	var b strings.Builder
	b.Grow(len(Prefix) + base64.RawURLEncoding.EncodedLen(len(route)) + 1 + base64.RawURLEncoding.EncodedLen(len(box)))
	b.WriteString(Prefix)
	b.WriteString(base64.RawURLEncoding.EncodeToString([]byte(route)))
	b.WriteByte('.')
	b.WriteString(base64.RawURLEncoding.EncodeToString(box))
	return b.String()
}

// Route reads the route an envelope claims, without authenticating it: for
// a precise error before Open, never for a decision.
func Route(v string) (string, error) {
	route, _, err := split(v)
	return route, err
}

// Open authenticates an envelope sealed for principal and returns its route
// and plaintext; one sealed for another principal is ErrForged.
func (s *Sealer) Open(v, principal string) (route string, plaintext []byte, err error) {
	route, box, err := split(v)
	if err != nil {
		return "", nil, err
	}
	if len(box) < s.aead.NonceSize()+s.aead.Overhead() {
		return "", nil, ErrForged
	}
	n := s.aead.NonceSize()
	plaintext, err = s.aead.Open(nil, box[:n], box[n:], additionalData(route, principal))
	if err != nil {
		return "", nil, ErrForged
	}
	return route, plaintext, nil
}

func split(v string) (route string, box []byte, err error) {
	rest, ok := strings.CutPrefix(v, Prefix)
	if !ok {
		if strings.HasPrefix(v, legacyPrefix) {
			return "", nil, ErrLegacy
		}
		return "", nil, ErrBare
	}
	r, b, ok := strings.Cut(rest, ".")
	if !ok {
		return "", nil, ErrForged
	}
	rb, err := base64.RawURLEncoding.DecodeString(r)
	if err != nil {
		return "", nil, ErrForged
	}
	box, err = base64.RawURLEncoding.DecodeString(b)
	if err != nil {
		return "", nil, ErrForged
	}
	return string(rb), box, nil
}

// LoadKey reads the sealing key at path (KeySize bytes, hex, as one line),
// creating it with a random key, mode 0600, when there is none. Creation
// is atomic (written beside, then linked into place), so replicas sharing
// the file that start together agree on one key.
func LoadKey(path string) ([]byte, error) {
	key, err := readKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("envelope: key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".envelope-key-*")
	if err != nil {
		return nil, fmt.Errorf("envelope: key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(newKey()) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("envelope: key: %w", err)
	}
	// CreateTemp made it 0600. Link fails if another replica won the race:
	// then its key is the one.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("envelope: key: %w", err)
	}
	return readKey(path)
}

func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("envelope: key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("envelope: key file %s must hold %d bytes in hex (%d hex digits)", path, KeySize, 2*KeySize)
	}
	return key, nil
}
