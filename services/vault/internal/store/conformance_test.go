package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
	"github.com/fabro-sh/fabro-go/services/vault/internal/jstest"
)

// place is where one backend keeps its records, so a test can open it
// again (a restart) and damage or roll it back from outside the vault.
type place interface {
	open(t *testing.T, kek, prev *envelope.KEK) (Backend, error)
	// flip changes one byte of the newest ciphertext of name in storage.
	flip(t *testing.T, name string)
	// snapshot copies the stored state; restore puts the copy back, as a
	// backup restored over newer writes.
	snapshot(t *testing.T) (restore func())
}

var places = []struct {
	name string
	new  func(t *testing.T) place
}{
	{"file", func(t *testing.T) place {
		dir := t.TempDir()
		return &filePlace{path: filepath.Join(dir, "secrets.db"), counter: filepath.Join(dir, "generation")}
	}},
	{"jetstream", func(t *testing.T) place {
		return &kvPlace{srv: jstest.Start(t), counter: filepath.Join(t.TempDir(), "generation")}
	}},
	{"jetstream-R3", func(t *testing.T) place {
		return &kvPlace{srv: jstest.StartCluster(t), counter: filepath.Join(t.TempDir(), "generation")}
	}},
}

type filePlace struct{ path, counter string }

func (p *filePlace) open(_ *testing.T, kek, prev *envelope.KEK) (Backend, error) {
	s, err := Open(p.path, kek, prev, Options{MaxVersions: 3, CounterFile: p.counter})
	if err != nil {
		return nil, err
	}
	return FileBackend{s}, nil
}

func (p *filePlace) flip(t *testing.T, name string) {
	editLine(t, p.path, name, flipCiphertext)
}

func (p *filePlace) snapshot(t *testing.T) func() {
	data, err := os.ReadFile(p.path)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(p.path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

type kvPlace struct {
	srv     *jstest.Server
	counter string
}

func (p *kvPlace) open(t *testing.T, kek, prev *envelope.KEK) (Backend, error) {
	// A fresh connection each time: each open is another replica, or the
	// same one restarted.
	kv, err := OpenKV(t.Context(), p.srv.JetStream(), p.srv.Replicas(), kek, prev, Options{MaxVersions: 3, CounterFile: p.counter})
	if err != nil {
		return nil, err
	}
	return kv, nil
}

func (p *kvPlace) bucket(t *testing.T) jetstream.KeyValue {
	kv, err := p.srv.JetStream().KeyValue(t.Context(), SecretsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func (p *kvPlace) flip(t *testing.T, name string) {
	kv := p.bucket(t)
	e, err := kv.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), name, []byte(flipCiphertext(string(e.Value())))); err != nil {
		t.Fatal(err)
	}
}

func (p *kvPlace) snapshot(t *testing.T) func() {
	kv := p.bucket(t)
	saved := map[string][]byte{}
	keys, err := kv.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		saved[k] = e.Value()
	}
	return func() {
		// A bucket restored from a backup: the same values, a fresh stream.
		js := p.srv.JetStream()
		if err := js.DeleteKeyValue(t.Context(), SecretsBucket); err != nil {
			t.Fatal(err)
		}
		kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: SecretsBucket, History: 1, Replicas: p.srv.Replicas()})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range saved {
			if _, err := kv.Put(t.Context(), k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// flipCiphertext changes one byte of the first ciphertext in a record's
// JSON, keeping it valid base64 and valid JSON.
func flipCiphertext(l string) string {
	i := strings.Index(l, `"ciphertext":"`) + len(`"ciphertext":"`)
	b, _ := base64.StdEncoding.DecodeString(l[i : i+24])
	b[5] ^= 0x01
	return l[:i] + base64.StdEncoding.EncodeToString(b) + l[i+24:]
}

func mustOpen(t *testing.T, p place, kek, prev *envelope.KEK) Backend {
	t.Helper()
	b, err := p.open(t, kek, prev)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return b
}

// TestConformance runs one contract on every backend: the file store and
// the JetStream bucket behave alike for every operation the vault uses.
func TestConformance(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, p place)
	}{
		{"PutGetVersions", conformPutGetVersions},
		{"CheckAndSet", conformCheckAndSet},
		{"Delete", conformDelete},
		{"ConcurrentWriters", conformConcurrent},
		{"Damage", conformDamage},
		{"Rollback", conformRollback},
		{"KEK", conformKEK},
		{"Validation", conformValidation},
	}
	for _, pl := range places {
		t.Run(pl.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, pl.new(t)) })
			}
		})
	}
}

