// Package settings reads the tool settings of a session (permission rules,
// hooks, the approval timeout) from settings files and CreateSession, and
// merges them into one Policy. A bad file or rule is an *Error naming the
// file, the line and the rule.
package settings

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/mcptools"
	"github.com/fabro-sh/fabro-go/services/agent/internal/permission"
)

// Defaults and caps.
const (
	DefaultApprovalTimeout = 5 * time.Minute
	DefaultHookTimeout     = 60 * time.Second
	MaxHookTimeout         = 10 * time.Minute
	// ProjectFile is the project settings file, relative to the working
	// directory.
	ProjectFile = ".fabro/settings.json"
)

// ProjectFiles are the project settings files read, relative to the
// working directory, in order (a later one's scalars win): fabro's, then
// Claude Code's shared and local files.
var ProjectFiles = []string{ProjectFile, ".claude/settings.json", ".claude/settings.local.json"}

// Error is a bad settings file or rule.
type Error struct {
	File string // the file, or "CreateSession" for the request's settings
	Line int    // 1-based; 0 when unknown (the request's settings)
	Rule string // the rule or hook at fault, when one is
	Msg  string
	// Forbidden: the source may not configure this (a host-side hook or
	// stdio MCP server on CreateSession), rather than it being malformed.
	Forbidden bool
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Rule != "" {
		return fmt.Sprintf("%s: %q: %s", loc, e.Rule, e.Msg)
	}
	return loc + ": " + e.Msg
}

// Hook is one validated hook.
type Hook struct {
	Event   agentv1.HookEvent
	matcher *regexp.Regexp // nil: every tool
	Command string
	Timeout time.Duration
	Place   agentv1.HookPlace
	Source  string
}

// Matches reports whether the hook applies to a tool.
func (h *Hook) Matches(tool string) bool { return h.matcher == nil || h.matcher.MatchString(tool) }

// Policy is the merged settings of a session.
type Policy struct {
	Rules           permission.Set
	Hooks           []*Hook
	ApprovalTimeout time.Duration
	// MCPServers by name, a later layer's replacing an earlier one's, in
	// the order first named.
	MCPServers []MCPServer
	// Ignored are what of the rules cannot be honoured as written (each
	// rule still applies), for settings_ignored events.
	Ignored []*agentv1.SettingsIgnored
}

// MCPServer is a configured MCP server and whether its source is trusted
// with the agent's host network (an untrusted one is dialled through the
// SSRF guard).
type MCPServer struct {
	Spec    *agentv1.McpServer
	Guarded bool
}

// HasHooks reports whether any hook of the event exists.
func (p *Policy) HasHooks(ev agentv1.HookEvent) bool {
	for _, h := range p.Hooks {
		if h.Event == ev {
			return true
		}
	}
	return false
}

// Layer is one source of settings.
type Layer struct {
	// Source names it in errors and deny messages: a file path or
	// "CreateSession".
	Source   string
	Settings *agentv1.ToolSettings
	// Data is the file's text, for line numbers; nil for the request.
	Data []byte
	// Untrusted is a source the agent's host must not trust with its
	// commands: CreateSession's settings, which any API caller gives. It may
	// add rules, sandbox-side hooks and MCP servers over HTTP (to public
	// addresses), never host-side hooks or stdio MCP servers: those come
	// only from the operator's file or an approved project file.
	Untrusted bool
}

