package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// TodoChange is one change of a todo list; exactly one field is set.
type TodoChange struct {
	Created *agentv1.TodoCreated
	Updated *agentv1.TodoUpdated
	Deleted *agentv1.TodoDeleted
}

// TodoStore is one todo list: an update_plan plan (one per session) or the
// Task* list (one per root session, shared with its subagents). It is safe
// for concurrent use.
type TodoStore struct {
	listID   string
	kind     agentv1.TodoListKind
	onChange func(sessionID string, c TodoChange)

	mu          sync.Mutex
	items       []*agentv1.TodoItem
	explanation string
	nextTask    int
}

// NewTodoStore returns an empty list. onChange, when set, is called for
// every change with the id of the session whose tool call made it. It is
// called with the store locked, so changes arrive in the order they were
// made; it must not call back into the store.
func NewTodoStore(listID string, kind agentv1.TodoListKind, onChange func(sessionID string, c TodoChange)) *TodoStore {
	return &TodoStore{listID: listID, kind: kind, onChange: onChange, nextTask: 1}
}

// List returns a copy of the current projection.
func (t *TodoStore) List() *agentv1.TodoList {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := &agentv1.TodoList{ListId: t.listID, Kind: t.kind, Explanation: t.explanation}
	for _, it := range t.items {
		l.Items = append(l.Items, proto.CloneOf(it))
	}
	return l
}

func (t *TodoStore) emit(session string, c TodoChange) {
	if t.onChange != nil {
		t.onChange(session, c)
	}
}

func (t *TodoStore) index(id string) int {
	return slices.IndexFunc(t.items, func(it *agentv1.TodoItem) bool { return it.GetItemId() == id })
}

// planItemID is the first 8 hex digits of sha256(list_id NUL text).
func planItemID(listID, text string) string {
	sum := sha256.Sum256([]byte(listID + "\x00" + text))
	return hex.EncodeToString(sum[:4])
}

// PlanStep is one step of update_plan.
type PlanStep struct {
	Step   string `json:"step"`
	Status string `json:"status"`
}

var todoStatuses = map[string]agentv1.TodoStatus{
	"pending":     agentv1.TodoStatus_TODO_STATUS_PENDING,
	"in_progress": agentv1.TodoStatus_TODO_STATUS_IN_PROGRESS,
	"completed":   agentv1.TodoStatus_TODO_STATUS_COMPLETED,
}

func statusName(s agentv1.TodoStatus) string {
	for name, v := range todoStatuses {
		if v == s {
			return name
		}
	}
	return "pending"
}

