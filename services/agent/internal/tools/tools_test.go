package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

func TestDefinitionsPerProfileAndLevel(t *testing.T) {
	env := Env{}
	tests := []struct {
		profile string
		level   PermissionLevel
		want    []string
	}{
		{"anthropic", Full, []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch", "edit_file", "TaskCreate", "TaskUpdate", "TaskGet", "TaskList"}},
		{"claude-5", Full, []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch", "edit_file", "TaskCreate", "TaskUpdate", "TaskGet", "TaskList"}},
		{"openai", Full, []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch", "apply_patch", "update_plan"}},
		{"gpt6", Full, []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch", "apply_patch", "update_plan"}},
		{"kimi", Full, []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch", "apply_patch", "update_plan"}},
		{"gemini", Full, []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch", "edit_file", "read_many_files", "list_dir"}},
		{"gemini", ReadOnly, []string{"read_file", "grep", "glob", "read_many_files", "list_dir"}},
		{"anthropic", ReadWrite, []string{"read_file", "write_file", "grep", "glob", "edit_file", "TaskCreate", "TaskUpdate", "TaskGet", "TaskList"}},
		{"openai", ReadWrite, []string{"read_file", "write_file", "grep", "glob", "apply_patch", "update_plan"}},
		{"openai", 0, []string{"read_file", "write_file", "grep", "glob", "apply_patch", "update_plan"}}, // unset = read-write
		{"openai", ReadOnly, []string{"read_file", "grep", "glob"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.profile, tt.level), func(t *testing.T) {
			s := NewSet(tt.profile, tt.level, env, nil)
			var got []string
			for _, d := range s.Definitions() {
				got = append(got, d.GetName())
				var sc map[string]any
				if err := json.Unmarshal([]byte(d.GetParameters()), &sc); err != nil || sc["type"] != "object" {
					t.Errorf("%s: parameters are not an object schema: %s", d.GetName(), d.GetParameters())
				}
				if d.GetDescription() == "" {
					t.Errorf("%s: no description", d.GetName())
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSerial(t *testing.T) {
	s := NewSet("openai", Full, Env{}, nil)
	for name, want := range map[string]bool{"shell": true, "read_file": false, "apply_patch": false, "nope": false} {
		if got := s.Serial(name); got != want {
			t.Errorf("Serial(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestTimeoutDefaults(t *testing.T) {
	for profile, want := range map[string]time.Duration{"anthropic": 120 * time.Second, "claude-5": 120 * time.Second, "openai": 10 * time.Second, "gemini": 10 * time.Second, "kimi": 60 * time.Second} {
		if got := DefaultCommandTimeout(profile); got != want {
			t.Errorf("DefaultCommandTimeout(%s) = %v, want %v", profile, got, want)
		}
	}
	s := NewSet("anthropic", Full, Env{DefaultCommandTimeout: time.Hour}, nil)
	if s.defaultTimeout != MaxCommandTimeout {
		t.Errorf("default timeout %v not capped at %v", s.defaultTimeout, MaxCommandTimeout)
	}
}

func TestOutputBytesAccounting(t *testing.T) {
	s := NewSet("openai", Full, Env{}, nil)
	small := s.finish("read_file", output{text: "hello\n"})
	if small.ObservedBytes != 6 || small.RetainedBytes != 6 || small.OmittedBytes != 0 {
		t.Errorf("small: observed %d, retained %d, omitted %d", small.ObservedBytes, small.RetainedBytes, small.OmittedBytes)
	}
	// Past the retention cap: the event keeps 1 MiB, but counts all 3.
	big := s.finish("update_plan", output{text: strings.Repeat("x", 3<<20)})
	if big.ObservedBytes != 3<<20 || big.RetainedBytes != retentionBytes || big.OmittedBytes != 2<<20 {
		t.Errorf("big: observed %d, retained %d, omitted %d", big.ObservedBytes, big.RetainedBytes, big.OmittedBytes)
	}
	// Cut upstream (the sandbox's capture) and again by retention; the
	// upstream marker is in the retained tail but is not output.
	both := s.finish("x", output{text: strings.Repeat("y", 2<<20) + "[marker]", cut: 500, markers: int64(len("[marker]"))})
	if both.ObservedBytes != 2<<20+500 || both.RetainedBytes != retentionBytes-int64(len("[marker]")) || both.OmittedBytes != both.ObservedBytes-both.RetainedBytes {
		t.Errorf("both: observed %d, retained %d, omitted %d", both.ObservedBytes, both.RetainedBytes, both.OmittedBytes)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"anthropic": ProfileAnthropic, "Claude-5": ProfileAnthropic, "gemini": ProfileGemini, "openai": ProfileOpenAI, "gpt56": ProfileOpenAI, "gpt6": ProfileOpenAI, "kimi": ProfileOpenAI, "": ProfileOpenAI} {
		if got := Profile(in); got != want {
			t.Errorf("Profile(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[agentv1.PermissionLevel]PermissionLevel{
		agentv1.PermissionLevel_PERMISSION_LEVEL_UNSPECIFIED: ReadWrite, agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY: ReadOnly,
		agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE: ReadWrite, agentv1.PermissionLevel_PERMISSION_LEVEL_FULL: Full,
	} {
		if got := LevelFromProto(in); got != want {
			t.Errorf("LevelFromProto(%v) = %v, want %v", in, got, want)
		}
	}
	for kind, want := range map[string]agentv1.ToolErrorKind{
		"": agentv1.ToolErrorKind_TOOL_ERROR_KIND_UNSPECIFIED, KindUnknownTool: agentv1.ToolErrorKind_TOOL_ERROR_KIND_UNKNOWN_TOOL,
		KindInvalidArguments: agentv1.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS, KindDenied: agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED,
		KindFailed: agentv1.ToolErrorKind_TOOL_ERROR_KIND_FAILED, KindCancelled: agentv1.ToolErrorKind_TOOL_ERROR_KIND_CANCELLED,
		KindTimeout: agentv1.ToolErrorKind_TOOL_ERROR_KIND_TIMED_OUT, KindSandboxUnavailable: agentv1.ToolErrorKind_TOOL_ERROR_KIND_SANDBOX_UNAVAILABLE,
	} {
		if got := (Result{ErrorKind: kind}).ErrorKindProto(); got != want {
			t.Errorf("%q -> %v, want %v", kind, got, want)
		}
	}
}

// TestTodoToolsAtReadWrite: update_plan and the Task tools change no
// files, so read-write offers and runs them.
func TestTodoToolsAtReadWrite(t *testing.T) {
	for _, tc := range []struct {
		profile string
		call    Call
	}{
		{"openai", Call{Name: "update_plan", Arguments: `{"plan":[{"step":"a","status":"pending"}]}`}},
		{"anthropic", Call{Name: "TaskCreate", Arguments: `{"subject":"a","description":"b"}`}},
		{"anthropic", Call{Name: "TaskList", Arguments: `{}`}},
	} {
		s := NewSet(tc.profile, ReadWrite, Env{}, nil)
		if !slices.Contains(s.Names(), tc.call.Name) {
			t.Errorf("%s: not offered at read-write: %v", tc.call.Name, s.Names())
		}
		if r := s.Run(t.Context(), tc.call); r.IsError {
			t.Errorf("%s at read-write: %s", tc.call.Name, r.Output)
		}
	}
}

// TestExtraToolFullSchema: a caller's schema is validated with every
// keyword ($ref, oneOf, allOf, const, ...) and offered to the model as it
// was given.
func TestExtraToolFullSchema(t *testing.T) {
	params := `{"type":"object","$defs":{"n":{"type":"integer","minimum":1}},
	  "properties":{"count":{"$ref":"#/$defs/n"},"mode":{"oneOf":[{"const":"fast"},{"const":"slow"}]},
	    "tag":{"allOf":[{"type":"string"},{"maxLength":3}]}},
	  "required":["count"],"additionalProperties":false}`
	var ran []string
	s := NewSet("openai", Full, Env{Extra: []Extra{{Name: "job", Description: "runs a job", Parameters: params,
		Run: func(_ context.Context, _ string, args []byte) (string, bool) {
			ran = append(ran, string(args))
			return "ok", false
		}}}}, nil)
	for _, d := range s.Definitions() {
		if d.GetName() == "job" && d.GetParameters() != params {
			t.Errorf("definition parameters %s, want the caller's schema as given", d.GetParameters())
		}
	}
	tests := []struct {
		args, kind, want string
	}{
		{`{"count":2,"mode":"fast","tag":"a"}`, "", "ok"},
		{`{"count":0}`, KindInvalidArguments, "arguments.count: must be at least 1, got 0"},
		{`{"count":1,"mode":"medium"}`, KindInvalidArguments, "arguments.mode: matches none of oneOf"},
		{`{"count":1,"tag":"long"}`, KindInvalidArguments, "arguments.tag: must be at most 3 characters long, got 4"},
		{`{"count":1,"x":1}`, KindInvalidArguments, `arguments: unknown property "x" (allowed: count, mode, tag)`},
	}
	for _, tt := range tests {
		check(t, s.Run(t.Context(), Call{ID: "c", Name: "job", Arguments: tt.args}), tt.kind, tt.want)
	}
	if len(ran) != 1 {
		t.Errorf("the tool ran %d times, want once (for the valid call)", len(ran))
	}
}
