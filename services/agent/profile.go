package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// profileNames maps the profile names the gateway's catalog gives a model
// (Model.agent_profile) to the agent's profiles. The catalog only carries
// the name: the profiles are the agent's.
var profileNames = map[string]agentv1.AgentProfile{
	"anthropic": agentv1.AgentProfile_AGENT_PROFILE_ANTHROPIC,
	"claude-5":  agentv1.AgentProfile_AGENT_PROFILE_CLAUDE_5,
	"openai":    agentv1.AgentProfile_AGENT_PROFILE_OPENAI,
	"gemini":    agentv1.AgentProfile_AGENT_PROFILE_GEMINI,
	"kimi":      agentv1.AgentProfile_AGENT_PROFILE_KIMI,
	"gpt-5.6":   agentv1.AgentProfile_AGENT_PROFILE_GPT56,
	"gpt-6":     agentv1.AgentProfile_AGENT_PROFILE_GPT6,
}

// profileByName is the profile a catalog name stands for: UNSPECIFIED for
// no name (the codec then picks one), an error naming the known names for a
// name this agent does not know, rather than a silent default.
func profileByName(name string) (agentv1.AgentProfile, error) {
	if name == "" {
		return agentv1.AgentProfile_AGENT_PROFILE_UNSPECIFIED, nil
	}
	if p, ok := profileNames[name]; ok {
		return p, nil
	}
	known := slices.Sorted(maps.Keys(profileNames))
	return agentv1.AgentProfile_AGENT_PROFILE_UNSPECIFIED,
		fmt.Errorf("the catalog names agent profile %q, which this agent does not know (known: %s)", name, strings.Join(known, ", "))
}