// ReplacePlan replaces the list with plan, reconciling by step text:
// dropped steps are deleted, new ones created, the others updated when
// their status or position changed.
func (t *TodoStore) ReplacePlan(session string, plan []PlanStep, explanation string) error {
	seen := map[string]bool{}
	for _, st := range plan {
		if strings.TrimSpace(st.Step) == "" {
			return invalidArgs("plan step text must not be empty")
		}
		if seen[st.Step] {
			return invalidArgs("plan step %q appears twice; step text must be unique within the plan", st.Step)
		}
		seen[st.Step] = true
		if _, ok := todoStatuses[st.Status]; !ok {
			return invalidArgs("plan step %q has status %q; use pending, in_progress or completed", st.Step, st.Status)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := map[string]int{}
	for i, it := range t.items {
		old[it.GetSubject()] = i
	}
	for _, it := range t.items {
		if !seen[it.GetSubject()] {
			t.emit(session, TodoChange{Deleted: &agentv1.TodoDeleted{ListId: t.listID, ListKind: t.kind, ItemId: it.GetItemId()}})
		}
	}
	items := make([]*agentv1.TodoItem, 0, len(plan))
	for pos, st := range plan {
		status := todoStatuses[st.Status]
		i, existed := old[st.Step]
		if !existed {
			it := &agentv1.TodoItem{ItemId: planItemID(t.listID, st.Step), Subject: st.Step, Status: status}
			items = append(items, it)
			t.emit(session, TodoChange{Created: &agentv1.TodoCreated{ListId: t.listID, ListKind: t.kind, Item: proto.CloneOf(it), Position: int32(pos)}})
			continue
		}
		it := proto.CloneOf(t.items[i])
		prev := it.GetStatus()
		it.Status = status
		items = append(items, it)
		if prev != status || i != pos {
			u := &agentv1.TodoUpdated{ListId: t.listID, ListKind: t.kind, Item: proto.CloneOf(it), Position: int32(pos)}
			if prev != status {
				u.PreviousStatus = prev
			}
			t.emit(session, TodoChange{Updated: u})
		}
	}
	t.items = items
	t.explanation = explanation
	return nil
}

// TaskFields are the fields TaskCreate and TaskUpdate set; nil means
// unchanged.
type TaskFields struct {
	Subject      *string
	Description  *string
	ActiveForm   *string
	Status       *string // pending, in_progress, completed, deleted
	Owner        *string
	AddBlocks    []string
	AddBlockedBy []string
	// Metadata is merged into the task's; a null value removes its key.
	Metadata map[string]json.RawMessage
}

// CreateTask adds a task and returns it.
func (t *TodoStore) CreateTask(session string, f TaskFields) *agentv1.TodoItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := &agentv1.TodoItem{ItemId: strconv.Itoa(t.nextTask), Status: agentv1.TodoStatus_TODO_STATUS_PENDING}
	t.nextTask++
	applyTask(it, f)
	t.items = append(t.items, it)
	t.emit(session, TodoChange{Created: &agentv1.TodoCreated{ListId: t.listID, ListKind: t.kind, Item: proto.CloneOf(it), Position: int32(len(t.items) - 1)}})
	return proto.CloneOf(it)
}

// UpdateTask changes a task; status "deleted" removes it. It returns the
// task as it is now (as it was, when deleted) and which fields changed.
func (t *TodoStore) UpdateTask(session, id string, f TaskFields) (*agentv1.TodoItem, []string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.index(id)
	if i < 0 {
		return nil, nil, failed("Task #%s not found. Use TaskList to see the tasks.", id)
	}
	if f.Status != nil && *f.Status == "deleted" {
		it := t.items[i]
		t.items = slices.Delete(t.items, i, i+1)
		for _, other := range t.items {
			other.Blocks = slices.DeleteFunc(other.Blocks, func(s string) bool { return s == id })
			other.BlockedBy = slices.DeleteFunc(other.BlockedBy, func(s string) bool { return s == id })
		}
		t.emit(session, TodoChange{Deleted: &agentv1.TodoDeleted{ListId: t.listID, ListKind: t.kind, ItemId: id}})
		return proto.CloneOf(it), []string{"deleted"}, nil
	}
	for _, dep := range slices.Concat(f.AddBlocks, f.AddBlockedBy) {
		if dep == id {
			return nil, nil, invalidArgs("task #%s cannot block itself", id)
		}
		if t.index(dep) < 0 {
			return nil, nil, failed("Task #%s not found (named in addBlocks or addBlockedBy)", dep)
		}
	}
	it := proto.CloneOf(t.items[i])
	prev := it.GetStatus()
	before := proto.CloneOf(it)
	changed := applyTask(it, f)
	if proto.Equal(before, it) {
		return proto.CloneOf(it), nil, nil
	}
	t.items[i] = it
	// Keep both ends of a dependency in step.
	for _, b := range f.AddBlocks {
		o := t.items[t.index(b)]
		if !slices.Contains(o.BlockedBy, id) {
			o.BlockedBy = append(o.BlockedBy, id)
		}
	}
	for _, b := range f.AddBlockedBy {
		o := t.items[t.index(b)]
		if !slices.Contains(o.Blocks, id) {
			o.Blocks = append(o.Blocks, id)
		}
	}
	u := &agentv1.TodoUpdated{ListId: t.listID, ListKind: t.kind, Item: proto.CloneOf(it), Position: int32(i)}
	if prev != it.GetStatus() {
		u.PreviousStatus = prev
	}
	t.emit(session, TodoChange{Updated: u})
	return proto.CloneOf(it), changed, nil
}

// Task returns one task, or nil.
func (t *TodoStore) Task(id string) *agentv1.TodoItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := t.index(id); i >= 0 {
		return proto.CloneOf(t.items[i])
	}
	return nil
}