// Build merges layers in order (later scalars win; rules and hooks add up)
// and validates every rule and hook.
func Build(layers ...Layer) (*Policy, error) {
	p := &Policy{ApprovalTimeout: DefaultApprovalTimeout}
	for _, l := range layers {
		ts := l.Settings
		if ts == nil {
			continue
		}
		for _, list := range []struct {
			eff   permission.Effect
			field string
			rules []string
		}{{permission.Deny, "deny", ts.GetPermissions().GetDeny()}, {permission.Ask, "ask", ts.GetPermissions().GetAsk()}, {permission.Allow, "allow", ts.GetPermissions().GetAllow()}} {
			for i, text := range list.rules {
				line := lineOf(l.Data, text)
				r, err := permission.Parse(list.eff, text)
				if err != nil {
					return nil, l.fail(line, text, fmt.Sprintf("permissions.%s[%d]: %v", list.field, i, err))
				}
				r.Source = l.Source
				if line > 0 {
					r.Source = fmt.Sprintf("%s:%d", l.Source, line)
				}
				if r.Warning != "" {
					p.Ignored = append(p.Ignored, &agentv1.SettingsIgnored{File: l.Source, Field: fmt.Sprintf("permissions.%s[%d]", list.field, i),
						Reason: fmt.Sprintf("rule %q (%s): %s", text, r.Source, r.Warning)})
				}
				p.Rules.Add(r)
			}
		}
		if m := ts.GetPermissions().GetDefaultMode(); m != "" {
			mode, err := permission.ParseMode(m)
			if err != nil {
				return nil, l.fail(lineOf(l.Data, m), m, "permissions."+err.Error())
			}
			p.Rules.Mode, p.Rules.ModeSource = mode, l.Source
			if line := lineOf(l.Data, m); line > 0 {
				p.Rules.ModeSource = fmt.Sprintf("%s:%d", l.Source, line)
			}
		}
		for i, h := range ts.GetHooks() {
			line := lineOf(l.Data, h.GetCommand())
			hk, err := compileHook(h)
			if err != nil {
				return nil, l.fail(line, h.GetCommand(), fmt.Sprintf("hooks[%d]: %v", i, err))
			}
			if l.Untrusted && hk.Place == agentv1.HookPlace_HOOK_PLACE_HOST {
				e := l.fail(line, h.GetCommand(), fmt.Sprintf("hooks[%d]: a host-side hook may only come from the operator's settings file or an approved project file; give place SANDBOX", i))
				e.Forbidden = true
				return nil, e
			}
			hk.Source = l.Source
			p.Hooks = append(p.Hooks, hk)
		}
		for i, m := range ts.GetMcpServers() {
			if err := mcptools.Validate(m); err != nil {
				return nil, l.fail(lineOf(l.Data, m.GetName()), m.GetName(), fmt.Sprintf("mcp_servers[%d]: %v", i, err))
			}
			// A stdio server in the sandbox runs where the agent's commands
			// do, so any settings may name one.
			if l.Untrusted && m.GetCommand() != "" && m.GetPlace() != agentv1.HookPlace_HOOK_PLACE_SANDBOX {
				e := l.fail(lineOf(l.Data, m.GetName()), m.GetName(), fmt.Sprintf("mcp_servers[%d]: a stdio MCP server runs on the agent's host and may only come from the operator's settings file or an approved project file", i))
				e.Forbidden = true
				return nil, e
			}
			srv := MCPServer{Spec: m, Guarded: l.Untrusted}
			if j := slices.IndexFunc(p.MCPServers, func(o MCPServer) bool { return o.Spec.GetName() == m.GetName() }); j >= 0 {
				p.MCPServers[j] = srv
			} else {
				p.MCPServers = append(p.MCPServers, srv)
			}
		}
		if d := ts.GetApprovalTimeout(); d != nil {
			if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
				return nil, l.fail(lineOf(l.Data, "approval_timeout"), "", "approval_timeout must be a positive duration")
			}
			p.ApprovalTimeout = d.AsDuration()
		}
	}
	return p, nil
}

func (l Layer) fail(line int, rule, msg string) *Error {
	return &Error{File: l.Source, Line: line, Rule: rule, Msg: msg}
}

