package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent"
)

// defaultSettingsFile is $FABRO_SETTINGS, else ~/.config/fabro/settings.json
// (or $XDG_CONFIG_HOME's).
func defaultSettingsFile(lookupEnv func(string) (string, bool)) string {
	if p, ok := lookupEnv("FABRO_SETTINGS"); ok && p != "" {
		return p
	}
	if d, ok := lookupEnv("XDG_CONFIG_HOME"); ok && d != "" {
		return filepath.Join(d, "fabro", "settings.json")
	}
	if h, ok := lookupEnv("HOME"); ok && h != "" {
		return filepath.Join(h, ".config", "fabro", "settings.json")
	}
	return ""
}

// userSettings reads your settings file, which lives outside every
// sandbox, and approves a project settings file when that file names its
// hash in trusted_project_settings (the first such file: CreateSession
// approves one hash). warnings name the fields the file has that fabro
// does not honour.
func userSettings(path, dir string) (ts *agentv1.ToolSettings, approved string, warnings []string, err error) {
	if path == "" {
		return nil, "", nil, nil
	}
	ts, trusted, warnings, err := agent.ParseSettingsFile(path)
	if err != nil {
		return nil, "", nil, err
	}
	for _, f := range agent.ProjectSettingsFiles {
		if data, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if h := agent.ProjectSettingsHash(data); slices.Contains(trusted, h) {
				return ts, h, warnings, nil
			}
		}
	}
	return ts, "", warnings, nil
}

// approvalAsker answers approval_requested events: on a terminal it asks
// the person; without one it denies, saying why.
type approvalAsker struct {
	e        env
	terminal bool
	lines    chan string // the terminal's lines; closed at EOF
}

func newApprovalAsker(e env) *approvalAsker {
	a := &approvalAsker{e: e}
	if f, ok := e.stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			a.terminal = true
		}
	}
	return a
}

// readLine returns the next line typed, or ok false at EOF or when ctx
// ends (an interrupt while asking). The reader goroutine starts with the
// first question and ends at EOF or with the process.
func (a *approvalAsker) readLine(ctx context.Context) (string, bool) {
	if a.lines == nil {
		a.lines = make(chan string)
		go func() {
			defer close(a.lines)
			in := bufio.NewReader(a.e.stdin)
			for {
				line, err := in.ReadString('\n')
				if line != "" {
					a.lines <- line
				}
				if err != nil {
					return
				}
			}
		}()
	}
	select {
	case line, ok := <-a.lines:
		return line, ok
	case <-ctx.Done():
		return "", false
	}
}

func (a *approvalAsker) ask(ctx context.Context, ar *agentv1.ApprovalRequested) *agentv1.ApproveRequest {
	req := &agentv1.ApproveRequest{ApprovalId: ar.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY}
	who := ""
	if ar.GetRequestingSessionId() != "" {
		who = " (subagent " + ar.GetRequestingSessionId() + ")"
	}
	if !a.terminal {
		fmt.Fprintf(a.e.stderr, "fabro: %s %s%s needs approval (%s); no terminal to ask on, so it is denied\n",
			ar.GetToolName(), clip(ar.GetArguments(), 200), who, ar.GetReason())
		req.Message = "fabro exec runs without a terminal, so nobody could approve this call; it is denied"
		return req
	}
	for {
		fmt.Fprintf(a.e.stderr, "? allow %s %s%s (%s)\n  [y] once  [a] for this session  [n] deny: ", ar.GetToolName(), clip(ar.GetArguments(), 200), who, ar.GetReason())
		line, ok := a.readLine(ctx)
		answer := strings.ToLower(strings.TrimSpace(line))
		switch {
		case answer == "y" || answer == "yes":
			req.Decision = agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE
			return req
		case answer == "a" || answer == "always":
			req.Decision = agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION
			return req
		case !ok:
			req.Message = "nobody answered"
			return req
		case answer == "n" || answer == "no":
			fmt.Fprint(a.e.stderr, "  why (told to the model; empty for none): ")
			why, _ := a.readLine(ctx)
			req.Message = strings.TrimSpace(why)
			return req
		}
	}
}