// applyTask sets f's fields on it and names those it changed.
func applyTask(it *agentv1.TodoItem, f TaskFields) []string {
	var changed []string
	set := func(name string, dst *string, v *string) {
		if v != nil && *dst != *v {
			*dst = *v
			changed = append(changed, name)
		}
	}
	set("subject", &it.Subject, f.Subject)
	set("description", &it.Description, f.Description)
	set("activeForm", &it.ActiveForm, f.ActiveForm)
	set("owner", &it.Owner, f.Owner)
	if f.Status != nil {
		if st := todoStatuses[*f.Status]; st != it.GetStatus() {
			it.Status = st
			changed = append(changed, "status")
		}
	}
	for _, b := range f.AddBlocks {
		if !slices.Contains(it.Blocks, b) {
			it.Blocks = append(it.Blocks, b)
			changed = append(changed, "blocks")
		}
	}
	for _, b := range f.AddBlockedBy {
		if !slices.Contains(it.BlockedBy, b) {
			it.BlockedBy = append(it.BlockedBy, b)
			changed = append(changed, "blockedBy")
		}
	}
	if len(f.Metadata) > 0 {
		md := map[string]json.RawMessage{}
		if it.GetMetadata() != "" {
			_ = json.Unmarshal([]byte(it.GetMetadata()), &md)
		}
		for k, v := range f.Metadata {
			if string(v) == "null" {
				delete(md, k)
			} else {
				md[k] = v
			}
		}
		text := ""
		if len(md) > 0 {
			b, _ := json.Marshal(md) // sorted keys
			text = string(b)
		}
		if text != it.GetMetadata() {
			it.Metadata = text
			changed = append(changed, "metadata")
		}
	}
	return slices.Compact(changed)
}

// ---------------------------------------------------------------------------
// update_plan

func updatePlanTool() *tool {
	return &tool{
		name: "update_plan",
		description: "Keep a step-by-step plan for the task. Send the whole plan each time: it replaces the previous one. " +
			"Step text must be unique; each step is pending, in_progress or completed (at most one in_progress at a time).",
		category: catTodo,
		schema: object([]string{"plan"}, map[string]*schema{
			"explanation": str("Short note explaining why the plan changed"),
			"plan": array("Full ordered list of plan steps", object([]string{"step", "status"}, map[string]*schema{
				"step":   str("Step text; unique within the plan"),
				"status": enum("Step status", "pending", "in_progress", "completed"),
			})),
		}),
		run: func(_ context.Context, s *Set, _ Call, raw []byte) (output, error) {
			a, err := decode[struct {
				Explanation string     `json:"explanation"`
				Plan        []PlanStep `json:"plan"`
			}](raw)
			if err != nil {
				return output{}, err
			}
			if err := s.env.Todos.ReplacePlan(s.env.SessionID, a.Plan, a.Explanation); err != nil {
				return output{}, err
			}
			return ok("Plan updated")
		},
	}
}

// ---------------------------------------------------------------------------
// Task*

type taskArgs struct {
	TaskID       string                     `json:"taskId"`
	Subject      *string                    `json:"subject"`
	Description  *string                    `json:"description"`
	ActiveForm   *string                    `json:"activeForm"`
	Status       *string                    `json:"status"`
	Owner        *string                    `json:"owner"`
	AddBlocks    []string                   `json:"addBlocks"`
	AddBlockedBy []string                   `json:"addBlockedBy"`
	Metadata     map[string]json.RawMessage `json:"metadata"`
}

func (a taskArgs) fields() TaskFields {
	return TaskFields{Subject: a.Subject, Description: a.Description, ActiveForm: a.ActiveForm, Status: a.Status,
		Owner: a.Owner, AddBlocks: a.AddBlocks, AddBlockedBy: a.AddBlockedBy, Metadata: a.Metadata}
}

func taskCreateTool() *tool {
	return &tool{
		name:        "TaskCreate",
		description: "Create a task in the shared task list (shared with subagents). Use it to track multi-step work; mark tasks in_progress and completed with TaskUpdate as you go.",
		category:    catTodo,
		schema: object([]string{"subject", "description"}, map[string]*schema{
			"subject":     str("A brief title, in the imperative (\"Fix the login bug\")"),
			"description": str("What needs to be done"),
			"activeForm":  str("Present-continuous form shown while in progress (\"Fixing the login bug\")"),
			"metadata":    {Type: "object", Description: "Free-form metadata"},
		}),
		run: func(_ context.Context, s *Set, _ Call, raw []byte) (output, error) {
			a, err := decode[taskArgs](raw)
			if err != nil {
				return output{}, err
			}
			if strings.TrimSpace(*a.Subject) == "" {
				return output{}, invalidArgs("subject must not be empty")
			}
			it := s.env.Todos.CreateTask(s.env.SessionID, a.fields())
			return ok(fmt.Sprintf("Task #%s created successfully: %s", it.GetItemId(), it.GetSubject()))
		},
	}
}

