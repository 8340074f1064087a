package bus

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestREADMEListsEveryEventType checks the table of event types in
// docs/AGENT.md against the contract's AgentEvent oneof: a new event type
// fails here until the docs document it, and a removed one until it is
// dropped.
func TestREADMEListsEveryEventType(t *testing.T) {
	data, err := os.ReadFile("../../../../docs/AGENT.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "| event type | message | meaning |")
	if !ok {
		t.Fatal("docs/AGENT.md has no event type table (| event type | message | meaning |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	row := regexp.MustCompile("(?m)^\\| `([a-z_0-9]+)` \\| `([A-Za-z0-9]+)` \\| [^|]*\\S[^|]* \\|$")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{}
	fields := eventOneof.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		want[string(f.Name())] = string(f.Message().Name())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/AGENT.md's event types (-contract +docs; a row is | `event_type` | `Message` | meaning |):\n%s", diff)
	}
}
