package main

// What makes `fabro exec` scriptable: the prompt from stdin, machine
// output (json, stream-json), the cost budget and the record of the last
// session per directory behind --continue.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// streamSchemaVersion is the version of the stream-json and json line
// schema (docs/CLI.md). It changes when a field changes meaning or goes
// away; new event types and fields do not change it.
const streamSchemaVersion = 1

// exitBudget is the exit code of a prompt stopped by --max-cost.
const exitBudget = 3

// statusBudgetExceeded is the status a --max-cost stop reports: the agent
// saw an abort, the script sees why.
const statusBudgetExceeded = "BUDGET_EXCEEDED"

// outputFormat is --output-format.
type outputFormat string

const (
	formatText       outputFormat = "text"
	formatJSON       outputFormat = "json"
	formatStreamJSON outputFormat = "stream-json"
)

func (f *outputFormat) String() string { return string(*f) }

func (f *outputFormat) Set(v string) error {
	switch outputFormat(v) {
	case formatText, formatJSON, formatStreamJSON:
		*f = outputFormat(v)
		return nil
	}
	return fmt.Errorf("want text, json or stream-json, not %q", v)
}

// usdFlag is --max-cost: dollars, 0 for no limit.
type usdFlag struct{ micros int64 }

func (u *usdFlag) String() string {
	if u == nil || u.micros == 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(u.micros)/1e6, 'f', -1, 64)
}

func (u *usdFlag) Set(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("want an amount in US dollars such as 0.50, not %q", v)
	}
	if f < 0 {
		return fmt.Errorf("must not be negative (0: no limit), not %s", v)
	}
	if f > 1e9 {
		return fmt.Errorf("%s is more than any prompt may cost", v)
	}
	u.micros = int64(math.Round(f * 1e6))
	return nil
}

// promptText is the prompt of `fabro exec [PROMPT]`: the argument, and
// stdin when the argument is "-" or stdin is not a terminal (read to its
// end, after the argument when both are given).
func promptText(args []string, stdin io.Reader) (string, error) {
	if len(args) > 1 {
		return "", usagef(`exec takes one prompt: fabro exec [flags] "PROMPT" (or the prompt on stdin)`)
	}
	arg := ""
	if len(args) == 1 {
		arg = args[0]
	}
	readStdin := arg == "-"
	if arg == "-" {
		arg = ""
	}
	if !readStdin && stdin != nil {
		f, ok := stdin.(*os.File)
		readStdin = !ok || !term.IsTerminal(int(f.Fd()))
	}
	var piped string
	if readStdin && stdin != nil {
		// A prompt is text a person wrote or a script built: 16 MiB is far
		// past any, and stops a runaway pipe filling memory.
		const limit = 16 << 20
		b, err := io.ReadAll(io.LimitReader(stdin, limit+1))
		if err != nil {
			return "", fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		if len(b) > limit {
			return "", usagef("the prompt on stdin is larger than 16 MiB")
		}
		piped = string(b)
	}
	prompt := arg
	if strings.TrimSpace(piped) != "" {
		if strings.TrimSpace(prompt) != "" {
			prompt += "\n\n"
		}
		prompt += piped
	}
	if strings.TrimSpace(prompt) == "" {
		return "", usagef(`exec needs a prompt: fabro exec [flags] "PROMPT", or the prompt on stdin (fabro exec - < prompt.txt)`)
	}
	return prompt, nil
}

// execResult is the object --output-format json prints at the end, and
// the last line of stream-json (type "result").
type execResult struct {
	Version      int             `json:"version"`
	Type         string          `json:"type"` // "result"
	SessionID    string          `json:"session_id"`
	PromptID     string          `json:"prompt_id,omitempty"`
	Status       string          `json:"status"` // the PromptStatus without its prefix, or BUDGET_EXCEEDED
	ExitCode     int             `json:"exit_code"`
	Result       string          `json:"result"` // the answer's text
	Error        string          `json:"error,omitempty"`
	Turns        int32           `json:"turns"`
	ToolCalls    int32           `json:"tool_calls"`
	DurationMS   int64           `json:"duration_ms"`
	Usage        json.RawMessage `json:"usage"`
	CostUSD      float64         `json:"cost_usd"`
	MaxCostUSD   float64         `json:"max_cost_usd,omitempty"`
	FilesTouched []string        `json:"files_touched"`
	Model        string          `json:"model,omitempty"`
}

// newExecResult builds the result of a prompt's report.
func newExecResult(id string, rep *agentv1.PromptReport, status string, code int, maxMicros int64) execResult {
	usage := rep.GetUsage()
	if usage == nil {
		usage = &llmv1.Usage{}
	}
	u, _ := protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}.Marshal(usage)
	r := execResult{
		Version: streamSchemaVersion, Type: "result", SessionID: id, PromptID: rep.GetPromptId(),
		Status: status, ExitCode: code, Result: rep.GetOutput(), Turns: rep.GetTurns(), ToolCalls: rep.GetToolCalls(),
		Usage: u, CostUSD: float64(rep.GetCost().GetTotalUsdMicros()) / 1e6, MaxCostUSD: float64(maxMicros) / 1e6,
		FilesTouched: append([]string{}, rep.GetFilesTouched()...), Model: rep.GetRoute().GetModel(),
	}
	if code != exitOK {
		r.Error = rep.GetError().GetMessage()
	}
	if t := rep.GetTiming(); t.GetStartTime() != nil && t.GetEndTime() != nil {
		r.DurationMS = t.GetEndTime().AsTime().Sub(t.GetStartTime().AsTime()).Milliseconds()
	}
	return r
}

