package store

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
)

func newKEK(t testing.TB) *envelope.KEK {
	t.Helper()
	k, err := envelope.ParseKEK(envelope.GenerateKEKText())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ptr(v int64) *int64 { return &v }

func openStore(t testing.TB, path string, kek, prev *envelope.KEK) *Store {
	t.Helper()
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s, err := Open(path, kek, prev, Options{MaxVersions: 3, Now: func() time.Time {
		clock = clock.Add(time.Second)
		return clock
	}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustValue(t *testing.T, s *Store, name string) (string, int64) {
	t.Helper()
	v, ver, err := s.Value(name)
	if err != nil {
		t.Fatalf("Value(%s): %v", name, err)
	}
	return string(v), ver
}

func TestPutVersionsAndCheckAndSet(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "secrets.db"), newKEK(t), nil)

	tests := []struct {
		name     string
		value    string
		expected *int64
		wantVer  int64
		wantErr  error
	}{
		{name: "new secret", value: "v1", wantVer: 1},
		{name: "second version", value: "v2", wantVer: 2},
		{name: "cas matches", value: "v3", expected: ptr(2), wantVer: 3},
		{name: "cas stale", value: "lost", expected: ptr(2), wantErr: &ConflictError{}},
		{name: "cas must not exist", value: "lost", expected: ptr(0), wantErr: &ConflictError{}},
		{name: "empty value", value: "", wantErr: ErrEmptyValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := s.Put("OPENAI_API_KEY", []byte(tt.value), tt.expected, "admin")
			if tt.wantErr != nil {
				var ce *ConflictError
				if !errors.Is(err, tt.wantErr) && !(errors.As(tt.wantErr, &ce) && errors.As(err, &ce)) {
					t.Fatalf("Put error = %v, want %T %v", err, tt.wantErr, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			if md.Current != tt.wantVer {
				t.Errorf("version = %d, want %d", md.Current, tt.wantVer)
			}
			if got, _ := mustValue(t, s, "OPENAI_API_KEY"); got != tt.value {
				t.Errorf("value = %q, want %q", got, tt.value)
			}
		})
	}
	md, _ := s.Get("OPENAI_API_KEY")
	var vers []int64
	for _, v := range md.Versions {
		vers = append(vers, v.Version)
	}
	if diff := cmp.Diff([]int64{3, 2, 1}, vers); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
}

func TestInvalidNames(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "secrets.db"), newKEK(t), nil)
	for _, name := range []string{"", "lower", "1ABC", "A-B", "A B", strings.Repeat("A", 129), "A\tB"} {
		if _, err := s.Put(name, []byte("x"), nil, "admin"); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Put(%q) error = %v, want ErrInvalidName", name, err)
		}
	}
}

func TestVersionsAreNeverReusedAndPruned(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "secrets.db"), newKEK(t), nil)
	for i := range 4 {
		if _, err := s.Put("K", []byte(fmt.Sprint("v", i+1)), nil, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	md, _ := s.Get("K")
	if len(md.Versions) != 3 || md.Versions[2].Version != 2 {
		t.Fatalf("kept versions = %+v, want 4,3,2 (MaxVersions 3)", md.Versions)
	}
	if n, err := s.Delete("K", ptr(4), nil); err != nil || n != 1 {
		t.Fatalf("Delete version 4 = %d, %v", n, err)
	}
	if got, ver := mustValue(t, s, "K"); got != "v3" || ver != 3 {
		t.Fatalf("after destroying v4: %q v%d, want v3", got, ver)
	}
	md, err := s.Put("K", []byte("v5"), ptr(3), "admin")
	if err != nil || md.Current != 5 {
		t.Fatalf("Put after destroy = v%d, %v; want version 5 (numbers never reused)", md.Current, err)
	}
	if _, err := s.Delete("K", ptr(99), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete unknown version error = %v, want ErrNotFound", err)
	}
	if _, err := s.Delete("K", nil, ptr(4)); !errors.As(err, new(*ConflictError)) {
		t.Errorf("Delete with stale version error = %v, want conflict", err)
	}
	if n, err := s.Delete("K", nil, nil); err != nil || n != 3 {
		t.Fatalf("Delete all = %d, %v; want 3", n, err)
	}
	if _, err := s.Get("K"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after delete error = %v, want ErrNotFound", err)
	}
	if _, err := s.Delete("K", nil, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete error = %v, want ErrNotFound", err)
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	kek := newKEK(t)
	s := openStore(t, path, kek, nil)
	for _, n := range []string{"B_API_KEY", "A_API_KEY"} {
		if _, err := s.Put(n, []byte("value of "+n), nil, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.List("")
	s2 := openStore(t, path, kek, nil)
	after, corrupt := s2.List("")
	if diff := cmp.Diff(before, after); diff != "" || len(corrupt) != 0 {
		t.Fatalf("metadata changed across reopen (-before +after):\n%s corrupt=%v", diff, corrupt)
	}
	if got, _ := mustValue(t, s2, "A_API_KEY"); got != "value of A_API_KEY" {
		t.Errorf("value after reopen = %q", got)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("store mode = %v, want 0600", info.Mode().Perm())
	}
}

// editLine rewrites the line of the store file that holds name.
func editLine(t *testing.T, path, name string, edit func(string) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, name+"\t") {
			lines[i] = edit(l)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTamperedOrCorruptRecordsAreIsolated(t *testing.T) {
	tests := []struct {
		name string
		edit func(path string)
		// kept: the damaged line survives a rewrite verbatim.
		kept bool
	}{
		{
			name: "ciphertext bit flipped",
			edit: func(path string) {
				editLine(t, path, "BAD_API_KEY", func(l string) string {
					i := strings.Index(l, `"ciphertext":"`) + len(`"ciphertext":"`)
					b, _ := base64.StdEncoding.DecodeString(l[i : i+24])
					b[10] ^= 1
					return l[:i] + base64.StdEncoding.EncodeToString(b) + l[i+24:]
				})
			},
			kept: true,
		},
		{
			name: "metadata edited",
			edit: func(path string) {
				editLine(t, path, "BAD_API_KEY", func(l string) string {
					return strings.Replace(l, `"created_by":"admin"`, `"created_by":"mallory"`, 1)
				})
			},
			kept: true,
		},
		{
			name: "unsealed field edited",
			edit: func(path string) {
				editLine(t, path, "BAD_API_KEY", func(l string) string { return strings.Replace(l, `"latest":1`, `"latest":9`, 1) })
			},
			kept: true,
		},
		{
			name: "record truncated",
			edit: func(path string) { editLine(t, path, "BAD_API_KEY", func(l string) string { return l[:len(l)/2] }) },
			kept: true,
		},
		{
			name: "record removed",
			edit: func(path string) { editLine(t, path, "BAD_API_KEY", func(string) string { return "" }) },
		},
		{
			name: "file cut at a line boundary",
			edit: func(path string) {
				// BAD sorts before ZED: move it last, then cut the last line.
				data, _ := os.ReadFile(path)
				bad := lineOf(data, "BAD_API_KEY")
				data = bytes.Replace(data, append(bad, '\n'), nil, 1)
				data = append(data, append(bad, '\n')...)
				data = data[:len(data)-len(bad)-1]
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "record added from another store",
			edit: func(path string) {
				other := filepath.Join(t.TempDir(), "other.db")
				o := openStore(t, other, newKEK(t), nil)
				if _, err := o.Put("BAD_API_KEY", []byte("forged"), nil, "admin"); err != nil {
					t.Fatal(err)
				}
				data, _ := os.ReadFile(other)
				line := lineOf(data, "BAD_API_KEY")
				editLine(t, path, "BAD_API_KEY", func(string) string { return string(line) })
			},
			kept: true,
		},
		{
			name: "header damaged",
			edit: func(path string) {
				data, _ := os.ReadFile(path)
				i := bytes.Index(data, []byte("check=")) + len("check=") + 4
				data[i] ^= 1
				// The header can no longer vouch for anything: every version
				// is opened, so only the really damaged record is reported.
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				editLine(t, path, "BAD_API_KEY", func(l string) string {
					i := strings.Index(l, `"ciphertext":"`) + len(`"ciphertext":"`)
					b, _ := base64.StdEncoding.DecodeString(l[i : i+24])
					b[10] ^= 1
					return l[:i] + base64.StdEncoding.EncodeToString(b) + l[i+24:]
				})
			},
			kept: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secrets.db")
			kek := newKEK(t)
			s := openStore(t, path, kek, nil)
			for _, n := range []string{"GOOD_API_KEY", "BAD_API_KEY", "ZED_API_KEY"} {
				if _, err := s.Put(n, []byte("value of "+n), nil, "admin"); err != nil {
					t.Fatal(err)
				}
			}
			tt.edit(path)

			s = openStore(t, path, kek, nil)
			if _, _, err := s.Value("BAD_API_KEY"); !errors.As(err, new(*CorruptError)) {
				t.Fatalf("Value(BAD) error = %v, want CorruptError", err)
			}
			for _, n := range []string{"GOOD_API_KEY", "ZED_API_KEY"} {
				if got, _ := mustValue(t, s, n); got != "value of "+n {
					t.Errorf("Value(%s) = %q", n, got)
				}
			}
			listed, corrupt := s.List("")
			if len(listed) != 2 || !cmp.Equal(corrupt, []string{"BAD_API_KEY"}) {
				t.Errorf("List = %d secrets, corrupt %v; want 2 and [BAD_API_KEY]", len(listed), corrupt)
			}
			if dmg, _ := s.Damage(); len(dmg) != 1 || dmg[0].Name != "BAD_API_KEY" || dmg[0].Reason == "" {
				t.Errorf("Damage = %+v, want BAD_API_KEY with a reason", dmg)
			}
			// A write elsewhere must keep the damaged line as it was, and the
			// damage must still be reported after the rewrite and a reopen.
			damaged, _ := os.ReadFile(path)
			if _, err := s.Put("NEW_API_KEY", []byte("n"), nil, "admin"); err != nil {
				t.Fatal(err)
			}
			now, _ := os.ReadFile(path)
			if line := lineOf(damaged, "BAD_API_KEY"); tt.kept && !bytes.Contains(now, line) {
				t.Errorf("rewrite lost the damaged record %q", line)
			}
			s = openStore(t, path, kek, nil)
			if _, corrupt := s.List(""); !cmp.Equal(corrupt, []string{"BAD_API_KEY"}) {
				t.Errorf("after a rewrite and reopen, corrupt = %v, want [BAD_API_KEY]", corrupt)
			}
			// Deleting the damaged secret is how an operator repairs it.
			if _, err := s.Delete("BAD_API_KEY", nil, nil); err != nil {
				t.Errorf("Delete damaged: %v", err)
			}
			s = openStore(t, path, kek, nil)
			if listed, corrupt := s.List(""); len(listed) != 3 || len(corrupt) != 0 {
				t.Errorf("after delete and reopen: %d secrets, corrupt %v; want 3 and none", len(listed), corrupt)
			}
		})
	}
}

// TestNoAcceptedWriteBreaksTheStore writes the largest values the store
// accepts, in many versions, and reopens it; a value over the cap is refused
// and leaves nothing behind.
func TestNoAcceptedWriteBreaksTheStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	kek := newKEK(t)
	// The reader has no line limit at all (the old one broke at 64 MiB);
	// these sizes keep the test quick under -race.
	const limit, versions = 128 << 10, 3
	open := func() *Store {
		s, err := Open(path, kek, nil, Options{MaxValueBytes: limit, MaxVersions: versions})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}
	s := open()
	big := bytes.Repeat([]byte("x"), limit)
	for range versions {
		if _, err := s.Put("BIG", big, nil, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadFile(path)
	if _, err := s.Put("BIG", append(big, 'x'), nil, "admin"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put over the cap: error = %v, want ErrTooLarge", err)
	}
	if _, err := s.Put("OTHER", append(big, 'x'), nil, "admin"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put over the cap: error = %v, want ErrTooLarge", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("a refused Put changed the store file")
	}
	s = open()
	if got, ver := mustValue(t, s, "BIG"); len(got) != limit || ver != versions {
		t.Errorf("BIG after reopen: %d bytes, version %d", len(got), ver)
	}
	if _, err := s.Get("OTHER"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(OTHER) = %v, want ErrNotFound: a refused Put stores nothing", err)
	}
	// The default cap holds without options.
	d, err := Open(filepath.Join(t.TempDir(), "d.db"), kek, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put("K", make([]byte, DefaultMaxValueBytes+1), nil, "admin"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("default cap: error = %v, want ErrTooLarge", err)
	}
}

// TestLegacyStoreIsVerifiedAndUpgraded opens a v1 file (no sealed index):
// every version is opened, so a flipped byte still shows, and the next
// write seals an index.
func TestLegacyStoreIsVerifiedAndUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	kek := newKEK(t)
	s := openStore(t, path, kek, nil)
	for _, n := range []string{"A", "B"} {
		if _, err := s.Put(n, []byte("v"+n), nil, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	// Rewrite the header as v1 did: a check text and no index.
	check, err := kek.Seal([]byte(checkText), checkAAD)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	_, body, _ := bytes.Cut(data, []byte("\n"))
	header := fmt.Sprintf("%skek=%s dek=%s check=%s\n", headerPrefixV1, kek.ID(),
		base64.StdEncoding.EncodeToString(check.WrappedDEK), base64.StdEncoding.EncodeToString(check.Ciphertext))
	if err := os.WriteFile(path, append([]byte(header), body...), 0o600); err != nil {
		t.Fatal(err)
	}
	editLine(t, path, "B", func(l string) string {
		i := strings.Index(l, `"ciphertext":"`) + len(`"ciphertext":"`)
		b, _ := base64.StdEncoding.DecodeString(l[i : i+24])
		b[10] ^= 1
		return l[:i] + base64.StdEncoding.EncodeToString(b) + l[i+24:]
	})
	s = openStore(t, path, kek, nil)
	if _, corrupt := s.List(""); !cmp.Equal(corrupt, []string{"B"}) {
		t.Fatalf("legacy store: corrupt = %v, want [B]", corrupt)
	}
	if _, err := s.Put("C", []byte("c"), nil, "admin"); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !bytes.HasPrefix(data, []byte(headerPrefix)) {
		t.Error("the rewrite did not upgrade the header to v2")
	}
	s = openStore(t, path, kek, nil)
	if listed, corrupt := s.List(""); len(listed) != 2 || !cmp.Equal(corrupt, []string{"B"}) {
		t.Errorf("after upgrade: %d secrets, corrupt %v", len(listed), corrupt)
	}
}

func lineOf(data []byte, name string) []byte {
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(name+"\t")) {
			return l
		}
	}
	return nil
}

func TestWrongKEKIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	right, wrong := newKEK(t), newKEK(t)
	s := openStore(t, path, right, nil)
	if _, err := s.Put("K", []byte("v"), nil, "admin"); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, wrong, nil, Options{})
	var wk *WrongKEKError
	if !errors.As(err, &wk) || wk.StoreKEKID != right.ID() || wk.ConfiguredKEKID != wrong.ID() {
		t.Fatalf("Open with wrong KEK error = %v, want WrongKEKError naming both ids", err)
	}
	if !strings.Contains(err.Error(), "does not match") {
		t.Errorf("error %q does not say why", err)
	}
}

func TestRotateRewrapsEveryDataKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	oldKEK, newK := newKEK(t), newKEK(t)
	s := openStore(t, path, oldKEK, nil)
	for i := range 20 {
		if _, err := s.Put(fmt.Sprintf("K%d", i), []byte(fmt.Sprint("value", i)), nil, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadFile(path)

	s = openStore(t, path, newK, oldKEK) // rotation at open
	if s.KEKID() != newK.ID() {
		t.Fatalf("store KEK = %s, want %s", s.KEKID(), newK.ID())
	}
	after, _ := os.ReadFile(path)
	if bytes.Contains(after, []byte(oldKEK.ID())) {
		t.Error("the old KEK id is still in the store after rotation")
	}
	if !bytes.Equal(ciphertexts(before), ciphertexts(after)) {
		t.Error("rotation re-encrypted values; it should only re-wrap data keys")
	}
	for i := range 20 {
		if got, _ := mustValue(t, s, fmt.Sprintf("K%d", i)); got != fmt.Sprint("value", i) {
			t.Fatalf("K%d = %q after rotation", i, got)
		}
	}
	if _, err := Open(path, oldKEK, nil, Options{}); !errors.As(err, new(*WrongKEKError)) {
		t.Errorf("old KEK after rotation: error = %v, want WrongKEKError", err)
	}
	// Starting again with both keys is a no-op, not an error.
	openStore(t, path, newK, oldKEK)
}

func ciphertexts(data []byte) []byte {
	var out []byte
	for _, part := range bytes.Split(data, []byte(`"ciphertext":"`))[1:] {
		end := bytes.IndexByte(part, '"')
		out = append(out, part[:end]...)
	}
	return out
}

// BenchmarkRotate10k measures re-wrapping 10,000 secrets, the goal
// being under 10 s on two cores.
func BenchmarkRotate10k(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "secrets.db")
	keys := []*envelope.KEK{newKEK(b), newKEK(b)}
	s := openStore(b, path, keys[0], nil)
	for i := range 10_000 {
		if err := s.putNoPersist(fmt.Sprintf("SECRET_%05d", i), []byte("sk-0123456789abcdef0123456789abcdef")); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.persist(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.Rotate(keys[(i+1)%2]); err != nil {
			b.Fatal(err)
		}
	}
}