func value(t *testing.T, b Backend, name string) (string, int64) {
	t.Helper()
	v, ver, err := b.Value(t.Context(), name)
	if err != nil {
		t.Fatalf("Value(%s): %v", name, err)
	}
	return string(v), ver
}

func versions(md Metadata) []int64 {
	var out []int64
	for _, v := range md.Versions {
		out = append(out, v.Version)
	}
	return out
}

func conformPutGetVersions(t *testing.T, p place) {
	ctx := t.Context()
	kek := newKEK(t)
	b := mustOpen(t, p, kek, nil)
	if _, err := b.Get(ctx, "OPENAI_API_KEY"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing secret: %v, want ErrNotFound", err)
	}
	if _, _, err := b.Value(ctx, "OPENAI_API_KEY"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Value of a missing secret: %v, want ErrNotFound", err)
	}
	for i := 1; i <= 5; i++ {
		md, err := b.Put(ctx, "OPENAI_API_KEY", fmt.Appendf(nil, "sk-%d", i), nil, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if md.Current != int64(i) {
			t.Fatalf("put %d made version %d", i, md.Current)
		}
	}
	md, err := b.Get(ctx, "OPENAI_API_KEY")
	if err != nil {
		t.Fatal(err)
	}
	// MaxVersions 3: the oldest are pruned, newest first.
	if d := cmp.Diff([]int64{5, 4, 3}, versions(md)); d != "" {
		t.Errorf("versions (-want +got):\n%s", d)
	}
	if md.Versions[0].CreatedBy != "admin" || md.Versions[0].Size != 4 {
		t.Errorf("newest version %+v, want created by admin, 4 bytes", md.Versions[0])
	}
	if v, ver := value(t, b, "OPENAI_API_KEY"); v != "sk-5" || ver != 5 {
		t.Errorf("Value = %q v%d, want sk-5 v5", v, ver)
	}
	if _, err := b.Put(ctx, "ANTHROPIC_API_KEY", []byte("a"), nil, "admin"); err != nil {
		t.Fatal(err)
	}
	secrets, corrupt, err := b.List(ctx, "OPENAI")
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets) != 1 || secrets[0].Name != "OPENAI_API_KEY" || len(corrupt) != 0 {
		t.Errorf("List(OPENAI) = %v %v, want OPENAI_API_KEY alone", secrets, corrupt)
	}
	// A restart (another replica) serves the same secrets.
	again := mustOpen(t, p, kek, nil)
	if v, ver := value(t, again, "OPENAI_API_KEY"); v != "sk-5" || ver != 5 {
		t.Errorf("after reopening Value = %q v%d, want sk-5 v5", v, ver)
	}
	if got := again.KEKID(); got != kek.ID() {
		t.Errorf("KEKID %s, want %s", got, kek.ID())
	}
}

func conformCheckAndSet(t *testing.T, p place) {
	ctx := t.Context()
	b := mustOpen(t, p, newKEK(t), nil)
	if _, err := b.Put(ctx, "K", []byte("v1"), ptr(0), "a"); err != nil {
		t.Fatalf("create with expected 0: %v", err)
	}
	tests := []struct {
		name     string
		expected int64
		current  int64
	}{
		{"create over an existing secret", 0, 1},
		{"stale version", 5, 1},
	}
	for _, tc := range tests {
		_, err := b.Put(ctx, "K", []byte("x"), ptr(tc.expected), "a")
		var c *ConflictError
		if !errors.As(err, &c) || c.Expected != tc.expected || c.Current != tc.current {
			t.Errorf("%s: %v, want a conflict expecting %d at %d", tc.name, err, tc.expected, tc.current)
		}
	}
	if v, ver := value(t, b, "K"); v != "v1" || ver != 1 {
		t.Errorf("a refused check-and-set changed the secret: %q v%d", v, ver)
	}
	if _, err := b.Put(ctx, "K", []byte("v2"), ptr(1), "a"); err != nil {
		t.Fatalf("check-and-set at the current version: %v", err)
	}
	if _, err := b.Delete(ctx, "K", nil, ptr(1)); !isConflict(err) {
		t.Errorf("delete at a stale version: %v, want a conflict", err)
	}
}

func isConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}

