package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
)

// The JetStream store. Every secret is one key of a key-value bucket whose
// value is the secret's record, the very JSON of a line of the file store
// (every version sealed by the envelope package, the KEK outside), and
// every write is a compare-and-set on the key's revision, so two replicas
// never overwrite each other unseen: a write with an expected version that
// lost the race is a [*ConflictError], and one without retries on the fresh
// record, keeping both versions.
//
// The versions live in the record rather than in the key's history: a
// single version can be destroyed, and version numbers are never reused
// after the newest is, which a history of immutable messages could only
// express with a second, non-atomic write.
//
// Damage detection: a value that does not decode, names another secret, or
// holds a version that does not authenticate (the envelope binds every
// stored field) is a [*CorruptError] for that secret alone. Rollback
// detection: the bucket's stream sequence only grows, and the rollback
// counter keeps the highest one this replica saw; a bucket whose last
// sequence is below it was restored or re-created, and is refused.

// SecretsBucket is the key-value bucket of the JetStream store.
const SecretsBucket = "FABRO_VAULT_SECRETS"

// metaKey holds the sealed check of the KEK that seals the bucket; no
// secret can have this name (lower case, a dot).
const metaKey = "fabro.meta"

// ErrUnavailable wraps a failure to reach the store (NATS down, a timeout):
// the operation may succeed when retried.
var ErrUnavailable = errors.New("the vault's store is unavailable")

// opTimeout bounds one round trip to the bucket: with NATS unreachable a
// call fails UNAVAILABLE in this time rather than waiting out the caller's
// deadline (the client buffers requests while it reconnects).
const opTimeout = 5 * time.Second

// KV is the [Backend] of a JetStream key-value bucket.
type KV struct {
	kv          jetstream.KeyValue
	maxVersions int
	maxValue    int
	now         func() time.Time
	counter     string
	rollback    *RollbackError

	mu  sync.RWMutex // kek; the counter's high-water mark
	kek *envelope.KEK
	hw  uint64
}

var _ Backend = (*KV)(nil)

// meta is the bucket's KEK check: the sealed check text, as in the file
// store's header.
type meta struct {
	KEKID      string `json:"kek_id"`
	WrappedDEK []byte `json:"wrapped_dek"`
	Check      []byte `json:"check"`
}

// OpenKV creates (or opens) the bucket on js, kept by replicas servers.
// Like [Open], it refuses a bucket sealed under another KEK with a
// [*WrongKEKError] and re-wraps every data key when the bucket is sealed
// under previous; with opts.CounterFile it refuses a bucket older than
// the counter with a [*RollbackError] unless opts.AcceptRollback.
func OpenKV(ctx context.Context, js jetstream.JetStream, replicas int, kek, previous *envelope.KEK, opts Options) (*KV, error) {
	s := &KV{
		maxVersions: cmp.Or(opts.MaxVersions, 10),
		maxValue:    cmp.Or(opts.MaxValueBytes, DefaultMaxValueBytes),
		now:         opts.Now,
		counter:     opts.CounterFile,
		kek:         kek,
	}
	if s.now == nil {
		s.now = time.Now
	}
	// Worst case of one record: every version at the size cap, base64 in
	// JSON, with room for its metadata. It must fit one NATS message.
	if worst, limit := s.maxVersions*((s.maxValue+64)*4/3+512), int(js.Conn().MaxPayload()); worst > limit {
		return nil, fmt.Errorf("store: %d versions of up to %d bytes need records of up to %d bytes, over the NATS server's max_payload of %d: lower -vault-max-versions or -vault-max-secret-bytes, or raise max_payload",
			s.maxVersions, s.maxValue, worst, limit)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: SecretsBucket, Description: "fabro vault secrets, sealed under the KEK",
		History: 1, Replicas: max(replicas, 1), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", SecretsBucket, unavailable(err))
	}
	s.kv = kv
	if err := s.checkRollback(ctx, opts.AcceptRollback); err != nil {
		return nil, err
	}
	rotate, err := s.checkKEK(ctx, kek, previous)
	if err != nil {
		return nil, err
	}
	if rotate {
		s.kek = previous
		if err := s.Rotate(ctx, kek); err != nil {
			return nil, fmt.Errorf("rotate to the new key-encryption key: %w", err)
		}
	}
	return s, nil
}

