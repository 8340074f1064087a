package loop

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// sandboxGone names the call that found the sandbox gone, or (fatal) the
// call whose failure stops the prompt.
type sandboxGone struct {
	tool, output string
	fatal        bool
}

// runTools runs one turn's calls and commits their results, in call order,
// as one tool message. Calls run in parallel, unless one of them is a
// serial tool (shell): then the whole round runs one call at a time, in
// the model's order. A cancelled round gives "Cancelled" results to the
// calls that did not finish, so every call has its result.
func (a *Agent) runTools(ctx context.Context, ps *promptState, calls []ToolCall) *sandboxGone {
	start := a.opts.Now()
	results := make([]ToolResult, len(calls))
	serial := false
	for _, c := range calls {
		serial = serial || a.tools.Serial(c.Name)
	}
	if serial || len(calls) == 1 {
		for i, c := range calls {
			results[i] = a.runTool(ctx, ps.id, c)
		}
	} else {
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() { results[i] = a.runTool(ctx, ps.id, c) })
		}
		wg.Wait()
	}
	ps.tool += a.opts.Now().Sub(start)
	ps.toolCalls += int32(len(calls))

	msg := &llmv1.Message{Role: llmv1.Role_ROLE_TOOL, Parts: make([]*llmv1.ContentPart, len(calls))}
	var gone *sandboxGone
	for i, c := range calls {
		r := results[i]
		msg.Parts[i] = &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{
			ToolCallId: c.ID, Name: c.Name, IsError: r.IsError,
			Content: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: r.Output}}}},
		}}}
		for _, img := range r.Images {
			tr := msg.Parts[i].GetToolResult()
			tr.Content = append(tr.Content, &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: img}})
		}
		if r.Kind == agentv1.ToolErrorKind_TOOL_ERROR_KIND_SANDBOX_UNAVAILABLE && gone == nil {
			gone = &sandboxGone{tool: c.Name, output: r.Output}
		}
		if r.Fatal && gone == nil {
			gone = &sandboxGone{tool: c.Name, output: r.Output, fatal: true}
		}
		if !r.IsError {
			for _, f := range touchedFiles(c) {
				ps.files[f] = true
			}
		}
	}
	a.appendMessage(msg)
	return gone
}

func (a *Agent) runTool(ctx context.Context, promptID string, c ToolCall) ToolResult {
	a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_ToolCallStarted{ToolCallStarted: &agentv1.ToolCallStarted{
		ToolName: c.Name, ToolCallId: c.ID, Arguments: c.Arguments}}})
	start := time.Now()
	ctx, span := a.startToolSpan(ctx, c)
	var r ToolResult
	defer func() { endToolSpan(ctx, span, c, r) }()
	if ctx.Err() != nil {
		r = cancelledResult()
	} else {
		r = a.tools.Run(ctx, c)
		if ctx.Err() != nil && r.IsError && r.Kind != agentv1.ToolErrorKind_TOOL_ERROR_KIND_SANDBOX_UNAVAILABLE {
			r = cancelledResult()
		}
	}
	full := r.Full
	if full == "" {
		full = r.Output
	}
	observed, retained, omitted := r.ObservedBytes, r.RetainedBytes, r.OmittedBytes
	if observed == 0 && retained == 0 && omitted == 0 {
		observed, retained = int64(len(full)), int64(len(full))
	}
	a.event(promptID, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_ToolCallCompleted{ToolCallCompleted: &agentv1.ToolCallCompleted{
		ToolName: c.Name, ToolCallId: c.ID, Output: full, IsError: r.IsError, ErrorKind: r.Kind,
		Duration: durationpb.New(time.Since(start)), Process: r.Process,
		OutputBytesObserved: observed, OutputBytesRetained: retained, OutputBytesOmitted: omitted,
		ModelCharsOmitted: r.CharsOmitted,
	}}})
	return r
}

func cancelledResult() ToolResult {
	return ToolResult{Output: "Cancelled", IsError: true, Kind: agentv1.ToolErrorKind_TOOL_ERROR_KIND_CANCELLED}
}

// touchedFiles names the files a successful write call changed.
func touchedFiles(c ToolCall) []string {
	switch c.Name {
	case "write_file", "edit_file", "Write", "Edit":
		var args struct {
			Path     string `json:"path"`
			FilePath string `json:"file_path"`
		}
		if json.Unmarshal([]byte(c.Arguments), &args) != nil {
			return nil
		}
		if args.FilePath != "" {
			return []string{args.FilePath}
		}
		if args.Path != "" {
			return []string{args.Path}
		}
	case "apply_patch":
		patch := c.Arguments
		var args struct {
			Input string `json:"input"`
			Patch string `json:"patch"`
		}
		if json.Unmarshal([]byte(c.Arguments), &args) == nil {
			patch = args.Input + args.Patch
		}
		var out []string
		for line := range strings.Lines(patch) {
			line = strings.TrimSpace(line)
			for _, p := range []string{"*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "} {
				if f, ok := strings.CutPrefix(line, p); ok {
					out = append(out, f)
				}
			}
		}
		return out
	}
	return nil
}
