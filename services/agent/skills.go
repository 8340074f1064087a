package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"unicode"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// maxSkillBytes bounds one SKILL.md.
const maxSkillBytes = 64 << 10

// skill is a discovered SKILL.md: its listing and its body template.
type skill struct {
	info *agentv1.Skill
	body string
}

// discoverSkills scans each directory for <name>/SKILL.md, in order; a
// later skill of the same name replaces an earlier one, which is listed as
// skipped. Paths are as the sandbox resolves them (relative to its working
// directory unless absolute).
func (s *Service) discoverSkills(ctx context.Context, sandboxID string, dirs []string) ([]skill, []*agentv1.SkippedSkill) {
	var found []skill
	var skipped []*agentv1.SkippedSkill
	byName := map[string]int{}
	for _, dir := range dirs {
		resp, err := tools.ListDirectory(ctx, s.sandbox, &sandboxv1.ListDirectoryRequest{SandboxId: sandboxID, Path: dir, Depth: 1})
		if err != nil {
			skipped = append(skipped, &agentv1.SkippedSkill{Path: dir, Reason: "unreadable_dir", Message: "cannot list the skill directory: " + err.Error()})
			continue
		}
		for _, e := range resp.GetEntries() {
			if e.GetType() != sandboxv1.FileType_FILE_TYPE_DIRECTORY {
				continue
			}
			p := path.Join(dir, path.Base(e.GetPath()), "SKILL.md")
			data, size, err := s.readSandboxFile(ctx, sandboxID, p, maxSkillBytes+1)
			switch {
			case errors.Is(err, os.ErrNotExist):
				continue
			case err != nil:
				skipped = append(skipped, &agentv1.SkippedSkill{Path: p, Reason: "unreadable", Message: err.Error()})
				continue
			case size > maxSkillBytes:
				skipped = append(skipped, &agentv1.SkippedSkill{Path: p, Reason: "too_large", Message: fmt.Sprintf("%d bytes; a skill may have %d", size, maxSkillBytes)})
				continue
			}
			sk, reason, msg := parseSkill(p, string(data))
			if reason != "" {
				skipped = append(skipped, &agentv1.SkippedSkill{Path: p, Reason: reason, Message: msg})
				continue
			}
			if i, dup := byName[sk.info.GetName()]; dup {
				old := found[i].info
				skipped = append(skipped, &agentv1.SkippedSkill{Path: old.GetPath(), Reason: "duplicate",
					Message: fmt.Sprintf("skill %q is overridden by %s", old.GetName(), p)})
				found[i] = sk
				continue
			}
			byName[sk.info.GetName()] = len(found)
			found = append(found, sk)
		}
	}
	return found, skipped
}

// parseSkill reads the front matter (between "---" lines, line-scanned
// name: and description:) and the body. A failure returns its reason.
func parseSkill(p, text string) (skill, string, string) {
	text = strings.TrimPrefix(text, "\ufeff")
	lines := strings.SplitAfter(text, "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "---" {
		return skill{}, "missing_front_matter", "SKILL.md must open with a --- front matter block"
	}
	var name, desc string
	end := -1
	for i := 1; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "---" {
			end = i
			break
		}
		if v, ok := strings.CutPrefix(line, "name:"); ok {
			name = unquote(strings.TrimSpace(v))
		} else if v, ok := strings.CutPrefix(line, "description:"); ok {
			desc = unquote(strings.TrimSpace(v))
		}
	}
	switch {
	case end < 0:
		return skill{}, "unterminated_front_matter", "the front matter has no closing --- line"
	case name == "":
		return skill{}, "missing_name", "the front matter has no name"
	case strings.ContainsAny(name, " \t/"):
		return skill{}, "invalid_name", fmt.Sprintf("skill name %q must not contain spaces or slashes", name)
	case desc == "":
		return skill{}, "missing_description", "the front matter has no description"
	}
	body := strings.TrimLeft(strings.Join(lines[end+1:], ""), "\n")
	return skill{info: &agentv1.Skill{Name: name, Description: desc, Path: p}, body: body}, "", ""
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

// render fills the body template with the user's input: {{user_input}}
// is replaced; without the placeholder, input is appended as an
// ARGUMENTS block.
func (sk skill) render(input string) string {
	input = strings.TrimSpace(input)
	if strings.Contains(sk.body, "{{user_input}}") {
		return strings.ReplaceAll(sk.body, "{{user_input}}", input)
	}
	if input == "" {
		return sk.body
	}
	return strings.TrimRight(sk.body, "\n") + "\n\nARGUMENTS: " + input
}

func (sess *session) skill(name string) (skill, bool) {
	for _, sk := range sess.skills {
		if sk.info.GetName() == name {
			return sk, true
		}
	}
	return skill{}, false
}

// expandSkill is the loop's Expand: "/name rest" of a known skill.
func (sess *session) expandSkill(text string) (string, string) {
	t := strings.TrimLeft(text, " \t")
	if !strings.HasPrefix(t, "/") {
		return text, ""
	}
	name, rest := t[1:], ""
	if i := strings.IndexFunc(name, unicode.IsSpace); i >= 0 {
		name, rest = name[:i], name[i:]
	}
	sk, ok := sess.skill(name)
	if !ok {
		return text, ""
	}
	return sk.render(rest), name
}

func (sess *session) skillInfos() []*agentv1.Skill {
	out := make([]*agentv1.Skill, len(sess.skills))
	for i, sk := range sess.skills {
		out[i] = sk.info
	}
	return out
}

// skillsSection is the system prompt's "# Available Skills".
func skillsSection(skills []skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n# Available Skills\n\nInvoke a skill with the use_skill tool when it fits the task (the user may also type /name).\n\n")
	for _, sk := range skills {
		fmt.Fprintf(&b, "- %s: %s\n", sk.info.GetName(), sk.info.GetDescription())
	}
	return b.String()
}

// skillTools is use_skill, offered when the session has skills.
func (s *Service) skillTools(sess *session) []tools.Extra {
	if len(sess.skills) == 0 {
		return nil
	}
	return []tools.Extra{{
		Name:        "use_skill",
		Description: "Load the instructions of one of the available skills (listed in the system prompt) and follow them.",
		Parameters:  `{"type":"object","properties":{"skill_name":{"type":"string","description":"Name of the skill"}},"required":["skill_name"],"additionalProperties":false}`,
		Category:    tools.CategoryShell,
		Run: func(_ context.Context, _ string, raw []byte) (string, bool) {
			var a struct {
				SkillName string `json:"skill_name"`
			}
			_ = json.Unmarshal(raw, &a)
			sk, ok := sess.skill(a.SkillName)
			if !ok {
				names := make([]string, len(sess.skills))
				for i, x := range sess.skills {
					names[i] = x.info.GetName()
				}
				return fmt.Sprintf("Unknown skill %q. Available skills: %s.", a.SkillName, strings.Join(names, ", ")), true
			}
			sess.emit(&agentv1.AgentEvent{PromptId: sess.currentPrompt(), Event: &agentv1.AgentEvent_SkillActivated{SkillActivated: &agentv1.SkillActivated{
				SkillName: sk.info.GetName(), Source: agentv1.SkillSource_SKILL_SOURCE_TOOL}}})
			return sk.render(""), false
		},
	}}
}