func taskUpdateTool() *tool {
	return &tool{
		name:        "TaskUpdate",
		description: "Change a task of the shared task list by taskId. Setting status to deleted removes it.",
		category:    catTodo,
		schema: object([]string{"taskId"}, map[string]*schema{
			"taskId":       str("The task's id"),
			"subject":      str("New subject"),
			"description":  str("New description"),
			"activeForm":   str("New present-continuous form"),
			"status":       enum("New status", "pending", "in_progress", "completed", "deleted"),
			"owner":        str("New owner"),
			"addBlocks":    array("Task ids this task blocks", str("")),
			"addBlockedBy": array("Task ids that block this task", str("")),
			"metadata":     {Type: "object", Description: "Metadata keys to merge; a null value removes the key"},
		}),
		run: func(_ context.Context, s *Set, _ Call, raw []byte) (output, error) {
			a, err := decode[taskArgs](raw)
			if err != nil {
				return output{}, err
			}
			id := strings.TrimPrefix(a.TaskID, "#")
			it, changed, err := s.env.Todos.UpdateTask(s.env.SessionID, id, a.fields())
			if err != nil {
				return output{}, err
			}
			switch {
			case slices.Contains(changed, "deleted"):
				return ok(fmt.Sprintf("Task #%s deleted", id))
			case len(changed) == 0:
				return ok(fmt.Sprintf("Task #%s unchanged", id))
			}
			return ok(fmt.Sprintf("Updated task #%s %s", it.GetItemId(), strings.Join(changed, ", ")))
		},
	}
}

func taskGetTool() *tool {
	return &tool{
		name:        "TaskGet",
		description: "Show one task of the shared task list in full.",
		category:    catTodo,
		schema:      object([]string{"taskId"}, map[string]*schema{"taskId": str("The task's id")}),
		run: func(_ context.Context, s *Set, _ Call, raw []byte) (output, error) {
			a, err := decode[taskArgs](raw)
			if err != nil {
				return output{}, err
			}
			id := strings.TrimPrefix(a.TaskID, "#")
			it := s.env.Todos.Task(id)
			if it == nil {
				return output{}, failed("Task #%s not found. Use TaskList to see the tasks.", id)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "Task #%s: %s\nStatus: %s\n", it.GetItemId(), it.GetSubject(), statusName(it.GetStatus()))
			if it.GetDescription() != "" {
				fmt.Fprintf(&b, "Description: %s\n", it.GetDescription())
			}
			if it.GetActiveForm() != "" {
				fmt.Fprintf(&b, "Active form: %s\n", it.GetActiveForm())
			}
			if it.GetOwner() != "" {
				fmt.Fprintf(&b, "Owner: %s\n", it.GetOwner())
			}
			if len(it.GetBlocks()) > 0 {
				fmt.Fprintf(&b, "Blocks: %s\n", hashList(it.GetBlocks()))
			}
			if len(it.GetBlockedBy()) > 0 {
				fmt.Fprintf(&b, "Blocked by: %s\n", hashList(it.GetBlockedBy()))
			}
			if it.GetMetadata() != "" {
				fmt.Fprintf(&b, "Metadata: %s\n", it.GetMetadata())
			}
			return ok(b.String())
		},
	}
}

func taskListTool() *tool {
	return &tool{
		name:        "TaskList",
		description: "List the shared task list: `#id [status] subject (owner) (blocked by ...)`.",
		category:    catTodo,
		schema:      object(nil, map[string]*schema{}),
		run: func(_ context.Context, s *Set, _ Call, _ []byte) (output, error) {
			l := s.env.Todos.List()
			if len(l.GetItems()) == 0 {
				return ok("No tasks found.")
			}
			var b strings.Builder
			for _, it := range l.GetItems() {
				fmt.Fprintf(&b, "#%s [%s] %s", it.GetItemId(), statusName(it.GetStatus()), it.GetSubject())
				if it.GetOwner() != "" {
					fmt.Fprintf(&b, " (%s)", it.GetOwner())
				}
				if len(it.GetBlockedBy()) > 0 {
					fmt.Fprintf(&b, " (blocked by %s)", hashList(it.GetBlockedBy()))
				}
				b.WriteByte('\n')
			}
			return ok(b.String())
		},
	}
}

func hashList(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "#" + id
	}
	return strings.Join(out, ", ")
}

// Restore loads a recorded list into an empty store (a resumed session);
// it reports false, changing nothing, when the store already has items or
// the list is another one.
func (t *TodoStore) Restore(l *agentv1.TodoList) bool {
	if l == nil || l.GetListId() != t.listID || l.GetKind() != t.kind {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.items) > 0 {
		return false
	}
	t.explanation = l.GetExplanation()
	for _, it := range l.GetItems() {
		t.items = append(t.items, proto.CloneOf(it))
		if n, err := strconv.Atoi(it.GetItemId()); err == nil && n >= t.nextTask {
			t.nextTask = n + 1
		}
	}
	return true
}