// checkRollback compares the bucket's last stream sequence with the counter.
func (s *KV) checkRollback(ctx context.Context, accept bool) error {
	if s.counter == "" {
		return nil
	}
	counter, err := readCounter(s.counter)
	if err != nil {
		return err
	}
	st, err := s.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("store: bucket %s: %w", SecretsBucket, unavailable(err))
	}
	last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	if counter.present && last < counter.value {
		e := &RollbackError{Store: "JetStream bucket " + SecretsBucket, Generation: last, CounterFile: s.counter, Counter: counter.value}
		if !accept {
			return e
		}
		s.rollback = e
	}
	s.hw = max(last, counter.value)
	return writeCounter(s.counter, s.hw)
}

// Rollback is the rollback OpenKV accepted; nil when there was none.
func (s *KV) Rollback() *RollbackError { return s.rollback }

// Generation is the highest stream sequence of the bucket this replica
// has seen (0 without a rollback counter).
func (s *KV) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.hw
}

// saw raises the rollback counter to a revision written.
func (s *KV) saw(rev uint64) error {
	if s.counter == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.hw {
		return nil
	}
	s.hw = rev
	return writeCounter(s.counter, rev)
}

// checkKEK writes the bucket's KEK check on first use, and otherwise says
// whether the bucket is sealed under kek (false) or previous (true).
func (s *KV) checkKEK(ctx context.Context, kek, previous *envelope.KEK) (rotate bool, err error) {
	e, err := s.kv.Get(ctx, metaKey)
	if isKeyNotFound(err) {
		if err := s.writeMeta(ctx, kek, 0); err != nil && !errors.Is(err, errRevision) {
			return false, err
		}
		// Another replica may have written it first, under its key.
		if e, err = s.kv.Get(ctx, metaKey); err != nil {
			return false, fmt.Errorf("store: bucket %s: %w", SecretsBucket, unavailable(err))
		}
	} else if err != nil {
		return false, fmt.Errorf("store: bucket %s: %w", SecretsBucket, unavailable(err))
	}
	var m meta
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return false, fmt.Errorf("store: bucket %s: its key check does not decode (damaged): %w", SecretsBucket, err)
	}
	key := kek
	switch {
	case m.KEKID == kek.ID():
	case previous != nil && m.KEKID == previous.ID():
		key, rotate = previous, true
	default:
		return false, &WrongKEKError{StoreKEKID: m.KEKID, ConfiguredKEKID: kek.ID()}
	}
	got, err := key.Open(envelope.Sealed{KEKID: m.KEKID, WrappedDEK: m.WrappedDEK, Ciphertext: m.Check}, checkAADv2)
	if err != nil || string(got) != checkText {
		return false, fmt.Errorf("store: bucket %s: its key check does not open with key %s (altered)", SecretsBucket, key.ID())
	}
	return rotate, nil
}

var errRevision = errors.New("the key changed since it was read")

// writeMeta seals the KEK check under kek, at revision rev (0: create).
func (s *KV) writeMeta(ctx context.Context, kek *envelope.KEK, rev uint64) error {
	sealed, err := kek.Seal([]byte(checkText), checkAADv2)
	if err != nil {
		return err
	}
	b, err := json.Marshal(meta{KEKID: kek.ID(), WrappedDEK: sealed.WrappedDEK, Check: sealed.Ciphertext})
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, metaKey, b)
	} else {
		_, err = s.kv.Update(ctx, metaKey, b, rev)
	}
	if err != nil {
		return fmt.Errorf("store: bucket %s: key check: %w", SecretsBucket, unavailable(err))
	}
	return nil
}

// read returns name's record and revision: nil and 0 when there is none,
// a *CorruptError when it cannot be served. With check, every version
// must authenticate; else only the JSON and the name are checked.
func (s *KV) read(ctx context.Context, name string, check bool) (*record, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	e, err := s.kv.Get(ctx, name)
	switch {
	case isKeyNotFound(err):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("secret %s: %w", name, unavailable(err))
	}
	r, err := s.decode(name, e.Value(), check)
	return r, e.Revision(), err
}

func (s *KV) decode(name string, b []byte, check bool) (*record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Name != name || len(r.Versions) == 0 {
		return nil, &CorruptError{Name: name, Reason: "the record does not decode"}
	}
	if check {
		s.mu.RLock()
		kek := s.kek
		s.mu.RUnlock()
		if reason := verify(&r, kek, nil); reason != "" {
			return nil, &CorruptError{Name: name, Reason: reason}
		}
	}
	return &r, nil
}

