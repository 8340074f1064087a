package tools_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	. "github.com/fabro-sh/fabro-go/services/agent/tooltest"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestShellLiveOutputCapped checks that a shell call hands at most
// MaxLiveOutput bytes (plus one marker) to ShellOutput, while its result
// still ends with the command's last line.
func TestShellLiveOutputCapped(t *testing.T) {
	b := newBox(t)
	var mu sync.Mutex
	live, chunks := 0, 0
	var last string
	s := b.set("openai", Full, func(e *Env) {
		e.ShellOutput = func(_ string, _ sandboxv1.OutputStream, data []byte) {
			mu.Lock()
			defer mu.Unlock()
			live += len(data)
			chunks++
			last = string(data)
		}
	})
	r := run(t, s, "shell", map[string]any{"command": "head -c 3000000 /dev/zero | tr '\\0' a; echo; echo END"})
	check(t, r, "", "END")
	mu.Lock()
	defer mu.Unlock()
	if want := MaxLiveOutput + len(LiveOutputCapped); live != want {
		t.Errorf("live output %d bytes in %d chunks, want %d", live, chunks, want)
	}
	if last != LiveOutputCapped {
		t.Errorf("last live chunk %q, want the cap marker", last)
	}
}

// TestExtraTools checks that a caller's tool is offered after the
// profile's, validated against its schema, gated by its category, and cut
// to its limit.
func TestExtraTools(t *testing.T) {
	b := newBox(t)
	var got []string
	extra := []Extra{{
		Name: "spawn_agent", Description: "spawn", Category: CategorySubagent,
		Parameters: `{"type":"object","properties":{"task":{"type":"string"}},"required":["task"],"additionalProperties":false}`,
		Run: func(_ context.Context, id string, args []byte) (string, bool) {
			got = append(got, id+" "+string(args))
			return strings.Repeat("x", 30_000), false
		},
	}, {
		Name: "use_skill", Description: "skill", Category: CategoryShell, Parameters: `{"type":"object"}`,
		Run: func(context.Context, string, []byte) (string, bool) { return "no", true },
	}}
	ro := b.set("anthropic", ReadOnly, func(e *Env) { e.Extra = extra })
	if names := ro.Names(); !strings.HasSuffix(strings.Join(names, ","), "glob,spawn_agent") {
		t.Errorf("read-only tools %v, want the subagent tool last and use_skill hidden", names)
	}
	check(t, ro.Run(t.Context(), Call{ID: "c0", Name: "spawn_agent", Arguments: `{}`}), KindInvalidArguments, "task")
	check(t, ro.Run(t.Context(), Call{ID: "c1", Name: "use_skill", Arguments: `{}`}), KindDenied)
	r := ro.Run(t.Context(), Call{ID: "c2", Name: "spawn_agent", Arguments: `{"task":"t"}`})
	check(t, r, "")
	if r.CharsOmitted != 10_000 || len(r.Full) != 30_000 {
		t.Errorf("spawn_agent output: %d omitted of %d, want 10000 of 30000", r.CharsOmitted, len(r.Full))
	}
	full := b.set("anthropic", Full, func(e *Env) { e.Extra = extra })
	check(t, full.Run(t.Context(), Call{ID: "c3", Name: "use_skill", Arguments: `{}`}), KindFailed, "no")
	if len(got) != 1 || got[0] != `c2 {"task":"t"}` {
		t.Errorf("runs %q", got)
	}
}
