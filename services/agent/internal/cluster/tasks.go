package cluster

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// TaskLists keeps the shared task list of each session tree, by the
// tree's root session id, with compare-and-set on the revision: the
// replicas serving sessions of one tree never overwrite each other's
// changes unseen.
type TaskLists struct{ kv jetstream.KeyValue }

// Get returns the tree's task list and its revision; ErrNotFound when it
// has none.
func (t *TaskLists) Get(ctx context.Context, rootID string) (*agentv1.TodoList, uint64, error) {
	e, err := t.kv.Get(ctx, rootID)
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: task list %s: %w", rootID, kvErr(err))
	}
	l := &agentv1.TodoList{}
	if err := proto.Unmarshal(e.Value(), l); err != nil {
		return nil, 0, fmt.Errorf("cluster: task list %s: %w", rootID, err)
	}
	return l, e.Revision(), nil
}

// Put stores the tree's list replacing revision rev (0: none yet); it
// returns the new revision or ErrConflict.
func (t *TaskLists) Put(ctx context.Context, rootID string, l *agentv1.TodoList, rev uint64) (uint64, error) {
	b, err := proto.Marshal(l)
	if err != nil {
		return 0, fmt.Errorf("cluster: task list %s: %w", rootID, err)
	}
	var next uint64
	if rev == 0 {
		next, err = t.kv.Create(ctx, rootID, b)
	} else {
		next, err = t.kv.Update(ctx, rootID, b, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: task list %s: %w", rootID, kvErr(err))
	}
	return next, nil
}

// Update applies change to the stored list (an empty one when none) and
// stores the result, reading again and reapplying on a conflict.
func (t *TaskLists) Update(ctx context.Context, rootID string, change func(*agentv1.TodoList) error) (*agentv1.TodoList, error) {
	for {
		l, rev, err := t.Get(ctx, rootID)
		if err != nil && !isNotFound(err) {
			return nil, err
		}
		if l == nil {
			l = &agentv1.TodoList{}
		}
		if err := change(l); err != nil {
			return nil, err
		}
		if _, err := t.Put(ctx, rootID, l, rev); err == nil {
			return l, nil
		} else if !isConflict(err) {
			return nil, err
		}
	}
}

// Delete removes the tree's list.
func (t *TaskLists) Delete(ctx context.Context, rootID string) error {
	if err := t.kv.Purge(ctx, rootID); err != nil {
		return fmt.Errorf("cluster: task list %s: %w", rootID, kvErr(err))
	}
	return nil
}
