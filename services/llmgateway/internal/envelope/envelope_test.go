package envelope

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func sealer(t testing.TB, b byte) *Sealer {
	t.Helper()
	s, err := New(bytes.Repeat([]byte{b}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpen(t *testing.T) {
	s := sealer(t, 1)
	const route = "anthropic/claude-sonnet-4.5"
	plain := []byte(`{"s":"sig"}`)
	env := s.Seal(route, "", plain)
	if !strings.HasPrefix(env, Prefix) {
		t.Fatalf("Seal = %q, want the %s prefix", env, Prefix)
	}
	gotRoute, got, err := s.Open(env, "")
	if err != nil || gotRoute != route || !bytes.Equal(got, plain) {
		t.Fatalf("Open(Seal) = %q, %q, %v", gotRoute, got, err)
	}
	if r, err := Route(env); err != nil || r != route {
		t.Errorf("Route = %q, %v", r, err)
	}
	if env2 := s.Seal(route, "", plain); env2 == env {
		t.Error("two seals of one plaintext are equal: the nonce is not fresh")
	}

	body := env[strings.LastIndexByte(env, '.')+1:]
	otherRoute := Prefix + base64.RawURLEncoding.EncodeToString([]byte("anthropic/claude-opus-4")) + "." + body
	tests := []struct {
		name string
		v    string
		want error
	}{
		{"bare provider signature", "EqQBCkgIARABGAIiQL", ErrBare},
		{"empty", "", ErrBare},
		{"legacy unauthenticated", "fabro1.eyJvIjoiYW50aHJvcGljIiwicyI6ImZvcmdlZCJ9", ErrLegacy},
		{"moved to another model", otherRoute, ErrForged},
		{"another key", sealer(t, 2).Seal(route, "", plain), ErrForged},
		{"no body", Prefix + "YQ", ErrForged},
		{"truncated", env[:len(env)-4], ErrForged},
		{"short box", Prefix + "YQ.AAAA", ErrForged},
		{"bad base64 route", Prefix + "***." + body, ErrForged},
		{"bad base64 body", Prefix + "YQ.***", ErrForged},
	}
	// Every single-character change of the body or the route.
	for i := len(Prefix); i < len(env); i++ {
		if env[i] == '.' {
			continue
		}
		c := byte('A')
		if env[i] == 'A' {
			c = 'B'
		}
		tests = append(tests, struct {
			name string
			v    string
			want error
		}{"altered at " + string(rune('0'+i%10)), env[:i] + string(c) + env[i+1:], ErrForged})
	}
	for _, tt := range tests {
		_, _, err := s.Open(tt.v, "")
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Open(%.40q) = %v, want %v", tt.name, tt.v, err, tt.want)
		}
	}
}

func TestLoadKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgateway", "envelope.key")
	// Replicas starting together on one shared file agree on one key.
	keys := make([][]byte, 50)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := LoadKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for i, k := range keys {
		if len(k) != KeySize || !bytes.Equal(k, keys[0]) {
			t.Fatalf("replica %d got key %x, replica 0 %x", i, k, keys[0])
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if again, err := LoadKey(path); err != nil || !bytes.Equal(again, keys[0]) {
		t.Errorf("a restart read another key: %x, %v", again, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the key's directory holds %d files, want only the key (no temporary left)", len(entries))
	}
	for _, bad := range []string{"", "zz", strings.Repeat("ab", KeySize-1)} {
		p := filepath.Join(t.TempDir(), "k")
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(p); err == nil {
			t.Errorf("LoadKey accepted a key file holding %q", bad)
		}
	}
}

// BenchmarkSeal and BenchmarkOpen: the cost per envelope, for a signature
// (about 300 bytes) and an OpenAI encrypted_content item (about 4 KiB),
// beside the unauthenticated fabro1. envelope's base64 alone (the
// baseline, in the same run).
func BenchmarkSeal(b *testing.B) {
	s := sealer(b, 1)
	for _, n := range []int{300, 4096} {
		plain := bytes.Repeat([]byte("x"), n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				s.Seal("openai/gpt-5", "", plain)
			}
		})
		b.Run(sizeName(n)+"/base64-only", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				_ = legacyPrefix + base64.RawURLEncoding.EncodeToString(plain)
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	s := sealer(b, 1)
	for _, n := range []int{300, 4096} {
		env := s.Seal("openai/gpt-5", "", bytes.Repeat([]byte("x"), n))
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, _, err := s.Open(env, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
		legacy := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte("x"), n))
		b.Run(sizeName(n)+"/base64-only", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, err := base64.RawURLEncoding.DecodeString(legacy); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return "4KiB"
	}
	return "300B"
}

// TestConcurrent: one sealer serves many requests at once.
func TestConcurrent(t *testing.T) {
	s := sealer(t, 1)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			route := "p/m" + string(rune('a'+i%26))
			plain := bytes.Repeat([]byte{byte(i)}, i)
			for range 20 {
				r, got, err := s.Open(s.Seal(route, "", plain), "")
				if err != nil || r != route || !bytes.Equal(got, plain) {
					t.Errorf("Open(Seal) = %q, %x, %v", r, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestOpenPrincipal: an envelope sealed to a principal opens for that
// principal only: not for another, not for none, and one sealed to none
// does not open for a principal; no route and principal pair passes for
// another whose concatenation is the same.
func TestOpenPrincipal(t *testing.T) {
	s := sealer(t, 1)
	plain := []byte("state")
	alice := s.Seal("p/m", "user:alice", plain)
	if _, got, err := s.Open(alice, "user:alice"); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open by its principal = %q, %v", got, err)
	}
	cases := []struct{ name, env, principal string }{
		{"another principal", alice, "user:bob"},
		{"an admin", alice, "admin:alice"},
		{"no principal", alice, ""},
		{"sealed to none, opened by a principal", s.Seal("p/m", "", plain), "user:alice"},
		{"route and principal shifted", s.Seal("p/mu", "ser:alice", plain), "user:alice"},
	}
	for _, c := range cases {
		if _, _, err := s.Open(c.env, c.principal); !errors.Is(err, ErrForged) {
			t.Errorf("%s: Open = %v, want ErrForged", c.name, err)
		}
	}
}