func conformDelete(t *testing.T, p place) {
	ctx := t.Context()
	b := mustOpen(t, p, newKEK(t), nil)
	for i := range 3 {
		if _, err := b.Put(ctx, "K", fmt.Appendf(nil, "v%d", i+1), nil, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.Delete(ctx, "K", ptr(3), nil); err != nil || n != 1 {
		t.Fatalf("delete the newest version: %d, %v", n, err)
	}
	if v, ver := value(t, b, "K"); v != "v2" || ver != 2 {
		t.Errorf("after destroying v3, Value = %q v%d, want v2 v2", v, ver)
	}
	// A destroyed number is never reused.
	md, err := b.Put(ctx, "K", []byte("v4"), nil, "a")
	if err != nil || md.Current != 4 {
		t.Fatalf("put after destroying v3: v%d, %v; want v4", md.Current, err)
	}
	if _, err := b.Delete(ctx, "K", ptr(3), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete a destroyed version: %v, want ErrNotFound", err)
	}
	if n, err := b.Delete(ctx, "K", nil, nil); err != nil || n != 3 {
		t.Fatalf("delete all: %d, %v; want 3", n, err)
	}
	if _, err := b.Get(ctx, "K"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after delete: %v, want ErrNotFound", err)
	}
	if _, err := b.Delete(ctx, "K", nil, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete of a deleted secret: %v, want ErrNotFound", err)
	}
	if md, err := b.Put(ctx, "K", []byte("new"), ptr(0), "a"); err != nil || md.Current != 1 {
		t.Errorf("create after delete: v%d, %v; want v1", md.Current, err)
	}
}

// conformConcurrent: writers on separate opens of one place (replicas, for
// the bucket) lose no update: plain puts all land as distinct versions,
// and of check-and-set puts at one version exactly one wins.
func conformConcurrent(t *testing.T, p place) {
	ctx := t.Context()
	kek := newKEK(t)
	b := mustOpen(t, p, kek, nil)
	writers := []Backend{b, b}
	if _, ok := p.(*kvPlace); ok {
		writers[1] = mustOpen(t, p, kek, nil) // a second replica
	}
	const each = 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for _, w := range writers {
		wg.Go(func() {
			for range each {
				if _, err := w.Put(ctx, "PLAIN", []byte("x"), nil, "a"); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a plain put: %v", err)
	}
	md, err := b.Get(ctx, "PLAIN")
	if err != nil {
		t.Fatal(err)
	}
	if md.Current != 2*each {
		t.Errorf("after %d puts the current version is %d: an update was lost", 2*each, md.Current)
	}

	if _, err := b.Put(ctx, "CAS", []byte("0"), nil, "a"); err != nil {
		t.Fatal(err)
	}
	for round := int64(1); round <= 5; round++ {
		results := make([]error, len(writers))
		for i, w := range writers {
			wg.Go(func() { _, results[i] = w.Put(ctx, "CAS", fmt.Appendf(nil, "%d-%d", round, i), ptr(round), "a") })
		}
		wg.Wait()
		won := 0
		for _, err := range results {
			switch {
			case err == nil:
				won++
			case !isConflict(err):
				t.Fatalf("round %d: %v, want success or a conflict", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d check-and-set writers at one version won, want exactly 1 (%v)", round, won, results)
		}
	}
}

func conformDamage(t *testing.T, p place) {
	ctx := t.Context()
	kek := newKEK(t)
	b := mustOpen(t, p, kek, nil)
	for _, n := range []string{"GOOD_API_KEY", "BAD_API_KEY"} {
		if _, err := b.Put(ctx, n, []byte("value of "+n), nil, "a"); err != nil {
			t.Fatal(err)
		}
	}
	p.flip(t, "BAD_API_KEY")
	b = mustOpen(t, p, kek, nil) // the file store checks at open
	var corrupt *CorruptError
	if _, err := b.Get(ctx, "BAD_API_KEY"); !errors.As(err, &corrupt) {
		t.Errorf("Get of a flipped record: %v, want CorruptError", err)
	}
	if _, _, err := b.Value(ctx, "BAD_API_KEY"); !errors.As(err, &corrupt) {
		t.Errorf("Value of a flipped record: %v, want CorruptError", err)
	}
	if v, _ := value(t, b, "GOOD_API_KEY"); v != "value of GOOD_API_KEY" {
		t.Errorf("the undamaged secret reads %q", v)
	}
	secrets, bad, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets) != 1 || secrets[0].Name != "GOOD_API_KEY" || !cmp.Equal(bad, []string{"BAD_API_KEY"}) {
		t.Errorf("List = %v, corrupt %v; want GOOD_API_KEY, corrupt [BAD_API_KEY]", secrets, bad)
	}
	if _, err := b.Put(ctx, "BAD_API_KEY", []byte("new"), nil, "a"); !errors.As(err, &corrupt) {
		t.Errorf("Put over a damaged record: %v, want CorruptError", err)
	}
	if _, err := b.Delete(ctx, "BAD_API_KEY", nil, nil); err != nil {
		t.Fatalf("deleting a damaged record whole: %v", err)
	}
	if _, err := b.Put(ctx, "BAD_API_KEY", []byte("new"), ptr(0), "a"); err != nil {
		t.Errorf("Put after deleting the damaged record: %v", err)
	}
}

func conformRollback(t *testing.T, p place) {
	ctx := t.Context()
	kek := newKEK(t)
	b := mustOpen(t, p, kek, nil)
	if _, err := b.Put(ctx, "K", []byte("old"), nil, "a"); err != nil {
		t.Fatal(err)
	}
	restore := p.snapshot(t)
	if _, err := b.Put(ctx, "K", []byte("new"), nil, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Delete(ctx, "K", nil, nil); err != nil {
		t.Fatal(err)
	}
	restore()
	_, err := p.open(t, kek, nil)
	var rb *RollbackError
	if !errors.As(err, &rb) {
		t.Fatalf("opening a store older than its counter: %v, want RollbackError", err)
	}
}

func conformKEK(t *testing.T, p place) {
	ctx := t.Context()
	oldKEK, newK := newKEK(t), newKEK(t)
	b := mustOpen(t, p, oldKEK, nil)
	if _, err := b.Put(ctx, "K", []byte("secret"), nil, "a"); err != nil {
		t.Fatal(err)
	}
	var wrong *WrongKEKError
	if _, err := p.open(t, newK, nil); !errors.As(err, &wrong) {
		t.Fatalf("open with another KEK: %v, want WrongKEKError", err)
	}
	rotated := mustOpen(t, p, newK, oldKEK)
	if v, _ := value(t, rotated, "K"); v != "secret" {
		t.Errorf("after rotation Value = %q", v)
	}
	if got := rotated.KEKID(); got != newK.ID() {
		t.Errorf("after rotation KEKID %s, want %s", got, newK.ID())
	}
	alone := mustOpen(t, p, newK, nil)
	if v, _ := value(t, alone, "K"); v != "secret" {
		t.Errorf("with the new key alone Value = %q", v)
	}
	if _, err := p.open(t, oldKEK, nil); !errors.As(err, &wrong) {
		t.Errorf("open with the old KEK after rotation: %v, want WrongKEKError", err)
	}
}

func conformValidation(t *testing.T, p place) {
	ctx := t.Context()
	b := mustOpen(t, p, newKEK(t), nil)
	tests := []struct {
		name  string
		key   string
		value []byte
		want  error
	}{
		{"lower case", "openai", []byte("x"), ErrInvalidName},
		{"the bucket's own key", metaKey, []byte("x"), ErrInvalidName},
		{"empty", "K", nil, ErrEmptyValue},
		{"too large", "K", make([]byte, DefaultMaxValueBytes+1), ErrTooLarge},
	}
	for _, tc := range tests {
		if _, err := b.Put(ctx, tc.key, tc.value, nil, "a"); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestKVRecordIsTheFileRecord: the bucket stores a file line's record
// JSON, so records move between the stores unchanged.
func TestKVRecordIsTheFileRecord(t *testing.T) {
	p := &kvPlace{srv: jstest.Start(t)}
	kek := newKEK(t)
	b := mustOpen(t, p, kek, nil)
	if _, err := b.Put(t.Context(), "K", []byte("v"), nil, "a"); err != nil {
		t.Fatal(err)
	}
	e, err := p.bucket(t).Get(t.Context(), "K")
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	if reason := verify(&r, kek, nil); reason != "" || r.Name != "K" {
		t.Errorf("the stored record %+v does not open as a file record: %s", r, reason)
	}
	if strings.Contains(string(e.Value()), `"v"`) {
		t.Errorf("the value is stored in the clear: %s", e.Value())
	}
}

// TestKVRefusesRecordsOverOneMessage: versions that could not fit one
// NATS message are refused at open, not at the put that would fail.
func TestKVRefusesRecordsOverOneMessage(t *testing.T) {
	srv := jstest.Start(t)
	_, err := OpenKV(t.Context(), srv.JetStream(), 1, newKEK(t), nil, Options{MaxVersions: 64})
	if err == nil || !strings.Contains(err.Error(), "max_payload") {
		t.Errorf("64 versions of 64 KiB: %v, want a max_payload error", err)
	}
}
