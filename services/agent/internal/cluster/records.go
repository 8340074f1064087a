package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// A stored value starts with one tag byte: the record itself follows, or
// the name of the object-store object holding it (a record bigger than
// one NATS message: a long history).
const (
	tagInline = 'i'
	tagObject = 'o'
)

// Records is the records.Store of a JetStream key-value bucket, keyed by
// session id. Every write names the revision it replaces, so two replicas
// never overwrite each other's record unseen.
type Records struct {
	kv       jetstream.KeyValue
	large    jetstream.ObjectStore
	maxValue int
}

var _ records.Store = (*Records)(nil)

// Get implements records.Store.
func (r *Records) Get(ctx context.Context, id string) (*agentv1.SessionRecord, records.Revision, error) {
	for attempt := 0; ; attempt++ {
		e, err := r.kv.Get(ctx, id)
		if err != nil {
			if errors.Is(err, jetstream.ErrInvalidKey) {
				return nil, 0, fmt.Errorf("cluster: record %q: %w", id, records.ErrNotFound)
			}
			return nil, 0, fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
		}
		b, err := r.value(ctx, e.Value())
		if errors.Is(err, jetstream.ErrObjectNotFound) && attempt < 3 {
			continue // replaced (and its object deleted) since we read the key
		}
		if err != nil {
			return nil, 0, fmt.Errorf("cluster: record %s: %w", id, err)
		}
		rec, err := records.Decode(b)
		if err != nil {
			return nil, 0, fmt.Errorf("cluster: record %s: %w", id, err)
		}
		return rec, records.Revision(e.Revision()), nil
	}
}

func (r *Records) value(ctx context.Context, v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty value", records.ErrCorrupt)
	}
	switch v[0] {
	case tagInline:
		return v[1:], nil
	case tagObject:
		return r.large.GetBytes(ctx, string(v[1:]))
	}
	return nil, fmt.Errorf("%w: unknown value tag %q", records.ErrCorrupt, v[0])
}

// Put implements records.Store. A record bigger than one message is
// written to the object store first, under a fresh name, and the key
// then points at it.
func (r *Records) Put(ctx context.Context, rec *agentv1.SessionRecord, expected records.Revision) (records.Revision, error) {
	id := rec.GetSession().GetSessionId()
	b, err := records.Encode(rec)
	if err != nil {
		return 0, fmt.Errorf("cluster: record %s: %w", id, err)
	}
	var old jetstream.KeyValueEntry
	switch expected {
	case 0:
	case records.Any:
		if e, err := r.kv.Get(ctx, id); err == nil {
			old = e
		} else if !errors.Is(kvErr(err), records.ErrNotFound) {
			return 0, fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
		}
	default:
		if e, err := r.kv.GetRevision(ctx, id, uint64(expected)); err == nil {
			old = e
		}
	}
	value := append([]byte{tagInline}, b...)
	var newObject string
	if len(value) > r.maxValue {
		newObject = id + "." + nuid.Next()
		if _, err := r.large.Put(ctx, jetstream.ObjectMeta{Name: newObject}, bytes.NewReader(b)); err != nil {
			return 0, fmt.Errorf("cluster: record %s: %w", id, err)
		}
		value = append([]byte{tagObject}, newObject...)
	}
	var next uint64
	switch {
	case expected == 0 || expected == records.Any && old == nil:
		next, err = r.kv.Create(ctx, id, value)
	case expected == records.Any:
		next, err = r.kv.Put(ctx, id, value)
	default:
		next, err = r.kv.Update(ctx, id, value, uint64(expected))
	}
	if err != nil {
		if newObject != "" {
			_ = r.large.Delete(context.WithoutCancel(ctx), newObject)
		}
		return 0, fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
	}
	if old != nil && len(old.Value()) > 0 && old.Value()[0] == tagObject {
		_ = r.large.Delete(ctx, string(old.Value()[1:]))
	}
	return records.Revision(next), nil
}

// Delete implements records.Store.
func (r *Records) Delete(ctx context.Context, id string) error {
	e, err := r.kv.Get(ctx, id)
	if errors.Is(kvErr(err), records.ErrNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
	}
	if err := r.kv.Purge(ctx, id); err != nil {
		return fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
	}
	if v := e.Value(); len(v) > 0 && v[0] == tagObject {
		_ = r.large.Delete(ctx, string(v[1:]))
	}
	return nil
}

// List implements records.Store. It reads the bucket's keys (not the
// records), which JetStream keeps in its subject index.
func (r *Records) List(ctx context.Context, before string, limit int) ([]string, error) {
	keys, err := r.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: records: %w", err)
	}
	var ids []string
	for k := range keys.Keys() {
		if before == "" || k < before {
			ids = append(ids, k)
		}
	}
	_ = keys.Stop()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: records: %w", err)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids[:min(limit, len(ids))], nil
}
