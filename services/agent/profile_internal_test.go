package agent

import (
	"strings"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// TestProfileByName maps every catalog profile name, and refuses an
// unknown one with an error that names it and the known names.
func TestProfileByName(t *testing.T) {
	for _, tt := range []struct {
		name string
		want agentv1.AgentProfile
	}{
		{"", agentv1.AgentProfile_AGENT_PROFILE_UNSPECIFIED},
		{"anthropic", agentv1.AgentProfile_AGENT_PROFILE_ANTHROPIC},
		{"claude-5", agentv1.AgentProfile_AGENT_PROFILE_CLAUDE_5},
		{"openai", agentv1.AgentProfile_AGENT_PROFILE_OPENAI},
		{"gemini", agentv1.AgentProfile_AGENT_PROFILE_GEMINI},
		{"kimi", agentv1.AgentProfile_AGENT_PROFILE_KIMI},
		{"gpt-5.6", agentv1.AgentProfile_AGENT_PROFILE_GPT56},
		{"gpt-6", agentv1.AgentProfile_AGENT_PROFILE_GPT6},
	} {
		got, err := profileByName(tt.name)
		if err != nil || got != tt.want {
			t.Errorf("profileByName(%q) = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	// Every profile but UNSPECIFIED has a catalog name.
	if n := len(agentv1.AgentProfile_name) - 1; len(profileNames) != n {
		t.Errorf("%d profile names for %d profiles", len(profileNames), n)
	}
	_, err := profileByName("AGENT_PROFILE_OPENAI")
	if err == nil || !strings.Contains(err.Error(), `"AGENT_PROFILE_OPENAI"`) || !strings.Contains(err.Error(), "claude-5") {
		t.Errorf("unknown name: %v; want an error naming it and the known names", err)
	}
}