// eventOneof is the AgentEvent oneof whose field names are the event
// types of stream-json.
var eventOneof = (&agentv1.AgentEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")

// eventType is the type of ev: the name of its oneof field (text_delta,
// tool_call_started ...), as on NATS and in docs/API.md.
func eventType(ev *agentv1.AgentEvent) string {
	if f := ev.ProtoReflect().WhichOneof(eventOneof); f != nil {
		return string(f.Name())
	}
	return "unknown"
}

// streamLine is one line of stream-json: the schema version, the event's
// type and the event as the REST API writes it (proto field names).
func streamLine(ev *agentv1.AgentEvent) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Version int             `json:"version"`
		Type    string          `json:"type"`
		Event   json.RawMessage `json:"event"`
	}{streamSchemaVersion, eventType(ev), b})
}

// writeStreamLine prints ev as a stream-json line on stdout.
func writeStreamLine(e env, ev *agentv1.AgentEvent) {
	b, err := streamLine(ev)
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro: encoding an event:", err)
		return
	}
	e.stdout.Write(append(b, '\n'))
}

// eventTypes is every event type, from the descriptor: the list
// docs/CLI.md must document.
func eventTypes() []string {
	var names []string
	fields := eventOneof.Fields()
	for i := range fields.Len() {
		names = append(names, string(fields.Get(i).Name()))
	}
	return names
}

// transportPrefix is the gRPC client's wrapping of a status message.
var transportPrefix = regexp.MustCompile(`rpc error: code = [A-Za-z]+ desc = `)

// toolErrorText is a failed tool's output as exec shows it: whole, without
// the gRPC transport's wrapping.
func toolErrorText(out string) string {
	return strings.TrimSpace(transportPrefix.ReplaceAllString(out, ""))
}

// lastSessions records the last session `fabro exec` started per
// directory and server, for --continue.
type lastSessions struct{ dir string }

func newLastSessions(dataDir string) lastSessions {
	return lastSessions{dir: filepath.Join(dataDir, "exec", "last-session")}
}

func (l lastSessions) file(server, workdir string) string {
	h := sha256.Sum256([]byte(server + "\x00" + workdir))
	return filepath.Join(l.dir, hex.EncodeToString(h[:16]))
}

// record notes id as the latest session of workdir on server ("" for in
// process). Written whole then renamed: a concurrent exec reads one id or
// the other, never half.
func (l lastSessions) record(server, workdir, id string) error {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(l.dir, ".tmp-*")
	if err != nil {
		return err
	}
	rec, _ := json.Marshal(map[string]string{"session_id": id, "server": server, "dir": workdir, "time": time.Now().UTC().Format(time.RFC3339)})
	if _, err := f.Write(rec); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), l.file(server, workdir))
}

// latest is the last session started in workdir on server.
func (l lastSessions) latest(server, workdir string) (string, error) {
	b, err := os.ReadFile(l.file(server, workdir))
	if errors.Is(err, os.ErrNotExist) {
		where := "in this process"
		if server != "" {
			where = "on " + server
		}
		return "", fmt.Errorf("--continue: no session was started in %s %s (with this data directory)", workdir, where)
	}
	if err != nil {
		return "", err
	}
	var rec struct {
		ID string `json:"session_id"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.ID == "" {
		return "", fmt.Errorf("--continue: the record %s is damaged", l.file(server, workdir))
	}
	return rec.ID, nil
}
