package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// A stored value starts with one tag byte: the record itself follows, or
// the name of the object-store object holding it (a record bigger than
// one NATS message: a long history).
const (
	tagInline = 'i'
	tagObject = 'o'
)

// Records keeps SessionRecords by session id. Every write names the
// revision it replaces, so two replicas never overwrite each other's
// record unseen.
type Records struct {
	kv       jetstream.KeyValue
	large    jetstream.ObjectStore
	maxValue int
}

// Get returns the session's record and its revision; ErrNotFound when
// there is none.
func (r *Records) Get(ctx context.Context, id string) (*agentv1.SessionRecord, uint64, error) {
	for attempt := 0; ; attempt++ {
		e, err := r.kv.Get(ctx, id)
		if err != nil {
			return nil, 0, fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
		}
		b, err := r.value(ctx, e.Value())
		if errors.Is(err, jetstream.ErrObjectNotFound) && attempt < 3 {
			continue // replaced (and its object deleted) since we read the key
		}
		if err != nil {
			return nil, 0, fmt.Errorf("cluster: record %s: %w", id, err)
		}
		rec := &agentv1.SessionRecord{}
		if err := proto.Unmarshal(b, rec); err != nil {
			return nil, 0, fmt.Errorf("cluster: record %s: %w", id, err)
		}
		return rec, e.Revision(), nil
	}
}

func (r *Records) value(ctx context.Context, v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, errors.New("empty value")
	}
	switch v[0] {
	case tagInline:
		return v[1:], nil
	case tagObject:
		return r.large.GetBytes(ctx, string(v[1:]))
	}
	return nil, fmt.Errorf("unknown value tag %q", v[0])
}

// Put stores rec under its session id, replacing revision rev (0: the
// session has no record yet). It returns the new revision, or
// ErrConflict when the stored revision is another.
func (r *Records) Put(ctx context.Context, rec *agentv1.SessionRecord, rev uint64) (uint64, error) {
	id := rec.GetSession().GetSessionId()
	b, err := proto.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("cluster: record %s: %w", id, err)
	}
	var oldObject string
	if rev > 0 {
		if e, err := r.kv.GetRevision(ctx, id, rev); err == nil && len(e.Value()) > 0 && e.Value()[0] == tagObject {
			oldObject = string(e.Value()[1:])
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
	if rev == 0 {
		next, err = r.kv.Create(ctx, id, value)
	} else {
		next, err = r.kv.Update(ctx, id, value, rev)
	}
	if err != nil {
		if newObject != "" {
			_ = r.large.Delete(context.WithoutCancel(ctx), newObject)
		}
		return 0, fmt.Errorf("cluster: record %s: %w", id, kvErr(err))
	}
	if oldObject != "" {
		_ = r.large.Delete(ctx, oldObject)
	}
	return next, nil
}

// Delete removes the session's record (any revision).
func (r *Records) Delete(ctx context.Context, id string) error {
	e, err := r.kv.Get(ctx, id)
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

// IDs lists the ids of every session with a record.
func (r *Records) IDs(ctx context.Context) ([]string, error) {
	keys, err := r.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: records: %w", err)
	}
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, k)
	}
	_ = keys.Stop()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: records: %w", err)
	}
	return ids, nil
}
