package tools

import (
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

type recorder struct {
	mu      sync.Mutex
	changes []TodoChange
	origins []string
}

func (r *recorder) record(session string, c TodoChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
	r.origins = append(r.origins, session)
}

func (r *recorder) take() []TodoChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.changes
	r.changes = nil
	return c
}

const (
	pending    = agentv1.TodoStatus_TODO_STATUS_PENDING
	inProgress = agentv1.TodoStatus_TODO_STATUS_IN_PROGRESS
	completed  = agentv1.TodoStatus_TODO_STATUS_COMPLETED
	planKind   = agentv1.TodoListKind_TODO_LIST_KIND_OPENAI_PLAN
	tasksKind  = agentv1.TodoListKind_TODO_LIST_KIND_ANTHROPIC_TASKS
)

func TestUpdatePlan(t *testing.T) {
	rec := &recorder{}
	store := NewTodoStore("sess-1", planKind, rec.record)
	s := NewSet("openai", Full, Env{SessionID: "sess-1", Todos: store}, nil)
	idA, idB, idC := planItemID("sess-1", "A"), planItemID("sess-1", "B"), planItemID("sess-1", "C")
	if len(idA) != 8 {
		t.Fatalf("id %q", idA)
	}

	plan := func(explanation string, steps ...[2]string) Result {
		var items []map[string]any
		for _, st := range steps {
			items = append(items, map[string]any{"step": st[0], "status": st[1]})
		}
		return run(t, s, "update_plan", map[string]any{"plan": items, "explanation": explanation})
	}
	check(t, plan("start", [2]string{"A", "in_progress"}, [2]string{"B", "pending"}), "", "Plan updated")
	want := []TodoChange{
		{Created: &agentv1.TodoCreated{ListId: "sess-1", ListKind: planKind, Item: &agentv1.TodoItem{ItemId: idA, Subject: "A", Status: inProgress}, Position: 0}},
		{Created: &agentv1.TodoCreated{ListId: "sess-1", ListKind: planKind, Item: &agentv1.TodoItem{ItemId: idB, Subject: "B", Status: pending}, Position: 1}},
	}
	if diff := cmp.Diff(want, rec.take(), protocmp.Transform()); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}

	// A done, B dropped, C added, A stays first.
	check(t, plan("replan", [2]string{"A", "completed"}, [2]string{"C", "in_progress"}), "")
	want = []TodoChange{
		{Deleted: &agentv1.TodoDeleted{ListId: "sess-1", ListKind: planKind, ItemId: idB}},
		{Updated: &agentv1.TodoUpdated{ListId: "sess-1", ListKind: planKind, Item: &agentv1.TodoItem{ItemId: idA, Subject: "A", Status: completed}, Position: 0, PreviousStatus: inProgress}},
		{Created: &agentv1.TodoCreated{ListId: "sess-1", ListKind: planKind, Item: &agentv1.TodoItem{ItemId: idC, Subject: "C", Status: inProgress}, Position: 1}},
	}
	if diff := cmp.Diff(want, rec.take(), protocmp.Transform()); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	// The same plan again changes nothing.
	check(t, plan("same", [2]string{"A", "completed"}, [2]string{"C", "in_progress"}), "")
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("no-op plan emitted %v", got)
	}
	// Reordering is an update without a status change.
	check(t, plan("swap", [2]string{"C", "in_progress"}, [2]string{"A", "completed"}), "")
	if got := rec.take(); len(got) != 2 || got[0].Updated.GetPreviousStatus() != 0 || got[0].Updated.GetPosition() != 0 {
		t.Fatalf("reorder changes %v", got)
	}
	list := store.List()
	if list.GetExplanation() != "swap" || len(list.GetItems()) != 2 || list.GetItems()[0].GetSubject() != "C" {
		t.Errorf("list %v", list)
	}

	check(t, plan("dup", [2]string{"X", "pending"}, [2]string{"X", "completed"}), KindInvalidArguments, `"X" appears twice`)
	check(t, plan("blank", [2]string{" ", "pending"}), KindInvalidArguments, "must not be empty")
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("rejected plan emitted %v", got)
	}
	if got := store.List(); len(got.GetItems()) != 2 {
		t.Errorf("rejected plan changed the list: %v", got)
	}
}