func compileHook(h *agentv1.Hook) (*Hook, error) {
	out := &Hook{Event: h.GetEvent(), Command: h.GetCommand(), Timeout: DefaultHookTimeout, Place: h.GetPlace()}
	if out.Event == agentv1.HookEvent_HOOK_EVENT_UNSPECIFIED {
		return nil, errors.New("event is required")
	}
	if strings.TrimSpace(out.Command) == "" {
		return nil, errors.New("command is required")
	}
	if out.Place == agentv1.HookPlace_HOOK_PLACE_UNSPECIFIED {
		out.Place = agentv1.HookPlace_HOOK_PLACE_HOST
	}
	if d := h.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return nil, errors.New("timeout must be a positive duration")
		}
		out.Timeout = min(d.AsDuration(), MaxHookTimeout)
	}
	if m := strings.TrimSpace(h.GetMatcher()); m != "" && m != "*" {
		var alts []string
		for _, a := range strings.Split(m, "|") {
			a = strings.TrimSpace(a)
			if a == "" || strings.ContainsAny(a, "()[]{}\\ ") {
				return nil, fmt.Errorf("bad matcher %q: tool-name globs joined by |", m)
			}
			alts = append(alts, strings.ReplaceAll(regexp.QuoteMeta(a), `\*`, ".*"))
		}
		out.matcher = regexp.MustCompile("^(?:" + strings.Join(alts, "|") + ")$")
	}
	return out, nil
}

// lineOf finds the line of a string's first JSON-quoted occurrence.
func lineOf(data []byte, s string) int {
	if data == nil || s == "" {
		return 0
	}
	q, _ := json.Marshal(s)
	i := bytes.Index(data, q)
	if i < 0 {
		i = bytes.Index(data, []byte(s))
	}
	if i < 0 {
		return 0
	}
	return bytes.Count(data[:i], []byte("\n")) + 1
}

