// Package envelope implements the vault's envelope encryption: each secret
// version is sealed with its own random data key (DEK) under AES-256-GCM, and
// the DEK is wrapped by the key-encryption key (KEK). Both seals bind the same
// additional data, so a record moved to another name or version, or with its
// metadata edited, fails to open.
package envelope

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a KEK and of every DEK: AES-256.
const KeySize = 32

// ErrOpen is returned when a ciphertext does not authenticate: the wrong key,
// or data that was tampered with or corrupted.
var ErrOpen = errors.New("envelope: message authentication failed")

// KEK is a key-encryption key. Its zero value is not usable; build one with
// [ParseKEK] or [NewKEK].
type KEK struct {
	aead cipher.AEAD
	id   string
}

// NewKEK returns a KEK over 32 raw key bytes.
func NewKEK(key []byte) (*KEK, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("envelope: a KEK is %d bytes, got %d", KeySize, len(key))
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	// The id names the key in records without revealing it: a KEK is 256
	// random bits, so a truncated hash cannot be inverted.
	sum := sha256.Sum256(append([]byte("fabro-vault kek id\x00"), key...))
	return &KEK{aead: aead, id: hex.EncodeToString(sum[:8])}, nil
}

// ParseKEK decodes a KEK written as base64 (standard or URL alphabet, padded
// or not) or as 64 hex digits, surrounding whitespace ignored.
func ParseKEK(text string) (*KEK, error) {
	s := strings.TrimSpace(text)
	for _, dec := range []func(string) ([]byte, error){
		hexDecode,
		base64.StdEncoding.DecodeString,
		base64.RawStdEncoding.DecodeString,
		base64.URLEncoding.DecodeString,
		base64.RawURLEncoding.DecodeString,
	} {
		if key, err := dec(s); err == nil && len(key) == KeySize {
			return NewKEK(key)
		}
	}
	return nil, fmt.Errorf("envelope: a KEK must be %d bytes written as base64 or hex", KeySize)
}

func hexDecode(s string) ([]byte, error) {
	if len(s) != 2*KeySize {
		return nil, errors.New("not a hex key")
	}
	return hex.DecodeString(s)
}

// GenerateKEKText returns a fresh random KEK written as base64.
func GenerateKEKText() string {
	return base64.StdEncoding.EncodeToString(randomBytes(KeySize))
}

// ID is a short, stable, non-secret identifier of the key.
func (k *KEK) ID() string { return k.id }

// Sealed is one encrypted value with its wrapped data key.
type Sealed struct {
	WrappedDEK []byte // nonce || AES-GCM(KEK, DEK)
	Ciphertext []byte // nonce || AES-GCM(DEK, plaintext)
	KEKID      string // the KEK that wrapped the DEK
}

// Seal encrypts plaintext under a fresh DEK and wraps the DEK with k, binding
// aad to both.
func (k *KEK) Seal(plaintext, aad []byte) (Sealed, error) {
	dek := randomBytes(KeySize)
	defer clear(dek)
	aead, err := newAEAD(dek)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{
		WrappedDEK: seal(k.aead, dek, wrapAAD(aad)),
		Ciphertext: seal(aead, plaintext, aad),
		KEKID:      k.id,
	}, nil
}

// Open unwraps the DEK with k and decrypts the value. It fails with [ErrOpen]
// when the record was sealed under another key or was altered.
func (k *KEK) Open(s Sealed, aad []byte) ([]byte, error) {
	dek, err := open(k.aead, s.WrappedDEK, wrapAAD(aad))
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	aead, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	return open(aead, s.Ciphertext, aad)
}

// Rewrap moves a sealed value from the KEK from to the KEK to without touching
// its ciphertext: only the DEK is unwrapped and wrapped again.
func Rewrap(from, to *KEK, s Sealed, aad []byte) (Sealed, error) {
	dek, err := open(from.aead, s.WrappedDEK, wrapAAD(aad))
	if err != nil {
		return Sealed{}, err
	}
	defer clear(dek)
	return Sealed{WrappedDEK: seal(to.aead, dek, wrapAAD(aad)), Ciphertext: s.Ciphertext, KEKID: to.id}, nil
}

// wrapAAD separates the DEK wrap's domain from the value's, so one ciphertext
// can never be passed off as the other.
func wrapAAD(aad []byte) []byte {
	return append([]byte("fabro-vault dek\x00"), aad...)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return cipher.NewGCM(block)
}

func seal(aead cipher.AEAD, plaintext, aad []byte) []byte {
	nonce := randomBytes(aead.NonceSize())
	return aead.Seal(nonce, nonce, plaintext, aad)
}

func open(aead cipher.AEAD, box, aad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(box) < n+aead.Overhead() {
		return nil, ErrOpen
	}
	plaintext, err := aead.Open(nil, box[:n], box[n:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return plaintext, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand documents it panics instead)
	return b
}