func TestTasksSharedAcrossSessions(t *testing.T) {
	rec := &recorder{}
	store := NewTodoStore("root", tasksKind, rec.record)
	root := NewSet("anthropic", Full, Env{SessionID: "root", Todos: store}, nil)
	child := NewSet("claude-5", Full, Env{SessionID: "child", Todos: store}, nil)

	check(t, run(t, root, "TaskList", nil), "", "No tasks found.")
	check(t, run(t, root, "TaskCreate", map[string]any{"subject": "Write tests", "description": "table-driven", "activeForm": "Writing tests"}), "", "Task #1 created successfully: Write tests")
	check(t, run(t, child, "TaskCreate", map[string]any{"subject": "Fix bug", "description": "the race", "metadata": map[string]any{"prio": 1, "area": "core"}}), "", "Task #2 created successfully: Fix bug")
	check(t, run(t, child, "TaskUpdate", map[string]any{"taskId": "1", "status": "in_progress", "owner": "child", "addBlocks": []string{"2"}}), "", "Updated task #1", "status", "owner", "blocks")
	check(t, run(t, root, "TaskUpdate", map[string]any{"taskId": "2", "metadata": map[string]any{"prio": nil}}), "", "metadata")
	check(t, run(t, root, "TaskUpdate", map[string]any{"taskId": "2", "subject": "Fix bug"}), "", "unchanged")

	check(t, run(t, root, "TaskList", nil), "", "#1 [in_progress] Write tests (child)\n#2 [pending] Fix bug (blocked by #1)\n")
	check(t, run(t, root, "TaskGet", map[string]any{"taskId": "#2"}), "", "Task #2: Fix bug\nStatus: pending\nDescription: the race\nBlocked by: #1\nMetadata: {\"area\":\"core\"}\n")

	check(t, run(t, root, "TaskGet", map[string]any{"taskId": "9"}), KindFailed, "Task #9 not found")
	check(t, run(t, root, "TaskUpdate", map[string]any{"taskId": "9", "status": "completed"}), KindFailed, "Task #9 not found")
	check(t, run(t, root, "TaskUpdate", map[string]any{"taskId": "1", "addBlockedBy": []string{"7"}}), KindFailed, "Task #7 not found")
	check(t, run(t, root, "TaskUpdate", map[string]any{"taskId": "1", "status": "bogus"}), KindInvalidArguments, "is not one of")
	check(t, run(t, root, "TaskCreate", map[string]any{"subject": "x"}), KindInvalidArguments, `missing required property "description"`)

	check(t, run(t, child, "TaskUpdate", map[string]any{"taskId": "1", "status": "deleted"}), "", "Task #1 deleted")
	check(t, run(t, root, "TaskList", nil), "", "#2 [pending] Fix bug\n")

	changes := rec.take()
	var kinds []string
	for _, c := range changes {
		switch {
		case c.Created != nil:
			kinds = append(kinds, "created "+c.Created.GetItem().GetItemId())
		case c.Updated != nil:
			kinds = append(kinds, "updated "+c.Updated.GetItem().GetItemId())
		case c.Deleted != nil:
			kinds = append(kinds, "deleted "+c.Deleted.GetItemId())
		}
	}
	wantKinds := []string{"created 1", "created 2", "updated 1", "updated 2", "deleted 1"}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"root", "child", "child", "root", "child"}, rec.origins); diff != "" {
		t.Errorf("origins (-want +got):\n%s", diff)
	}
	if u := changes[2].Updated; u.GetPreviousStatus() != pending || u.GetItem().GetStatus() != inProgress || u.GetListId() != "root" || u.GetListKind() != tasksKind {
		t.Errorf("update event %v", u)
	}
}

func TestTaskStoreConcurrent(t *testing.T) {
	store := NewTodoStore("root", tasksKind, nil)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { store.CreateTask("s", TaskFields{Subject: new("t")}) })
	}
	wg.Wait()
	ids := map[string]bool{}
	for _, it := range store.List().GetItems() {
		ids[it.GetItemId()] = true
	}
	if len(ids) != 20 {
		t.Errorf("ids %v", ids)
	}
	if !strings.Contains(store.List().String(), "t") {
		t.Error("subjects lost")
	}
}