// Hash is the SHA-256 of a file's content, in hex, as approvals name it.
func Hash(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// fileHook is a hook as a settings file writes it.
type fileHook struct {
	Matcher string `json:"matcher"`
	Command string `json:"command"`
	Timeout string `json:"timeout"` // a Go duration such as "30s"
	Place   string `json:"place"`   // "host" (default) or "sandbox"
}

type file struct {
	Permissions *filePermissions `json:"permissions"`
	// Hooks by event: fabro's events (pre_tool_use: [{matcher, command,
	// timeout, place}]) or Claude Code's (PreToolUse: [{matcher, hooks:
	// [{type, command, timeout}]}]).
	Hooks           map[string]json.RawMessage `json:"hooks"`
	ApprovalTimeout string                     `json:"approval_timeout"`
	// TrustedProjectSettings are SHA-256s of project files the operator
	// approves; honoured only in the operator's file.
	TrustedProjectSettings []string `json:"trusted_project_settings"`
	// MCPServers is .mcp.json's shape.
	MCPServers map[string]fileMCP `json:"mcpServers"`
}

type filePermissions struct {
	Allow []string `json:"allow"`
	Ask   []string `json:"ask"`
	Deny  []string `json:"deny"`
	// DefaultMode is fabro's default_mode or Claude Code's defaultMode.
	DefaultMode string `json:"default_mode"`
	ClaudeMode  string `json:"defaultMode"`
}

// knownFields are the fields Parse honours, by object; any other is a
// warning naming it (Claude Code's env, model, statusLine ... mean nothing
// to fabro), never a refusal of the file. "$schema" is an editor's hint.
var knownFields = map[string]map[string]bool{
	"":            {"permissions": true, "hooks": true, "approval_timeout": true, "trusted_project_settings": true, "mcpServers": true, "$schema": true},
	"permissions": {"allow": true, "ask": true, "deny": true, "default_mode": true, "defaultMode": true},
}

// claudeHookGroup is one entry of a Claude Code hook event.
type claudeHookGroup struct {
	Matcher string `json:"matcher"`
	Hooks   []struct {
		Type    string   `json:"type"`
		Command string   `json:"command"`
		Timeout *float64 `json:"timeout"` // seconds
	} `json:"hooks"`
}

// claudeHookEvents maps Claude Code's hook events onto fabro's; Stop (the
// agent finished answering) is prompt_end.
var claudeHookEvents = map[string]agentv1.HookEvent{
	"PreToolUse":   agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE,
	"PostToolUse":  agentv1.HookEvent_HOOK_EVENT_POST_TOOL_USE,
	"SessionStart": agentv1.HookEvent_HOOK_EVENT_SESSION_START,
	"Stop":         agentv1.HookEvent_HOOK_EVENT_PROMPT_END,
}

// claudeModes maps Claude Code's defaultMode onto fabro's default_mode;
// a mode fabro has no equivalent of is a warning.
var claudeModes = map[string]string{"default": "default", "dontAsk": "deny_unless_allowed"}

// claudeTools maps Claude Code's tool names in hook matchers onto fabro's.
var claudeTools = map[string]string{
	"Bash": "shell", "Read": "read_file", "Write": "write_file", "Edit": "edit_file", "MultiEdit": "edit_file",
	"Grep": "grep", "Glob": "glob", "LS": "list_dir", "WebFetch": "web_fetch", "WebSearch": "web_search",
}

type fileMCP struct {
	Type           string            `json:"type"` // "stdio" (default with command) or "http" / "streamable-http"
	Command        string            `json:"command"`
	Args           []string          `json:"args"`
	Env            map[string]string `json:"env"`
	URL            string            `json:"url"`
	Place          string            `json:"place"`
	StartupTimeout string            `json:"startup_timeout"`
}

var hookEvents = map[string]agentv1.HookEvent{
	"pre_tool_use":  agentv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE,
	"post_tool_use": agentv1.HookEvent_HOOK_EVENT_POST_TOOL_USE,
	"session_start": agentv1.HookEvent_HOOK_EVENT_SESSION_START,
	"prompt_end":    agentv1.HookEvent_HOOK_EVENT_PROMPT_END,
}

// File is a parsed settings file.
type File struct {
	Settings *agentv1.ToolSettings
	// Trusted are the project-file hashes the file trusts.
	Trusted []string
	// Ignored are the fields fabro does not honour, each a warning naming
	// it; the rest of the file applies.
	Ignored []*agentv1.SettingsIgnored
}

// Parse reads a settings file in fabro's format or Claude Code's (both may
// mix); source names it in errors and warnings.
func Parse(source string, data []byte) (*File, error) {
	var f file
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		line := 0
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			line = bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n")) + 1
		case errors.As(err, &te):
			line = bytes.Count(data[:min(int(te.Offset), len(data))], []byte("\n")) + 1
		}
		return nil, &Error{File: source, Line: line, Msg: "does not parse: " + err.Error()}
	}
	if dec.More() {
		return nil, &Error{File: source, Msg: "does not parse: text after the JSON object"}
	}
	out := &File{Trusted: f.TrustedProjectSettings}
	ignore := func(field, why string) {
		out.Ignored = append(out.Ignored, &agentv1.SettingsIgnored{File: source, Field: field, Reason: why})
	}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(data, &top)
	for _, k := range sortedKeys(top, data) {
		if !knownFields[""][k] {
			ignore(k, fmt.Sprintf("fabro does not know the field %q; it is ignored (line %d)", k, lineOf(data, k)))
		}
	}
	if raw, ok := top["permissions"]; ok {
		var perms map[string]json.RawMessage
		_ = json.Unmarshal(raw, &perms)
		for _, k := range sortedKeys(perms, data) {
			if !knownFields["permissions"][k] {
				ignore("permissions."+k, fmt.Sprintf("fabro does not honour permissions.%s; it is ignored (line %d)", k, lineOf(data, k)))
			}
		}
	}
	ts := &agentv1.ToolSettings{}
	out.Settings = ts
	if p := f.Permissions; p != nil {
		ts.Permissions = &agentv1.PermissionRules{Allow: p.Allow, Ask: p.Ask, Deny: p.Deny, DefaultMode: p.DefaultMode}
		if m := p.ClaudeMode; m != "" {
			switch mapped, ok := claudeModes[m]; {
			case ok && p.DefaultMode == "":
				ts.Permissions.DefaultMode = mapped
			case !ok:
				ignore("permissions.defaultMode", fmt.Sprintf("defaultMode %q has no fabro equivalent (default, dontAsk; or default_mode ask); the permission level decides (line %d)", m, lineOf(data, m)))
			}
		}
	}
	for _, name := range sortedKeys(f.Hooks, data) {
		raw := f.Hooks[name]
		if ev, ok := hookEvents[name]; ok {
			var hs []fileHook
			if err := strictDecode(raw, &hs); err != nil {
				return nil, &Error{File: source, Line: lineOf(data, name), Rule: name, Msg: "hooks: " + err.Error()}
			}
			for _, h := range hs {
				ph, err := fabroHook(source, data, ev, h)
				if err != nil {
					return nil, err
				}
				ts.Hooks = append(ts.Hooks, ph)
			}
			continue
		}
		ev, ok := claudeHookEvents[name]
		if !ok {
			if name[0] >= 'A' && name[0] <= 'Z' {
				ignore("hooks."+name, fmt.Sprintf("fabro has no %s hook event (PreToolUse, PostToolUse, SessionStart, Stop); its hooks are ignored (line %d)", name, lineOf(data, name)))
				continue
			}
			return nil, &Error{File: source, Line: lineOf(data, name), Rule: name, Msg: "unknown hook event (pre_tool_use, post_tool_use, session_start, prompt_end, or Claude Code's PreToolUse, PostToolUse, SessionStart, Stop)"}
		}
		var groups []claudeHookGroup
		if err := json.Unmarshal(raw, &groups); err != nil {
			return nil, &Error{File: source, Line: lineOf(data, name), Rule: name, Msg: "hooks: " + err.Error()}
		}
		for _, g := range groups {
			matcher, err := claudeMatcher(g.Matcher)
			if err != nil {
				return nil, &Error{File: source, Line: lineOf(data, g.Matcher), Rule: g.Matcher, Msg: err.Error()}
			}
			for _, h := range g.Hooks {
				if h.Type != "" && h.Type != "command" {
					ignore("hooks."+name, fmt.Sprintf("a %q hook is not supported (only command hooks); it is ignored (line %d)", h.Type, lineOf(data, h.Type)))
					continue
				}
				ph := &agentv1.Hook{Event: ev, Matcher: matcher, Command: h.Command, Place: agentv1.HookPlace_HOOK_PLACE_HOST}
				if h.Timeout != nil {
					if *h.Timeout <= 0 {
						return nil, &Error{File: source, Line: lineOf(data, h.Command), Rule: h.Command, Msg: "timeout: a positive number of seconds"}
					}
					ph.Timeout = durationpb.New(time.Duration(*h.Timeout * float64(time.Second)))
				}
				ts.Hooks = append(ts.Hooks, ph)
			}
		}
	}
	// Map order is random: keep hooks in file order.
	sortByLine(ts.Hooks, data)
	for name, m := range f.MCPServers {
		ms := &agentv1.McpServer{Name: name, Command: m.Command, Args: m.Args, Env: m.Env, Url: m.URL}
		switch m.Type {
		case "", "stdio", "http", "streamable-http", "streamable_http":
		default:
			return nil, &Error{File: source, Line: lineOf(data, name), Rule: name, Msg: fmt.Sprintf("MCP server type %q: stdio or http", m.Type)}
		}
		switch m.Place {
		case "", "host":
			ms.Place = agentv1.HookPlace_HOOK_PLACE_HOST
		case "sandbox":
			ms.Place = agentv1.HookPlace_HOOK_PLACE_SANDBOX
		default:
			return nil, &Error{File: source, Line: lineOf(data, name), Rule: name, Msg: fmt.Sprintf("place %q: host or sandbox", m.Place)}
		}
		if m.StartupTimeout != "" {
			d, err := time.ParseDuration(m.StartupTimeout)
			if err != nil || d <= 0 {
				return nil, &Error{File: source, Line: lineOf(data, m.StartupTimeout), Rule: name, Msg: fmt.Sprintf("startup_timeout %q: a positive duration", m.StartupTimeout)}
			}
			ms.StartupTimeout = durationpb.New(d)
		}
		ts.McpServers = append(ts.McpServers, ms)
	}
	slices.SortFunc(ts.McpServers, func(a, b *agentv1.McpServer) int { return lineOf(data, a.GetName()) - lineOf(data, b.GetName()) })
	if f.ApprovalTimeout != "" {
		d, err := time.ParseDuration(f.ApprovalTimeout)
		if err != nil || d <= 0 {
			return nil, &Error{File: source, Line: lineOf(data, "approval_timeout"), Msg: fmt.Sprintf("approval_timeout %q: a positive duration such as \"2m\"", f.ApprovalTimeout)}
		}
		ts.ApprovalTimeout = durationpb.New(d)
	}
	return out, nil
}

