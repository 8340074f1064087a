package crash_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// Invariants a crash must never break, by name.
const (
	invSequence    = "sequence"     // every session's events are exactly 1..N
	invMessageIDs  = "message-ids"  // every stored message id is unique, and they are exactly the events'
	invPrompts     = "prompts"      // each prompt: one prompt_started, one prompt_completed
	invToolCalls   = "tool-calls"   // no tool_call_started without its tool_call_completed
	invWorkspace   = "workspace"    // the files are those of a run without the kill
	invNoSurvivors = "no-survivors" // no command of the killed incarnation lives on
	// The prompts and tool-calls invariants of a subagent's session.
	invSubPrompts   = "subagent-prompts"
	invSubToolCalls = "subagent-tool-calls"
)

// TestCrash kills `fabro serve` at seeded random moments of a prompt and
// checks the invariants after each restart.
func TestCrash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FABRO_CRASH_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FABRO_CRASH_SEED=%q: %v", v, err)
		}
	}
	rounds := 30
	if testing.Short() {
		rounds = 3
	}
	if v := os.Getenv("FABRO_CRASH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FABRO_CRASH_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	t.Logf("crash harness: seed %d (replay: FABRO_CRASH_SEED=%d), %d kill points", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	fake, err := fakeprovider.Listen("127.0.0.1:0", fakeprovider.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	fake.Script(script)

	// The run without a kill: what the workspace must hold, and how long
	// the prompt takes, over which the kill points spread.
	base := runRound(t, fake.URL, -1, killServe)
	if v := base.check(nil); len(v) > 0 {
		t.Fatalf("the run without a kill breaks the invariants: %v", v)
	}
	want := workspaceOf(base.ws)
	t.Logf("the run without a kill: %s, workspace %v", base.took.Round(time.Millisecond), slices.Sorted(maps.Keys(want)))

	// Stratified: kill point i of a target falls in the i-th of its rounds'
	// equal slices of the prompt, at a random place in it, so every phase is
	// hit. An external NATS gets a fifth as many rounds as fabro serve.
	failed := map[string]int{}
	for _, tg := range []struct {
		name   string
		what   target
		rounds int
	}{{"kill", killServe, rounds}, {"nats-kill", killNATS, max(1, rounds/5)}, {"compacting-kill", killCompacting, max(1, rounds/5)}} {
		for i := range tg.rounds {
			slice := base.took / time.Duration(tg.rounds)
			at := time.Duration(i)*slice + time.Duration(rng.Int64N(int64(slice)+1))
			ok := t.Run(fmt.Sprintf("%s-%02d-at-%s", tg.name, i, at.Round(time.Millisecond)), func(t *testing.T) {
				r := runRound(t, fake.URL, at, tg.what)
				violations := r.check(want)
				if n := r.count(func(ev *agentv1.AgentEvent) bool { return ev.GetCompactionCompleted() != nil }); tg.what == killCompacting && n == 0 {
					t.Errorf("no compaction completed: the round did not go through the phase it is for")
				}
				for _, v := range violations {
					failed[v.invariant]++
					t.Errorf("%s (killed after event %s): %s", v.invariant, r.killedAt, v.detail)
				}
			})
			if !ok {
				t.Logf("replay with FABRO_CRASH_SEED=%d", seed)
			}
		}
	}
	if len(failed) > 0 {
		t.Logf("invariants broken, by rounds: %v (seed %d)", failed, seed)
	}
}

// count is the number of events of every session that match.
func (r *round) count(match func(*agentv1.AgentEvent) bool) int {
	n := 0
	for _, evs := range r.sessions {
		for _, ev := range evs {
			if match(ev) {
				n++
			}
		}
	}
	return n
}

type violation struct{ invariant, detail string }

// check tests the invariants of a round; want (nil: none) is the
// workspace of the run without a kill.
func (r *round) check(want map[string]string) []violation {
	var out []violation
	add := func(inv, format string, a ...any) { out = append(out, violation{inv, fmt.Sprintf(format, a...)}) }
	for id, evs := range r.sessions {
		prompts, toolCalls := invPrompts, invToolCalls
		if id != r.root {
			prompts, toolCalls = invSubPrompts, invSubToolCalls
		}
		for i, ev := range evs {
			if ev.GetSequence() != uint64(i+1) {
				add(invSequence, "session %s: event %d (%s) has sequence %d", id, i+1, eventType(ev), ev.GetSequence())
				break
			}
		}
		seen := map[string]int{}
		for _, m := range r.ids[id] {
			seen[m]++
		}
		for m, n := range seen {
			if n > 1 {
				add(invMessageIDs, "session %s: message id %s stored %d times", id, m, n)
			}
		}
		var wantIDs []string
		for _, ev := range evs {
			wantIDs = append(wantIDs, fmt.Sprintf("%s:%d#", id, ev.GetSequence()))
		}
		var got []string
		for _, m := range slices.Sorted(maps.Keys(seen)) {
			if m[len(m)-1] == '#' { // unchunked events (chunked ones carry an index)
				got = append(got, m)
			}
		}
		slices.Sort(wantIDs)
		if len(got) < len(wantIDs) || !isSubset(wantIDs, got) {
			add(invMessageIDs, "session %s: the stream's messages are not the replayed events", id)
		}
		started, completed, calls := map[string]int{}, map[string]int{}, map[string]int{}
		for _, ev := range evs {
			switch {
			case ev.GetPromptStarted() != nil:
				started[ev.GetPromptId()]++
			case ev.GetPromptCompleted() != nil:
				completed[ev.GetPromptId()]++
			case ev.GetToolCallStarted() != nil:
				calls[ev.GetToolCallStarted().GetToolCallId()]++
			case ev.GetToolCallCompleted() != nil:
				calls[ev.GetToolCallCompleted().GetToolCallId()]--
			}
		}
		for p := range maps.Keys(started) {
			if started[p] != 1 || completed[p] != 1 {
				add(prompts, "session %s: prompt %s has %d prompt_started and %d prompt_completed", id, p, started[p], completed[p])
			}
		}
		for p := range maps.Keys(completed) {
			if started[p] == 0 {
				add(prompts, "session %s: prompt %s completed without a prompt_started", id, p)
			}
		}
		for c, n := range calls {
			if n != 0 {
				add(toolCalls, "session %s: tool call %s: %d more starts than completions", id, c, n)
			}
		}
	}
	if want != nil {
		// An atomic write killed between its create and its rename leaves
		// a temporary file, which the restarted sandbox removes: counted.
		got := workspaceOf(r.ws)
		if d := cmp.Diff(want, got); d != "" {
			add(invWorkspace, "the workspace differs from the run without a kill (-want +got):\n%s", d)
		}
	}
	if len(r.orphans) > 0 {
		add(invNoSurvivors, "%d process(es) of the killed incarnation live on: %v", len(r.orphans), r.orphans)
	}
	return out
}

func isSubset(want, got []string) bool {
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			return false
		}
	}
	return true
}

// workspaceOf is workspace without a testing.T (check runs after the round).
func workspaceOf(dir string) map[string]string {
	out := map[string]string{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			out[e.Name()] = string(b)
		}
	}
	return out
}
