package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestSandboxConformance runs `fabro sandbox conformance` against the
// example plugin (built GOWORK=off, as its author would) and against a
// binary that is not a plugin.
func TestSandboxConformance(t *testing.T) {
	t.Parallel()
	example := plugintest.Build(t, "../../examples/sandbox-plugin")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"the example plugin conforms", []string{example}, 0, []string{"0 failed", "PASS Capabilities", "PASS Exec", "PASS Files", "PASS Search"}},
		{"one part", []string{"-run", "Search", example}, 0, []string{"PASS Search", "0 failed"}},
		{"not a plugin", []string{"/usr/bin/true"}, 1, []string{"FAIL Capabilities", "failed (run with -v", "the plugin is not available"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := exec.CommandContext(t.Context(), fabroBin, append([]string{"sandbox", "conformance"}, tt.args...)...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit %d; want %d\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