// fabroHook is a hook in fabro's own shape.
func fabroHook(source string, data []byte, ev agentv1.HookEvent, h fileHook) (*agentv1.Hook, error) {
	ph := &agentv1.Hook{Event: ev, Matcher: h.Matcher, Command: h.Command}
	switch h.Place {
	case "", "host":
		ph.Place = agentv1.HookPlace_HOOK_PLACE_HOST
	case "sandbox":
		ph.Place = agentv1.HookPlace_HOOK_PLACE_SANDBOX
	default:
		return nil, &Error{File: source, Line: lineOf(data, h.Place), Rule: h.Command, Msg: fmt.Sprintf("place %q: host or sandbox", h.Place)}
	}
	if h.Timeout != "" {
		d, err := time.ParseDuration(h.Timeout)
		if err != nil || d <= 0 {
			return nil, &Error{File: source, Line: lineOf(data, h.Timeout), Rule: h.Command, Msg: fmt.Sprintf("timeout %q: a positive duration such as \"30s\"", h.Timeout)}
		}
		ph.Timeout = durationpb.New(d)
	}
	return ph, nil
}

// claudeMatcher turns a Claude Code matcher (a regular expression over
// tool names: "Edit|Write", "mcp__memory__.*", "" or "*" for all) into
// fabro's (tool-name globs joined by |, fabro's names).
func claudeMatcher(m string) (string, error) {
	m = strings.TrimSpace(m)
	if m == "" || m == "*" || m == ".*" {
		return "", nil
	}
	var alts []string
	for _, a := range strings.Split(m, "|") {
		a = strings.ReplaceAll(strings.TrimSpace(a), ".*", "*")
		if n, ok := claudeTools[a]; ok {
			a = n
		}
		if a == "" || strings.ContainsAny(a, "()[]{}\\ .+?^$") {
			return "", fmt.Errorf("bad matcher %q: tool names, .* and | only", m)
		}
		alts = append(alts, a)
	}
	return strings.Join(alts, "|"), nil
}

func strictDecode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// sortedKeys returns a map's keys in the order the file writes them.
func sortedKeys[V any](m map[string]V, data []byte) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if d := lineOf(data, a) - lineOf(data, b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
}

func sortByLine(hs []*agentv1.Hook, data []byte) {
	pos := func(h *agentv1.Hook) int {
		q, _ := json.Marshal(h.GetCommand())
		return bytes.Index(data, q)
	}
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && pos(hs[j]) < pos(hs[j-1]); j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}