// write stores r at revision rev (0: create) and returns the new revision;
// errRevision when another write came first.
func (s *KV) write(ctx context.Context, r *record, rev uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("encode secret %s: %w", r.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var next uint64
	if rev == 0 {
		next, err = s.kv.Create(ctx, r.Name, b)
	} else {
		next, err = s.kv.Update(ctx, r.Name, b, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("secret %s: %w", r.Name, unavailable(err))
	}
	return next, s.saw(next)
}

// Put implements Backend.
func (s *KV) Put(ctx context.Context, name string, value []byte, expected *int64, by string) (Metadata, error) {
	if !ValidName(name) {
		return Metadata{}, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if len(value) == 0 {
		return Metadata{}, fmt.Errorf("secret %s: %w", name, ErrEmptyValue)
	}
	if len(value) > s.maxValue {
		return Metadata{}, fmt.Errorf("secret %s: %w: %d bytes, the limit is %d (-vault-max-secret-bytes)", name, ErrTooLarge, len(value), s.maxValue)
	}
	for {
		// Checked whole: a damaged version is not carried into the next
		// record, as the file store refuses a write over a damaged line.
		r, rev, err := s.read(ctx, name, true)
		var corrupt *CorruptError
		switch {
		case errors.As(err, &corrupt):
			return Metadata{}, &CorruptError{Name: name, Reason: "cannot be decoded; delete it before writing a new value"}
		case err != nil:
			return Metadata{}, err
		}
		current := int64(0)
		if r != nil {
			current = r.Versions[0].Version
		}
		if expected != nil && *expected != current {
			return Metadata{}, &ConflictError{Name: name, Expected: *expected, Current: current}
		}
		now := s.now().UnixNano()
		next := &record{Name: name, Latest: 1, CreatedNS: now}
		if r != nil {
			next.Latest, next.CreatedNS, next.Versions = r.Latest+1, r.CreatedNS, r.Versions
		}
		v := version{Version: next.Latest, CreatedNS: now, CreatedBy: by, Size: int64(len(value))}
		s.mu.RLock()
		sealed, err := s.kek.Seal(value, v.aad(name))
		s.mu.RUnlock()
		if err != nil {
			return Metadata{}, fmt.Errorf("seal secret %s: %w", name, err)
		}
		v.KEKID, v.WrappedDEK, v.Ciphertext = sealed.KEKID, sealed.WrappedDEK, sealed.Ciphertext
		next.Versions = append([]version{v}, next.Versions...)
		if len(next.Versions) > s.maxVersions {
			next.Versions = next.Versions[:s.maxVersions]
		}
		_, err = s.write(ctx, next, rev)
		if errors.Is(err, errRevision) {
			// Another replica wrote first: read its record and go again
			// (a check-and-set now sees its version and conflicts).
			continue
		}
		if err != nil {
			return Metadata{}, err
		}
		return next.metadata(), nil
	}
}

// Get implements Backend.
func (s *KV) Get(ctx context.Context, name string) (Metadata, error) {
	r, _, err := s.read(ctx, name, true)
	if err != nil {
		return Metadata{}, err
	}
	if r == nil {
		return Metadata{}, fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	return r.metadata(), nil
}

// List implements Backend. It reads the bucket's current values in one
// pass (a watch that ends at the current revision), not key by key.
func (s *KV) List(ctx context.Context, prefix string) (secrets []Metadata, corrupt []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("list secrets: %w", unavailable(err))
	}
	defer w.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("list secrets: %w", unavailable(ctx.Err()))
		}
		if e == nil {
			break // the initial values are all delivered
		}
		name := e.Key()
		if name == metaKey || !strings.HasPrefix(name, prefix) {
			continue
		}
		if !ValidName(name) {
			corrupt = append(corrupt, name)
			continue
		}
		r, err := s.decode(name, e.Value(), true)
		if err != nil {
			corrupt = append(corrupt, name)
			continue
		}
		secrets = append(secrets, r.metadata())
	}
	slices.SortFunc(secrets, func(a, b Metadata) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(corrupt)
	return secrets, corrupt, nil
}

// Delete implements Backend.
func (s *KV) Delete(ctx context.Context, name string, ver, expected *int64) (int, error) {
	for {
		r, rev, err := s.read(ctx, name, true)
		var corrupt *CorruptError
		switch {
		case errors.As(err, &corrupt):
			// A corrupt record can always be removed whole: that is how it is fixed.
			if ver != nil || expected != nil {
				return 0, &CorruptError{Name: name, Reason: "cannot be decoded; delete it without a version"}
			}
			if err := s.purge(ctx, name, rev); errors.Is(err, errRevision) {
				continue
			} else if err != nil {
				return 0, err
			}
			return 1, nil
		case err != nil:
			return 0, err
		case r == nil:
			return 0, fmt.Errorf("secret %s: %w", name, ErrNotFound)
		}
		if expected != nil && *expected != r.Versions[0].Version {
			return 0, &ConflictError{Name: name, Expected: *expected, Current: r.Versions[0].Version}
		}
		next := &record{Name: name, Latest: r.Latest, CreatedNS: r.CreatedNS}
		for _, v := range r.Versions {
			if ver != nil && v.Version != *ver {
				next.Versions = append(next.Versions, v)
			}
		}
		destroyed := len(r.Versions) - len(next.Versions)
		if destroyed == 0 {
			return 0, fmt.Errorf("secret %s version %d: %w", name, *ver, ErrNotFound)
		}
		if len(next.Versions) == 0 {
			err = s.purge(ctx, name, rev)
		} else {
			_, err = s.write(ctx, next, rev)
		}
		if errors.Is(err, errRevision) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return destroyed, nil
	}
}

// purge removes name's record at revision rev, history and all, so no
// destroyed version stays readable in the bucket.
func (s *KV) purge(ctx context.Context, name string, rev uint64) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := s.kv.Purge(ctx, name, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("secret %s: %w", name, unavailable(err))
	}
	return nil
}

// Value implements Backend.
func (s *KV) Value(ctx context.Context, name string) ([]byte, int64, error) {
	r, _, err := s.read(ctx, name, false)
	if err != nil {
		return nil, 0, err
	}
	if r == nil {
		return nil, 0, fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	v := &r.Versions[0]
	s.mu.RLock()
	value, err := s.kek.Open(v.sealed(), v.aad(name))
	s.mu.RUnlock()
	if err != nil {
		return nil, 0, &CorruptError{Name: name, Reason: fmt.Sprintf("version %d does not authenticate", v.Version)}
	}
	return value, v.Version, nil
}

// Rotate re-wraps every data key under next, record by record with
// compare-and-set, then makes next the bucket's KEK. A replica still on
// the old key reads the re-wrapped versions only once it is restarted with
// both keys, as with the file store.
func (s *KV) Rotate(ctx context.Context, next *envelope.KEK) error {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("rotate: %w", unavailable(err))
	}
	var names []string
	for k := range keys.Keys() {
		if k != metaKey {
			names = append(names, k)
		}
	}
	s.mu.RLock()
	old := s.kek
	s.mu.RUnlock()
	for _, name := range names {
		for {
			r, rev, err := s.read(ctx, name, false)
			if r == nil {
				if err != nil && !isCorrupt(err) {
					return err
				}
				break // gone, or damaged: left as it is
			}
			for i := range r.Versions {
				v := &r.Versions[i]
				if sealed, err := envelope.Rewrap(old, next, v.sealed(), v.aad(name)); err == nil {
					v.KEKID, v.WrappedDEK = sealed.KEKID, sealed.WrappedDEK
				}
			}
			if _, err := s.write(ctx, r, rev); errors.Is(err, errRevision) {
				continue
			} else if err != nil {
				return err
			}
			break
		}
	}
	e, err := s.kv.Get(ctx, metaKey)
	if err != nil {
		return fmt.Errorf("rotate: %w", unavailable(err))
	}
	if err := s.writeMeta(ctx, next, e.Revision()); err != nil {
		return err
	}
	s.mu.Lock()
	s.kek = next
	s.mu.Unlock()
	return nil
}

// KEKID implements Backend.
func (s *KV) KEKID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.kek.ID()
}

func isCorrupt(err error) bool {
	var c *CorruptError
	return errors.As(err, &c)
}

func isKeyNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// unavailable classifies a client error: a lost compare-and-set is
// errRevision, a server or connection failure ErrUnavailable.
func unavailable(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return fmt.Errorf("%w: %w", errRevision, err)
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return fmt.Errorf("%w: %w", errRevision, err)
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
